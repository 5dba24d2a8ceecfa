// The Kullback-Leibler divergence of two rows of logits, PyTorch's kl_div(log_softmax(Q), log_softmax(P),
// log_target=True, reduction="none").sum(-1) (distillation's loss):
//   KL[i] = sum_j p_ij (log p_ij - log q_ij),  p = softmax(P[i]), q = softmax(Q[i]),
// P, Q [M, N] f32 of any M, N; KL [M] f32. Two passes over 64-column blocks: the first carries both rows'
// log-sum-exp online (two running maxima and sums as scf.for iter_args, tile.exp_diff rescaling), the second sums
// p (log p - log q) with the columns past N selected to 0 (they read as 0, whose softmax weight is not).
builtin.module {
  func.func @kl_div_rows(
      %P: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Q: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %KL: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %P[1] : !tile.tile<?x?xf32, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %s_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %st:4 = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%mp = %m_init, %sp = %s_init, %mq = %m_init, %sq = %s_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %pw = tile.view %P[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %p = tile.load %pw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %q = tile.load %qw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %pm = tile.select %past, %ninf, %p : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %pb = tile.row_max %pm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %mp2 = tile.element_max %mp, %pb : !tile.tile<64xf32, register>
      %pa = tile.exp_diff %mp, %mp2 : !tile.tile<64xf32, register>
      %pe = tile.exp_subtract %pm, %mp2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %ps = tile.row_sum %pe : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %sp2 = tile.fma %sp, %pa, %ps : !tile.tile<64xf32, register>
      %qm = tile.select %past, %ninf, %q : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %qb = tile.row_max %qm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %mq2 = tile.element_max %mq, %qb : !tile.tile<64xf32, register>
      %qa = tile.exp_diff %mq, %mq2 : !tile.tile<64xf32, register>
      %qe = tile.exp_subtract %qm, %mq2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %qs = tile.row_sum %qe : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %sq2 = tile.fma %sq, %qa, %qs : !tile.tile<64xf32, register>
      scf.yield %mp2, %sp2, %mq2, %sq2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %lp = tile.log %st#1 : !tile.tile<64xf32, register>
    %lse_p = tile.add %st#0, %lp : !tile.tile<64xf32, register>
    %lq = tile.log %st#3 : !tile.tile<64xf32, register>
    %lse_q = tile.add %st#2, %lq : !tile.tile<64xf32, register>
    %kl = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%acc = %s_init) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %pw = tile.view %P[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %p = tile.load %pw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %q = tile.load %qw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %logp = tile.sub %p, %lse_p : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %logq = tile.sub %q, %lse_q : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %pr = tile.exp %logp : !tile.tile<64x64xf32, register>
      %d = tile.sub %logp, %logq : !tile.tile<64x64xf32, register>
      %t = tile.mul %pr, %d : !tile.tile<64x64xf32, register>
      %tm = tile.select %past, %zero, %t : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %ts = tile.row_sum %tm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %ts : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %kw = tile.view %KL[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %kl, %kw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
