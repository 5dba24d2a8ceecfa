// Column softmax of X [M, N] f32, M <= 64 (one row block): Y[:, j] = softmax(X[:, j]) over the rows. One block per
// 64 columns: tile.col_max of the tile with rows past M selected to -inf, tile.exp of the difference, tile.col_sum,
// and a division by the [1x64] column vector.
builtin.module {
  func.func @col_softmax(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %xw = tile.view %X[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %row = tile.iota rows : !tile.tile<64xi32, register>
    %past = tile.cmp ge %row, %mt : !tile.tile<64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %xm = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x64xf32, register>
    %mx = tile.col_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %d = tile.sub %xm, %mx : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %e = tile.exp %d : !tile.tile<64x64xf32, register>
    %s = tile.col_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %y = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
