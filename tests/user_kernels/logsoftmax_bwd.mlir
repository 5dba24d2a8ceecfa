// Log-softmax backward over rows of any length (a vocabulary's), as a training kernel writes it after the
// forward's log-probabilities Y [M, N] f32 and the gradient DY [M, N] f32:
//   DX[i, j] = DY[i, j] - exp(Y[i, j]) sum_k DY[i, k].
// One block per 64 rows makes two passes over blocks of 64 columns: the first sums DY (columns past N read as 0
// and add nothing), the second writes DX (columns past N are not stored).
builtin.module {
  func.func @logsoftmax_bwd(
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %Y[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %c64 : index
    %s0 = tile.fill 0.0 : !tile.tile<64xf32, register>
    %s = scf.for %j = %c0 to %nb step %c1 iter_args(%acc = %s0) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %part = tile.row_sum %dy : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %y = tile.load %yw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %p = tile.exp %y : !tile.tile<64x64xf32, register>
      %ps = tile.mul %p, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %dx = tile.sub %dy, %ps : !tile.tile<64x64xf32, register>
      %dxw = tile.view %DX[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %dx, %dxw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    func.return
  }
}
