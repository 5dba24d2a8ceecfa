// Integer index arithmetic: Y[i, j] = ((i * N + j) // 7) % 5 - j % 3 + D[i] // (j - 39) in i32 (Python floor
// semantics; a zero divisor gives 0), F = f32(Y) * 0.5 and R[i] = D[i] % 7 (an i32 row vector).
// D [M] i32; any M, N <= 64, N given at launch.
builtin.module {
  func.func @index_math(
      %D: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %Y: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %F: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %R: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>, tile.launch_sizes = ["N"]} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %c7 = arith.constant 7 : index
    %c5 = arith.constant 5 : index
    %c3 = arith.constant 3 : index
    %c39 = arith.constant 39 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %Y[1] : !tile.tile<?x?xi32, global>
    %row = tile.iota rows offset %m0 : !tile.tile<64x64xi32, register>
    %col = tile.iota cols : !tile.tile<64x64xi32, register>
    %nt = tile.splat %n : index -> !tile.tile<64x64xi32, register>
    %rn = tile.mul %row, %nt : !tile.tile<64x64xi32, register>
    %lin = tile.add %rn, %col : !tile.tile<64x64xi32, register>
    %s7 = tile.splat %c7 : index -> !tile.tile<64x64xi32, register>
    %q = tile.floordiv %lin, %s7 : !tile.tile<64x64xi32, register>
    %s5 = tile.splat %c5 : index -> !tile.tile<64x64xi32, register>
    %r5 = tile.mod %q, %s5 : !tile.tile<64x64xi32, register>
    %s3 = tile.splat %c3 : index -> !tile.tile<64x64xi32, register>
    %j3 = tile.mod %col, %s3 : !tile.tile<64x64xi32, register>
    %y0 = tile.sub %r5, %j3 : !tile.tile<64x64xi32, register>
    %dw = tile.view %D[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %d = tile.load %dw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %s39 = tile.splat %c39 : index -> !tile.tile<64x64xi32, register>
    %den = tile.sub %col, %s39 : !tile.tile<64x64xi32, register>
    %dq = tile.floordiv %d, %den : !tile.tile<64xi32, register>, !tile.tile<64x64xi32, register>
    %y = tile.add %y0, %dq : !tile.tile<64x64xi32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %yf = tile.cast %y : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
    %h = tile.scale %yf by 0.5 : !tile.tile<64x64xf32, register>
    %fw = tile.view %F[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %h, %fw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %r7 = tile.splat %c7 : index -> !tile.tile<64xi32, register>
    %r = tile.mod %d, %r7 : !tile.tile<64xi32, register>
    %rw = tile.view %R[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r, %rw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    func.return
  }
}
