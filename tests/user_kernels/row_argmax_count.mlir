// Integer row reductions (tile.row_max / tile.row_min / tile.row_sum of i32 tiles) in a kernel a user writes for
// sampling and statistics, rows of any length N in column blocks of 64: IDX[i] = argmax_j X[i, j] (NumPy's first
// index on ties: the block's smallest tying column by an i32 row min, an earlier block kept on a tie),
// CNT[i] = #{j : X[i, j] > 0}, TOT[i] = sum_j K[i, j] wrapping modulo 2^32, KMAX[i] = max_j K[i, j] (signed),
// XMIN[i] = min_j X[i, j] (an f32 row min). Columns past N are masked with tile.iota: -inf for the maximum,
// +inf for the minimum, 0 for the count and the sum, -2^31 for KMAX.
builtin.module {
  func.func @row_argmax_count(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %K: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>},
      %IDX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %CNT: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %TOT: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KMAX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %XMIN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %pinf = tile.fill 0x7F800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0 : !tile.tile<64x64xi32, register>
    %one = tile.fill 1 : !tile.tile<64x64xi32, register>
    %lowest = tile.fill -2147483648 : !tile.tile<64x64xi32, register>
    %far = tile.fill 1073741824 : !tile.tile<64x64xi32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %i_init = tile.fill 0 : !tile.tile<64xi32, register>
    %k_init = tile.fill -2147483648 : !tile.tile<64xi32, register>
    %x_init = tile.fill 0x7F800000 : !tile.tile<64xf32, register>
    %r:6 = scf.for %j = %c0 to %nb step %c1 iter_args(%mx = %m_init, %ix = %i_init, %cnt = %i_init, %tot = %i_init, %kmx = %k_init, %xmn = %x_init)
        -> (!tile.tile<64xf32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %xr = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %kw = tile.view %K[%m0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
      %kr = tile.load %kw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
      %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %cols, %nt : !tile.tile<1x64xi32, register>
      %x = tile.select %past, %ninf, %xr : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %at_max = tile.cmp eq %x, %bm : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %cand = tile.select %at_max, %cols, %far : !tile.tile<64x64xi1, register>, !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>
      %first = tile.row_min %cand : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
      %xl = tile.select %past, %pinf, %xr : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bl = tile.row_min %xl : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %xmn2 = tile.element_min %xmn, %bl : !tile.tile<64xf32, register>
      %better = tile.cmp gt %bm, %mx : !tile.tile<64xf32, register>
      %ix2 = tile.select %better, %first, %ix : !tile.tile<64xi1, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>
      %mx2 = tile.element_max %mx, %bm : !tile.tile<64xf32, register>
      %zf = tile.fill 0.0 : !tile.tile<64x64xf32, register>
      %is_pos = tile.cmp gt %x, %zf : !tile.tile<64x64xf32, register>
      %flags = tile.select %is_pos, %one, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, register>
      %bc = tile.row_sum %flags : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
      %cnt2 = tile.add %cnt, %bc : !tile.tile<64xi32, register>
      %k = tile.select %past, %zero, %kr : !tile.tile<1x64xi1, register>, !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, register>
      %bt = tile.row_sum %k : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
      %tot2 = tile.add %tot, %bt : !tile.tile<64xi32, register>
      %kl = tile.select %past, %lowest, %kr : !tile.tile<1x64xi1, register>, !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, register>
      %bk = tile.row_max %kl : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
      %kmx2 = tile.element_max %kmx, %bk : !tile.tile<64xi32, register>
      scf.yield %mx2, %ix2, %cnt2, %tot2, %kmx2, %xmn2 : !tile.tile<64xf32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>, !tile.tile<64xf32, register>
    }
    %iw = tile.view %IDX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#1, %iw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %cw = tile.view %CNT[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#2, %cw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %tw = tile.view %TOT[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#3, %tw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %kw2 = tile.view %KMAX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#4, %kw2 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %xw2 = tile.view %XMIN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#5, %xw2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
