// Row softmax of X [M, 64] f32: Y[i, :] = exp(X[i, :] - max_j X[i, j]) / sum_j exp(...). One block per 64 rows.
builtin.module {
  func.func @row_softmax(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %m = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %d = tile.sub %x, %m : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %e = tile.exp %d : !tile.tile<64x64xf32, register>
    %s = tile.row_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %y = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
