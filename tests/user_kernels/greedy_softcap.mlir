// Greedy decoding's last step over a vocabulary of any length, with Gemma 2's final logit soft-cap, one pass:
// for logits X [M, V] f32 and z = 30 tanh(x / 30),
//   TOK[i] = argmax_j X[i, j]  (i32; the first index among equals, NumPy's; tanh is monotone, so z's argmax too),
//   LSE[i] = log sum_j exp(z[i, j]),   LOGP[i] = max_j z[i, j] - LSE[i]  (the chosen token's log-probability).
// One block per 64 rows loops over 64-column blocks carrying the running max m of z, the running sum
// l = l exp(m_old - m_new) + sum exp(z - m_new) (tile.exp_diff, tile.exp_subtract), the best x and its column
// (a block's first column at its max by an i32 tile.row_min; a later block wins only where strictly greater).
// Columns past V are -inf before the max and the sum.
builtin.module {
  func.func @greedy_softcap(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, V>},
      %TOK: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %LSE: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %LOGP: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %v = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %v, %c64 : index
    %vt = tile.splat %v : index -> !tile.tile<1x1xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<1x1xf32, register>
    %big = tile.fill 2147483 : !tile.tile<1x1xi32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %i_init = tile.fill 0 : !tile.tile<64xi32, register>
    %r:4 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %l_init, %bx = %m_init, %bi = %i_init)
        -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xi32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %outside = tile.cmp ge %col, %vt : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
      %xs = tile.scale %x by 0.033333335 : !tile.tile<64x64xf32, register>
      %t = tile.tanh %xs : !tile.tile<64x64xf32, register>
      %z0 = tile.scale %t by 30.0 : !tile.tile<64x64xf32, register>
      %z = tile.select %outside, %ninf, %z0 : !tile.tile<1x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
      %xm = tile.select %outside, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
      %zmax = tile.row_max %z : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %zmax : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %z, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %ps = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %l_new = tile.fma %alpha, %l, %ps : !tile.tile<64xf32, register>
      %xmax = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %hit = tile.cmp eq %xm, %xmax : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %cand = tile.select %hit, %col, %big : !tile.tile<64x64xi1, register>, !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
      %first = tile.row_min %cand : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
      %better = tile.cmp gt %xmax, %bx : !tile.tile<64xf32, register>
      %bx2 = tile.select %better, %xmax, %bx : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
      %bi2 = tile.select %better, %first, %bi : !tile.tile<64xi1, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>
      scf.yield %m_new, %l_new, %bx2, %bi2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xi32, register>
    }
    %logl = tile.log %r#1 : !tile.tile<64xf32, register>
    %lse = tile.add %r#0, %logl : !tile.tile<64xf32, register>
    %logp = tile.neg %logl : !tile.tile<64xf32, register>
    %tw = tile.view %TOK[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#3, %tw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %lw = tile.view %LSE[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %lse, %lw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %pw = tile.view %LOGP[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %logp, %pw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
