// Welford-style (Chan's parallel form) column mean and variance of X [M, N] f32 over rows of any length, stable
// at a large mean: one block per 32 columns loops over row blocks of 64, each block's mean (tile.col_sum over its
// row count n_b, a [1x1] splat) and centred sum of squares (rows past M selected to 0), merged into the running
// mean and M2 with delta = mean_b - mean, mean += delta n_b / n, M2 += M2_b + delta^2 n_a n_b / n; MEAN[j] and
// VAR[j] = M2 / M (population) into 1-D outputs.
builtin.module {
  func.func @welford(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %VAR: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 32)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 32 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %cbn : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %mb = arith.ceildivui %m, %cbm : index
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x32xf32, register>
    %mu0 = tile.fill 0.0 : !tile.tile<1x32xf32, register>
    %m20 = tile.fill 0.0 : !tile.tile<1x32xf32, register>
    %cnt0 = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %st:3 = scf.for %i = %c0 to %mb step %c1 iter_args(%mu = %mu0, %m2 = %m20, %na = %cnt0) -> (!tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>) {
      %m0 = arith.muli %i, %cbm : index
      %left = arith.subi %m, %m0 : index
      %nbi = arith.minui %left, %cbm : index
      %nbl = arith.index_cast %nbi : index to i64
      %nbf = arith.sitofp %nbl : i64 to f32
      %nb = tile.splat %nbf : f32 -> !tile.tile<1x1xf32, register>
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %row = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<64xi32, register>
      %bs = tile.col_sum %x : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %bmu = tile.div %bs, %nb : !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>
      %d = tile.sub %x, %bmu : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
      %dm = tile.select %past, %zero, %d : !tile.tile<64xi1, register>, !tile.tile<64x32xf32, register>
      %d2 = tile.mul %dm, %dm : !tile.tile<64x32xf32, register>
      %bm2 = tile.col_sum %d2 : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %n = tile.add %na, %nb : !tile.tile<1x1xf32, register>
      %delta = tile.sub %bmu, %mu : !tile.tile<1x32xf32, register>
      %frac = tile.div %nb, %n : !tile.tile<1x1xf32, register>
      %step = tile.mul %delta, %frac : !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>
      %mu1 = tile.add %mu, %step : !tile.tile<1x32xf32, register>
      %dd = tile.mul %delta, %delta : !tile.tile<1x32xf32, register>
      %nab = tile.mul %na, %frac : !tile.tile<1x1xf32, register>
      %corr = tile.mul %dd, %nab : !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>
      %m2a = tile.add %m2, %bm2 : !tile.tile<1x32xf32, register>
      %m21 = tile.add %m2a, %corr : !tile.tile<1x32xf32, register>
      scf.yield %mu1, %m21, %n : !tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>
    }
    %var = tile.div %st#1, %st#2 : !tile.tile<1x32xf32, register>, !tile.tile<1x1xf32, register>
    %mw = tile.view %MEAN[%n0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %st#0, %mw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    %vw = tile.view %VAR[%n0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %var, %vw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    func.return
  }
}
