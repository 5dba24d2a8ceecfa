// The mean and variance of every element of X [M, N] f32 (any M, N <= 64), finished by the last thread block (a
// split reduction with its epilogue in the same launch, no second kernel): each block adds its sum and sum of
// squares ([1, 1] tiles: tile.row_sum, then tile.col_sum of the [64, 1] column) into the scratch S [2] with
// tile.atomic_add; every block but the last then signals the counter CNT, and the last waits for the others'
// ceildiv(M, 64) - 1 signals, reads S back (tile.load_broadcast of each one-element window into a [1, 1] tile) and writes
//   MEAN[0] = S[0] / (M N),   VAR[0] = S[1] / (M N) - MEAN[0]^2   (data with a mean near 0: no cancellation).
builtin.module {
  func.func @global_moments(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %MEAN: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>, tile.role = "out"},
      %VAR: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>, tile.role = "out"},
      %S: !tile.tile<2xf32, global> {tile.dims = #tile.dims<2>, tile.role = "scratch"},
      %CNT: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>, tile.role = "scratch"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %m, %c64 : index
    %last = arith.subi %nb, %c1 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %r = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %rc = tile.reshape %r : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %t = tile.col_sum %rc : !tile.tile<64x1xf32, register> -> !tile.tile<1x1xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %r2 = tile.row_sum %x2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %rc2 = tile.reshape %r2 : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %t2 = tile.col_sum %rc2 : !tile.tile<64x1xf32, register> -> !tile.tile<1x1xf32, register>
    %s0w = tile.view %S[%c0] : !tile.tile<2xf32, global> -> !tile.tile<1xf32, global>
    tile.atomic_add %t, %s0w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    %s1w = tile.view %S[%c1] : !tile.tile<2xf32, global> -> !tile.tile<1xf32, global>
    tile.atomic_add %t2, %s1w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    %cnt = tile.view %CNT[%c0] : !tile.tile<1xi32, global> -> !tile.tile<1xi32, global>
    %is_last = arith.cmpi eq, %b, %last : index
    scf.if %is_last {
      tile.sem_wait %cnt, %last : !tile.tile<1xi32, global>
      %s0 = tile.load_broadcast %s0w : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>
      %s1 = tile.load_broadcast %s1w : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>
      %mn = arith.muli %m, %n : index
      %mni = arith.index_cast %mn : index to i32
      %mnf = arith.sitofp %mni : i32 to f32
      %cnt_f = tile.splat %mnf : f32 -> !tile.tile<1x1xf32, register>
      %mean = tile.div %s0, %cnt_f : !tile.tile<1x1xf32, register>
      %ex2 = tile.div %s1, %cnt_f : !tile.tile<1x1xf32, register>
      %mean2 = tile.mul %mean, %mean : !tile.tile<1x1xf32, register>
      %var = tile.sub %ex2, %mean2 : !tile.tile<1x1xf32, register>
      %mw = tile.view %MEAN[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
      tile.store_global %mean, %mw : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
      %vw = tile.view %VAR[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
      tile.store_global %var, %vw : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    } else {
      tile.sem_signal %cnt : !tile.tile<1xi32, global>
    }
    func.return
  }
}
