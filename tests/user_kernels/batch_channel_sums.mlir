// Per-batch channel sums of X [B, M, N] f32 over rows of any length: S[b, j] = sum_i X[b, i, j], stored twice,
// into the [1x32] window of S's row b and into a 1-D window of R's row b (a [1, N] column vector into a 1-D
// window of a 2-D tensor). Block (x, y) takes 32 channels of batch y and loops over row blocks of 64.
builtin.module {
  func.func @batch_channel_sums(%X: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>},
      %S: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, N>, tile.role = "out"},
      %R: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 32), B>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c32 = arith.constant 32 : index
    %bx = tile.program_id x : index
    %bb = tile.program_id y : index
    %n0 = arith.muli %bx, %c32 : index
    %m = tile.dim %X[1] : !tile.tile<?x?x?xf32, global>
    %mb = arith.ceildivui %m, %c64 : index
    %z = tile.fill 0.0 : !tile.tile<1x32xf32, register>
    %s = scf.for %i = %c0 to %mb step %c1 iter_args(%acc = %z) -> (!tile.tile<1x32xf32, register>) {
      %m0 = arith.muli %i, %c64 : index
      %xw = tile.view %X[%bb, %m0, %n0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %p = tile.col_sum %x : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %a = tile.add %acc, %p : !tile.tile<1x32xf32, register>
      scf.yield %a : !tile.tile<1x32xf32, register>
    }
    %sw = tile.view %S[%bb, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x32xf32, global>
    tile.store_global %s, %sw : !tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, global>
    %rw = tile.view %R[%bb, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %s, %rw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    func.return
  }
}
