// The FP8 kernel's V, as it is in memory ([keys, head_dim], the B operand of the 8-bit P.V tile.mma without
// transpose_b), through the passes: convert-tile-to-sm90 lowers V's ring to a staging ring (TMA's, the Tile
// swizzle) and a V^T ring (128B-swizzled rows of 128 keys, what the K-major wgmma descriptor reads), and gives
// each refill to the first warpgroup (tid < 128): lane 0 issues the TMA into the staging slot; all wait for the
// V^T slot's release and the copy, load their 4 x 4 byte blocks, release the staging slot after the last load,
// transpose with eight prmt per block, store, fence.proxy.async and arrive on the V^T slot's full barrier,
// whose init count is the 128 transposing threads (passes/convert_tile_to_sm90/transpose.py).
// RUN: tessera-opt %s -p 'assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90,canonicalize,cse' | filecheck %s

// CHECK:      sm90.mbarrier_init %v_ring_staging_full, 1
// CHECK-NEXT: sm90.mbarrier_init %v_ring_staging_empty, 128
// CHECK-NEXT: sm90.mbarrier_init %v_ring_full, 128
// CHECK-NEXT: sm90.mbarrier_init %v_ring_empty, 256
// CHECK:      %v_ring_staging = sm90.shared_buffer "v_ring_staging" offset {{[0-9]+}} size 16384 align 512 swizzle 64
// CHECK-NEXT: %v_ring_vtrans = sm90.shared_buffer "v_ring_vtrans" offset {{[0-9]+}} size 16384 align 1024 swizzle 128
// CHECK:      %[[PRODUCERS:.*]] = arith.cmpi ult, %tid, %c128 : index
// CHECK-NEXT: scf.if %[[PRODUCERS]] {
// CHECK-NEXT:   %[[LANE:.*]] = arith.remui %tid, %c128 : index
// CHECK-NEXT:   %[[SFULL:.*]] = arith.addi %v_ring_staging_full, %{{.*}} : i32
// CHECK-NEXT:   %[[SEMPTY:.*]] = arith.addi %v_ring_staging_empty, %{{.*}} : i32
// CHECK-NEXT:   %[[STAGING:.*]] = arith.addi %v_ring_staging, %{{.*}} : i32
// CHECK-NEXT:   %[[LANE0:.*]] = arith.cmpi eq, %[[LANE]], %c0 : index
// CHECK-NEXT:   scf.if %[[LANE0]] {
// CHECK:          sm90.mbarrier_try_wait_parity %[[SEMPTY]]
// CHECK:          sm90.mbarrier_arrive_expect_tx %[[SFULL]], 8192
// CHECK-NEXT:     sm90.tma_load %V_map128_s64[{{.*}}], %[[STAGING]], %[[SFULL]]
// CHECK:        sm90.mbarrier_try_wait_parity %{{.*}}
// CHECK:        sm90.mbarrier_try_wait_parity %[[SFULL]]
// CHECK:        sm90.ld_shared %{{.*}} : vector<8xi32> -> vector<8xi32>
// CHECK-COUNT-4: sm90.prmt %{{.*}}, %{{.*}} selector {{20800|29538}} : vector<2xi32>
// CHECK-COUNT-4: sm90.prmt %{{.*}}, %{{.*}} selector {{21520|30258}} : vector<2xi32>
// CHECK:        sm90.st_shared %{{.*}}, %{{.*}} : vector<8xi32>, vector<8xi32>
// CHECK:        sm90.ld_shared
// CHECK-NEXT:   sm90.mbarrier_arrive %[[SEMPTY]]
// CHECK:        sm90.st_shared
// CHECK-NEXT:   sm90.fence_proxy_async
// CHECK-NEXT:   sm90.mbarrier_arrive %{{.*}}
// CHECK-NEXT: }{sm90.producer, sm90.producer_warpgroup}
// CHECK:      sm90.make_descriptor %{{.*}} lbo 16 sbo 1024 swizzle 128 : i64
// CHECK:      sm90.wgmma_mma_async %{{.*}}, %{{.*}}, %{{.*}} n 64 type "e4m3" trans 0, 0 : vector<32xf32>, vector<4xi32>

