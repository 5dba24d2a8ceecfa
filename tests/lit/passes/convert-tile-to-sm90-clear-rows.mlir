// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s

// The V rows of a key block past seq_k zeroed before P.V (tile.clear_rows), single-stage: behind a block-uniform
// seq_k - k0 < 64, each of the 128 threads clears one 16-byte chunk of rows tid / 8 + 16 i (four st.shared.b32 each,
// under its own row test), then fence.proxy.async and a barrier of the block, then the P.V wgmma.

builtin.module {
  func.func @flash_attention_d64_bf16_clear_rows(%Q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>}, %K: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %V: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = false, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 64), heads, batch>} {
    %q_block = tile.program_id x : index
    %head = tile.program_id y : index
    %batch = tile.program_id z : index
    %seq_q = tile.dim %Q[2] : !tile.tile<?x?x?x64xbf16, global>
    %seq_k = tile.dim %K[2] : !tile.tile<?x?x?x64xbf16, global>
    %c64 = arith.constant 64 : index
    %q0 = arith.muli %q_block, %c64 : index
    %n_kv = arith.ceildivui %seq_k, %c64 : index
    %c0 = arith.constant 0 : index
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
      tile.clear_rows %v_smem, %k0, %seq_k : !tile.tile<64x64xbf16, shared, swizzle 128>
      %s_max = tile.row_max %s_in_bounds : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %s_in_bounds, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
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

// CHECK:      scf.for
// CHECK:      %[[KEPT:.*]] = arith.subi %seq_k, %k0 : index
// CHECK-NEXT: %[[CROSSES:.*]] = arith.cmpi slt, %[[KEPT]], %c64 : index
// CHECK-NEXT: scf.if %[[CROSSES]] {
// CHECK-NEXT:   %[[CHUNK:.*]] = arith.remui %tid, %{{.*}} : index
// CHECK-NEXT:   %[[ROW:.*]] = arith.divui %tid, %{{.*}} : index
// CHECK:        %[[BASE:.*]] = arith.addi %v_smem, %{{.*}} : i32
// CHECK:        %[[PAST:.*]] = arith.cmpi sge, %[[ROW]], %[[KEPT]] : index
// CHECK:        scf.if %[[PAST]] {
// CHECK-NEXT:     sm90.st_shared %{{.*}}, %{{.*}} : vector<4xi32>, vector<4xi32>
// CHECK-NEXT:   }
// CHECK-COUNT-3: sm90.st_shared
// CHECK:        sm90.fence_proxy_async
// CHECK-NEXT:   sm90.bar_sync 0, 128
// CHECK-NEXT: }
// CHECK-NOT:  sm90.st_shared
// CHECK:      sm90.wgmma_mma_async %acc_scaled, {{.*}} trans 0, 1
