// A transpose Y = X^T, X [M, N] f32, Y [N, M], any M, N: block (x, y) writes the [64, 64] tile of Y at rows 64x,
// columns 64y, reading X at swapped coordinates with tile.gather (rows and columns of iota, offset by the
// block's corner; coordinates outside X read as 0 and the stores past Y's edge are dropped). An i32 copy
// of the row index goes along (YI [N, M] i32 = the source row of each element), to move i32 tiles too.
builtin.module {
  func.func @transpose(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<N, M>, tile.role = "out"},
      %YI: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<N, M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64), ceildiv(M, 64)>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %r0 = arith.muli %bx, %c64 : index
    %c0 = arith.muli %by, %c64 : index
    %yrow = tile.iota rows offset %r0 : !tile.tile<64x1xi32, register>
    %ycol = tile.iota cols offset %c0 : !tile.tile<1x64xi32, register>
    %t = tile.gather %X[%ycol, %yrow] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%r0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %t, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %zero = tile.fill 0 : !tile.tile<64x64xi32, register>
    %src = tile.add %zero, %ycol : !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register>
    %yiw = tile.view %YI[%r0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %src, %yiw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
