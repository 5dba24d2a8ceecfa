// Column reductions of X [M, N] f32 (any M, N): S[j] = sum_i X[i, j] and MX[j] = max_i X[i, j]. One block per
// 64 columns loops over the row blocks, reading X^T tiles [64 columns, 64 rows] with tile.gather (coordinates outside X read as 0: masked to -inf for the max with tile.select) and
// carrying the running sums and maxima as row vectors.
builtin.module {
  func.func @column_reduce(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %nm = arith.ceildivui %m, %c64 : index
    %mt = tile.splat %m : index -> !tile.tile<1x64xi32, register>
    %cols = tile.iota rows offset %n0 : !tile.tile<64x1xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %s0 = tile.fill 0.0 : !tile.tile<64xf32, register>
    %x0 = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %r:2 = scf.for %j = %c0 to %nm step %c1 iter_args(%s = %s0, %mx = %x0) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %m0 = arith.muli %j, %c64 : index
      %rows = tile.iota cols offset %m0 : !tile.tile<1x64xi32, register>
      %xt = tile.gather %X[%rows, %cols] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
      %bs = tile.row_sum %xt : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %out = tile.cmp ge %rows, %mt : !tile.tile<1x64xi32, register>
      %xm = tile.select %out, %ninf, %xt : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %s2 = tile.add %s, %bs : !tile.tile<64xf32, register>
      %mx2 = tile.element_max %mx, %bm : !tile.tile<64xf32, register>
      scf.yield %s2, %mx2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#0, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %mw = tile.view %MX[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#1, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
