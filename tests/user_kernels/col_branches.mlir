// One block, X [M, N] f32 with M <= 64, an scf.for over the column blocks of 32 that stores into 1-D outputs on
// every trip: E[j] = max_i X[i, j] if M > 32 else min_i X[i, j] (a tile.col_max and a tile.col_min in the two
// branches of an scf.if yielding the [1x32] column vector), CNT[j] = the i32 count of positive entries (a
// tile.col_sum of selected ones), F[j] = X[0, j] + CNT[j] (a [1x32] load's own col_sum, and an i32-to-f32 cast).
builtin.module {
  func.func @col_branches(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %E: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %CNT: !tile.tile<?xi32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %F: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %cbn = arith.constant 32 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %cbn : index
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %big = arith.cmpi ugt, %m, %c32 : index
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x32xf32, register>
    %pinf = tile.fill 0x7F800000 : !tile.tile<64x32xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x32xf32, register>
    %one_i = tile.fill 1 : !tile.tile<64x32xi32, register>
    %zero_i = tile.fill 0 : !tile.tile<64x32xi32, register>
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %cbn : index
      %xw = tile.view %X[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %row = tile.iota rows : !tile.tile<64xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<64xi32, register>
      %e = scf.if %big -> (!tile.tile<1x32xf32, register>) {
        %xl = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x32xf32, register>
        %mx = tile.col_max %xl : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
        scf.yield %mx : !tile.tile<1x32xf32, register>
      } else {
        %xh = tile.select %past, %pinf, %x : !tile.tile<64xi1, register>, !tile.tile<64x32xf32, register>
        %mn = tile.col_min %xh : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
        scf.yield %mn : !tile.tile<1x32xf32, register>
      }
      %ew = tile.view %E[%n0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
      tile.store_global %e, %ew : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
      %pos = tile.cmp gt %x, %zero : !tile.tile<64x32xf32, register>
      %flag = tile.select %pos, %one_i, %zero_i : !tile.tile<64x32xi1, register>, !tile.tile<64x32xi32, register>
      %cnt = tile.col_sum %flag : !tile.tile<64x32xi32, register> -> !tile.tile<1x32xi32, register>
      %cw = tile.view %CNT[%n0] : !tile.tile<?xi32, global> -> !tile.tile<32xi32, global>
      tile.store_global %cnt, %cw : !tile.tile<1x32xi32, register>, !tile.tile<32xi32, global>
      %fw = tile.view %X[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x32xf32, global>
      %f = tile.load %fw : !tile.tile<1x32xf32, global> -> !tile.tile<1x32xf32, register>
      %fs = tile.col_sum %f : !tile.tile<1x32xf32, register> -> !tile.tile<1x32xf32, register>
      %cf = tile.cast %cnt : !tile.tile<1x32xi32, register> -> !tile.tile<1x32xf32, register>
      %fsum = tile.add %fs, %cf : !tile.tile<1x32xf32, register>
      %ffw = tile.view %F[%n0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
      tile.store_global %fsum, %ffw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    }
    func.return
  }
}
