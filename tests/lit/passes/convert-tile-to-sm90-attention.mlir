// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s

// Causal flash attention, 64 queries x 64 keys per step, head_dim 64: Q is waited with parity 0 (its group
// is committed once), K/V with the loop trip's parity (the trip is %j once canonicalized); the bounds and causal masks are one
// compare per register against a threshold per row (min of the diagonal and seq_k); row max and row sum reduce a thread's two rows and
// the max then the 4 lanes of each row (shfl.bfly 1, 2); the running sum stays each thread's partial sum,
// added over the 4 lanes once, after the loop (row_sums.py); exp is ex2 of an fma with log2(e); P is packed
// to bf16 pairs and fed to the second wgmma as register A (trans-b 1 for V); O = acc * rcp(l) (0 where l = 0).

builtin.module {
  func.func @flash_attention_d64_bf16_causal(%Q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>}, %K: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %V: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = true, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 64), heads, batch>} {
    %q_block = tile.program_id x : index
    %head = tile.program_id y : index
    %batch = tile.program_id z : index
    %seq_q = tile.dim %Q[2] : !tile.tile<?x?x?x64xbf16, global>
    %seq_k = tile.dim %K[2] : !tile.tile<?x?x?x64xbf16, global>
    %c64 = arith.constant 64 : index
    %q0 = arith.muli %q_block, %c64 : index
    %n_kv_all = arith.ceildivui %seq_k, %c64 : index
    %q_end = arith.addi %q0, %c64 : index
    %q_end_plus_seq_k = arith.addi %q_end, %seq_k : index
    %visible_end = arith.subi %q_end_plus_seq_k, %seq_q : index
    %c0 = arith.constant 0 : index
    %visible_keys = arith.maxsi %visible_end, %c0 : index
    %n_kv_causal = arith.ceildivsi %visible_keys, %c64 : index
    %n_kv = arith.minsi %n_kv_all, %n_kv_causal : index
    %q_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %v_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %q_window = tile.view %Q[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %q_window, %q_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %m_init = tile.fill -inf : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %c1 = arith.constant 1 : index
    %m_final, %l_final, %acc_final = scf.for %j = %c0 to %n_kv step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %k_window = tile.view %K[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %k_window, %k_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %v_window = tile.view %V[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %v_window, %v_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s_zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
      %s = tile.mma %q_smem, %k_smem, %s_zero transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      %s_scaled = tile.scale %s by 1.250000e-01 : !tile.tile<64x64xf32, register>
      %s_in_bounds = tile.mask_bounds %s_scaled, %k0, %seq_k : !tile.tile<64x64xf32, register>
      %s_masked = tile.mask_causal %s_in_bounds, %q0, %k0, %seq_q, %seq_k : !tile.tile<64x64xf32, register>
      %s_max = tile.row_max %s_masked : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %s_masked, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %p_sum = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %l_new = tile.fma %alpha, %l, %p_sum : !tile.tile<64xf32, register>
      %acc_scaled = tile.mul_rows %acc, %alpha : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %p_half = tile.cast %p : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %acc_next = tile.mma %p_half, %v_smem, %acc_scaled : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %m_new, %l_new, %acc_next : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>
    }
    %o = tile.div_rows %acc_final, %l_final : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %o_half = tile.cast %o : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %o_window = tile.view %O[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %o_half, %o_window : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}

// CHECK:      sm90.kernel = {threads = 128 : i64, smem_bytes = 25600 : i64}
// CHECK:      sm90.tma_load %Q_map64[%{{.*}}, %q0, %head, %batch{{.*}}], %q_smem, %group0_bar : index, index, index, index
// CHECK:      sm90.mbarrier_arrive_expect_tx %group0_bar, 8192
// CHECK:      scf.for %j = {{.*}} -> (vector<2xf32>, vector<2xf32>, vector<32xf32>) {
// CHECK:        sm90.mbarrier_arrive_expect_tx %group1_bar, 16384
// CHECK:        sm90.mbarrier_try_wait_parity %group0_bar, %c0 : index
// CHECK:        %[[PARITY:.*]] = arith.andi %j, %{{.*}} : index
// CHECK:        sm90.mbarrier_try_wait_parity %group1_bar, %[[PARITY]] : index
// CHECK:        sm90.wgmma_mma_async {{.*}} n 64 type "bf16" trans 0, 0 : vector<32xf32>, i64
// CHECK:        sm90.wgmma_wait_group 0
// CHECK:        arith.minsi
// CHECK:        arith.minsi
// CHECK-NOT:    sm90.setp "le"
// CHECK:        sm90.setp "lt" %{{.*}}, %{{.*}} : vector<32xindex> -> vector<32xi1>
// CHECK-NOT:    sm90.setp {{.*}} : vector<32xindex>
// CHECK:        sm90.shfl_sync "bfly" %{{.*}}, 1, 31 : vector<2xf32>
// CHECK:        sm90.shfl_sync "bfly" %{{.*}}, 2, 31 : vector<2xf32>
// CHECK:        %alpha = sm90.ex2_approx %{{.*}} : vector<2xf32>
// CHECK:        math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK-NEXT:   %p = sm90.ex2_approx %{{.*}} : vector<32xf32>
// CHECK-NOT:    sm90.shfl_sync
// CHECK:        sm90.cvt_pack %{{.*}} type "bf16" : vector<8xf32> -> vector<4xi32>
// CHECK:        %p_half = vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<12xi32>, vector<4xi32>
// CHECK:        vector.shuffle %p_half, %p_half [0, 1, 2, 3]
// CHECK:        sm90.wgmma_mma_async %acc_scaled, %{{.*}}, %{{.*}} n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
// CHECK:        scf.yield
// CHECK:      sm90.shfl_sync "bfly" %l_final_partial, 1, 31 : vector<2xf32>
// CHECK:      sm90.shfl_sync "bfly" %{{.*}}, 2, 31 : vector<2xf32>
// CHECK:      sm90.rcp_approx %l_final : vector<2xf32>
// CHECK:      %[[BASE:.*]] = arith.addi %O_ptr, %{{.*}} : i64
// CHECK:      sm90.st_global %[[BASE]][%{{.*}}], %o_half, %{{.*}} : vector<16xi32>, vector<16xi32>, vector<16xi1>
