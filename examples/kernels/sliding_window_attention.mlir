// Causal sliding-window flash attention, one head, head_dim 64, window 32:
//   O = softmax(s) V,  s[i, j] = Q[i] . K[j] / 8 where i - 32 < j <= i, else -inf;
//   Q, K and V [L, 64] bf16, O [L, 64] f32. Every row sees at least its own key.
// One block per 64 query rows (online softmax as in examples/flash_attention.mlir). The window is narrower
// than a block, so a block visits only its diagonal key block and the one before it (scf.for from
// max(qb, 1) - 1 to qb + 1). The mask is built from absolute coordinates: d = i - j with tile.iota rows/cols,
// tile.cmp, and two tile.select to -inf. A row whose keys in a block are all hidden keeps m = -inf there,
// which tile.exp_diff and tile.exp_subtract count as 0.
builtin.module {
  func.func @sliding_window_attention(
      %Q: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<L, 64>},
      %K: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<L, 64>},
      %V: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<L, 64>},
      %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<L, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(L, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %qb = tile.program_id x : index
    %q0 = arith.muli %qb, %c64 : index
    %qb1 = arith.maxui %qb, %c1 : index
    %kv_lo = arith.subi %qb1, %c1 : index
    %kv_hi = arith.addi %qb, %c1 : index
    %w = arith.constant 32 : i32
    %window = tile.splat %w : i32 -> !tile.tile<64x64xi32, register>
    %i0 = arith.constant 0 : i32
    %izero = tile.splat %i0 : i32 -> !tile.tile<64x64xi32, register>
    %neg_inf = tile.fill -inf : !tile.tile<64x64xf32, register>
    %row = tile.iota rows offset %q0 : !tile.tile<64x64xi32, register>
    %q_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %v_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %qw = tile.view %Q[%q0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %qw, %q_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %m_init = tile.fill -inf : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %m_f, %l_f, %acc_f = scf.for %j = %kv_lo to %kv_hi step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %zero)
        -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %kw = tile.view %K[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %kw, %k_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %vw = tile.view %V[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %vw, %v_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      %s_sc = tile.scale %s by 0.125 : !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %k0 : !tile.tile<64x64xi32, register>
      %d = tile.sub %row, %col : !tile.tile<64x64xi32, register>
      %future = tile.cmp lt %d, %izero : !tile.tile<64x64xi32, register>
      %far = tile.cmp ge %d, %window : !tile.tile<64x64xi32, register>
      %s_f = tile.select %future, %neg_inf, %s_sc : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
      %s_m = tile.select %far, %neg_inf, %s_f : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
      %s_max = tile.row_max %s_m : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %s_m, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %p_sum = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %l_new = tile.fma %alpha, %l, %p_sum : !tile.tile<64xf32, register>
      %acc_s = tile.mul_rows %acc, %alpha : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %p_bf16 = tile.cast %p : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %acc_new = tile.mma %p_bf16, %v_smem, %acc_s : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %m_new, %l_new, %acc_new : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>
    }
    %o = tile.div_rows %acc_f, %l_f : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %ow = tile.view %O[%q0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %o, %ow : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
