// Soft-capped flash attention (Gemma 2 style), one head, head_dim 64:
//   O = softmax(s) V,  s = 20 tanh((Q K^T / 8) / 20)    Q [Lq, 64], K and V [Lk, 64] bf16, O [Lq, 64] f32.
// One block per 64 query rows walks the keys in blocks of 64 with the online softmax of
// examples/flash_attention.mlir (running max m, sum l, accumulator acc; one division after the loop).
// The cap is tile.scale, tile.tanh, tile.scale on the scores; keys past Lk are -inf (tile.mask_bounds).
builtin.module {
  func.func @softcap_attention(
      %Q: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<Lq, 64>},
      %K: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<Lk, 64>},
      %V: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<Lk, 64>},
      %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<Lq, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(Lq, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %qb = tile.program_id x : index
    %q0 = arith.muli %qb, %c64 : index
    %lk = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
    %n_kv = arith.ceildivui %lk, %c64 : index
    %q_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %v_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %qw = tile.view %Q[%q0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %qw, %q_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %m_init = tile.fill -inf : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %m_f, %l_f, %acc_f = scf.for %j = %c0 to %n_kv step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %zero)
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
      // 20 tanh(s / 8 / 20): 1/160 = 0.00625
      %s_in = tile.scale %s by 0.00625 : !tile.tile<64x64xf32, register>
      %t = tile.tanh %s_in : !tile.tile<64x64xf32, register>
      %s_cap = tile.scale %t by 20.0 : !tile.tile<64x64xf32, register>
      %s_m = tile.mask_bounds %s_cap, %k0, %lk : !tile.tile<64x64xf32, register>
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
