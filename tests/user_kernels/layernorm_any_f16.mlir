// LayerNorm over rows of any length N (1, 7, 33, 100, 257: never a multiple of the tile), f16 activations with
// bf16 parameters, statistics in f32, bf16 out, as a mixed-precision checkpoint runs it:
//   mean = sum_j x / N,  var = sum_j (x - mean)^2 / N,  rstd = rsqrt(var + 1e-5),
//   Y = bf16((x - mean) rstd gamma + beta),  MEAN [M], RSTD [M] f32 saved for the backward,
// X [M, N] f16, GAMMA, BETA [N] bf16 (read an element at a time: their rows may start on any even byte).
// One block per 64 rows, three passes over 64-column blocks: the sum, the centred sum of squares (columns past
// N selected to 0: x - mean is not 0 there) and the normalized store (columns past N not stored).
builtin.module {
  func.func @layernorm_any_f16(
      %X: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>},
      %GAMMA: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>},
      %BETA: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf16, global>
    %nb = arith.ceildivui %n, %c64 : index
    %ni = arith.index_cast %n : index to i32
    %nf = arith.sitofp %ni : i32 to f32
    %nt = tile.splat %nf : f32 -> !tile.tile<1x1xf32, register>
    %nti = tile.splat %n : index -> !tile.tile<1x1xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %eps = tile.fill 1.0e-05 : !tile.tile<1x1xf32, register>
    %s0 = tile.fill 0.0 : !tile.tile<64xf32, register>
    %sum = scf.for %j = %c0 to %nb step %c1 iter_args(%acc = %s0) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
      %part = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %mean1 = tile.div %sum, %nt : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    %mean = tile.reshape %mean1 : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %sq = scf.for %j = %c0 to %nb step %c1 iter_args(%acc = %s0) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
      %d = tile.sub %x, %mean : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %outside = tile.cmp ge %col, %nti : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
      %dm = tile.select %outside, %zero, %d : !tile.tile<1x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
      %d2 = tile.mul %dm, %dm : !tile.tile<64x64xf32, register>
      %part = tile.row_sum %d2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %var1 = tile.div %sq, %nt : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    %ve1 = tile.add %var1, %eps : !tile.tile<64x1xf32, register>, !tile.tile<1x1xf32, register>
    %ve = tile.reshape %ve1 : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %rstd = tile.rsqrt %ve : !tile.tile<64xf32, register>
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
      %d = tile.sub %x, %mean : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %xhat = tile.mul %d, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %gw = tile.view %GAMMA[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>
      %gh = tile.load_broadcast %gw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>
      %g = tile.cast %gh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
      %bw = tile.view %BETA[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>
      %bh = tile.load_broadcast %bw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>
      %bt = tile.cast %bh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
      %y0 = tile.mul %xhat, %g : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %y = tile.add %y0, %bt : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %yb = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.store_global %yb, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    }
    %mw = tile.view %MEAN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mean, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rstd, %rw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
