// A grid rounded up: batches taken two at a time (z runs to 2 ceildiv(B, 2)), so with an odd batch count the
// last z block indexes a batch past the tensor and must read 0 and store nothing:
//   Y[b, i, j] = X[b, i, j] W[b, j],   X, Y [B, M, N] f32, W [B, N] f32 (a [1, 64] window per batch), N <= 64.
builtin.module {
  func.func @batch_rounded_grid(
      %X: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>},
      %W: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, N>},
      %Y: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), 1, 2 * ceildiv(B, 2)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %z = tile.program_id z : index
    %m0 = arith.muli %bx, %c64 : index
    %xw = tile.view %X[%z, %m0, %c0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %ww = tile.view %W[%z, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x64xf32, global>
    %w = tile.load %ww : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, register>
    %y = tile.mul %x, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%z, %m0, %c0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
