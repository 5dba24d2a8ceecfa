// Softmax backward over rows of any length N <= 128: given the forward's output Y and the gradient DY [M, N] f32,
//   DX = Y (DY - sum_j DY Y).
// Columns past N read as zero in both, so they add nothing to the row sum, and their stores are dropped.
builtin.module {
  func.func @softmax_bwd(
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %y = tile.load %yw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %dyw = tile.view %DY[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %p = tile.mul %dy, %y : !tile.tile<64x128xf32, register>
    %s = tile.row_sum %p : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %d = tile.sub %dy, %s : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %dx = tile.mul %y, %d : !tile.tile<64x128xf32, register>
    %dxw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %dx, %dxw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    func.return
  }
}