builtin.module {
  func.func @flash_attention_d64_e4m3(%Q: !tile.tile<?x?x?x64xf8E4M3FN, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>}, %K: !tile.tile<?x?x?x64xf8E4M3FN, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %V: !tile.tile<?x?x?x64xf8E4M3FN, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %DescaleQ: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<batch, heads>}, %DescaleK: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<batch, heads>}, %DescaleV: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<batch, heads>}, %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(seq_q, 128), heads, batch>} {
    %q_block = tile.program_id x : index
    %head = tile.program_id y : index
    %batch = tile.program_id z : index
    %seq_q = tile.dim %Q[2] : !tile.tile<?x?x?x64xf8E4M3FN, global>
    %seq_k = tile.dim %K[2] : !tile.tile<?x?x?x64xf8E4M3FN, global>
    %c128 = arith.constant 128 : index
    %q0 = arith.muli %q_block, %c128 : index
    %n_kv = arith.ceildivui %seq_k, %c128 : index
    %q_smem = tile.alloc_shared : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
    %k_smem = tile.alloc_shared : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
    %v_smem = tile.alloc_shared : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
    %c0 = arith.constant 0 : index
    %q_window = tile.view %Q[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xf8E4M3FN, global> -> !tile.tile<128x64xf8E4M3FN, global>
    tile.cp_async %q_window, %q_smem : !tile.tile<128x64xf8E4M3FN, global>, !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
    tile.cp_commit_group
    %descaleq_window = tile.view %DescaleQ[%batch, %head] : !tile.tile<?x?xf32, global> -> !tile.tile<1xf32, global>
    %descaleq_column = tile.load_broadcast %descaleq_window : !tile.tile<1xf32, global> -> !tile.tile<128x1xf32, register>
    %descaleq_row = tile.reshape %descaleq_column : !tile.tile<128x1xf32, register> -> !tile.tile<128xf32, register>
    %descalek_window = tile.view %DescaleK[%batch, %head] : !tile.tile<?x?xf32, global> -> !tile.tile<1xf32, global>
    %descalek_column = tile.load_broadcast %descalek_window : !tile.tile<1xf32, global> -> !tile.tile<128x1xf32, register>
    %descalek_row = tile.reshape %descalek_column : !tile.tile<128x1xf32, register> -> !tile.tile<128xf32, register>
    %descalev_window = tile.view %DescaleV[%batch, %head] : !tile.tile<?x?xf32, global> -> !tile.tile<1xf32, global>
    %descalev_column = tile.load_broadcast %descalev_window : !tile.tile<1xf32, global> -> !tile.tile<128x1xf32, register>
    %descalev_row = tile.reshape %descalev_column : !tile.tile<128x1xf32, register> -> !tile.tile<128xf32, register>
    %descale_qk = tile.mul %descaleq_row, %descalek_row : !tile.tile<128xf32, register>
    %score_factor = tile.scale %descale_qk by 1.250000e-01 : !tile.tile<128xf32, register>
    %output_factor = tile.scale %descalev_row by 3.906250e-03 : !tile.tile<128xf32, register>
    %m_init = tile.fill -inf : !tile.tile<128xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<128xf32, register>
    %acc_init = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %c1 = arith.constant 1 : index
    %m_final, %l_final, %acc_final = scf.for %j = %c0 to %n_kv step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init) -> (!tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x64xf32, register>) {
      %k0 = arith.muli %j, %c128 : index
      %k_window = tile.view %K[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xf8E4M3FN, global> -> !tile.tile<128x64xf8E4M3FN, global>
      tile.cp_async %k_window, %k_smem : !tile.tile<128x64xf8E4M3FN, global>, !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
      %v_window = tile.view %V[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xf8E4M3FN, global> -> !tile.tile<128x64xf8E4M3FN, global>
      tile.cp_async %v_window, %v_smem : !tile.tile<128x64xf8E4M3FN, global>, !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s_zero = tile.fill 0.0 : !tile.tile<128x128xf32, register>
      %s = tile.mma %q_smem, %k_smem, %s_zero transpose_b : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>, !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>, !tile.tile<128x128xf32, register>
      %s_scaled = tile.mul_rows %s, %score_factor : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
      %s_masked = tile.mask_bounds %s_scaled, %k0, %seq_k : !tile.tile<128x128xf32, register>
      %s_max = tile.row_max %s_masked : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<128xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<128xf32, register>
      %p = tile.exp_subtract %s_masked, %m_new : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
      %p_sum = tile.row_sum %p : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %l_new = tile.fma %alpha, %l, %p_sum : !tile.tile<128xf32, register>
      %acc_scaled = tile.mul_rows %acc, %alpha : !tile.tile<128x64xf32, register>, !tile.tile<128xf32, register>
      %p_offset = tile.scale %p by 2.560000e+02 : !tile.tile<128x128xf32, register>
      %p_fp8 = tile.cast %p_offset : !tile.tile<128x128xf32, register> -> !tile.tile<128x128xf8E4M3FN, register>
      %acc_next = tile.mma %p_fp8, %v_smem, %acc_scaled : !tile.tile<128x128xf8E4M3FN, register>, !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>, !tile.tile<128x64xf32, register>
      tile.barrier
      scf.yield %m_new, %l_new, %acc_next : !tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x64xf32, register>
    }
    %o = tile.div_rows %acc_final, %l_final : !tile.tile<128x64xf32, register>, !tile.tile<128xf32, register>
    %o_descaled = tile.mul_rows %o, %output_factor : !tile.tile<128x64xf32, register>, !tile.tile<128xf32, register>
    %o_half = tile.cast %o_descaled : !tile.tile<128x64xf32, register> -> !tile.tile<128x64xbf16, register>
    %o_window = tile.view %O[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.store_global %o_half, %o_window : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
    func.return
  }
}
