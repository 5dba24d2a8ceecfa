// The paged cache's row gather through the passes: pipeline-loops sends each tile.cp_async_gather to its
// ring's stage like a tile.cp_async; convert-tile-to-sm90 gives the refill to the first warpgroup (tid < 128),
// which waits for the slot's release, issues one cp.async of 16 bytes per row it owns (the page number read
// from the table, src-size 0 past seq_k), and arrives (noinc) on the slot's full barrier, whose init count is
// the 128 producer threads; consumers fence the proxies after waiting on it.
// RUN: tessera-opt %s -p 'assign-swizzle,pipeline-loops{stages=2}' | filecheck %s --check-prefix=PIPE
// RUN: tessera-opt %s -p 'assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90,canonicalize,cse' | filecheck %s --check-prefix=SM90

// PIPE:      %k_fill = tile.stage %k_ring[%fill_slot]
// PIPE-NEXT: %v_fill = tile.stage %v_ring[%fill_slot]
// PIPE:      tile.cp_async_gather %K[%kv_head, %c0], %page_table[%batch], %k0, %seq_k, %k_fill
// PIPE-NEXT: tile.cp_async_gather %V[%kv_head, %c0], %page_table[%batch], %k0, %seq_k, %v_fill
// PIPE:      tile.release %k_stage
// PIPE-NEXT: tile.release %v_stage

// SM90:      sm90.mbarrier_init %k_ring_full, 128
// SM90-NEXT: sm90.mbarrier_init %k_ring_empty, 256
// SM90:      %[[PRODUCERS:.*]] = arith.cmpi ult, %tid, %{{.*}} : index
// SM90-NEXT: scf.if %[[PRODUCERS]] {
// SM90:        sm90.mbarrier_try_wait_parity %{{.*}}
// SM90:        %[[PAGE:.*]] = sm90.ld_global %page_table_ptr[%{{.*}}], %{{.*}} {sm90.invariant}
// SM90:        %[[SIZE:.*]] = sm90.selp %{{.*}}, %{{.*}}, %{{.*}} : i1, i32
// SM90-NEXT:   sm90.cp_async %{{.*}}, %{{.*}}, %[[SIZE]], 16
// SM90:        sm90.cp_async_mbarrier_arrive_noinc %{{.*}}
// SM90-NEXT: }{sm90.producer, sm90.producer_warpgroup}
// SM90:      sm90.mbarrier_try_wait_parity
// SM90:      sm90.fence_proxy_async
// SM90:      sm90.wgmma_mma_async

builtin.module {
  func.func @flash_attention_paged_gather_d64_bf16(%Q: !tile.tile<?x?x64xbf16, global> {tile.dims = #tile.dims<heads, total_q, 64>}, %K: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<num_pages, page_size, heads_k, 64>}, %V: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<num_pages, page_size, heads_k, 64>}, %seqstart_q: !tile.tile<?xi32, global> {tile.dims = #tile.dims<batch>}, %seqend_q: !tile.tile<?xi32, global> {tile.dims = #tile.dims<batch>}, %page_table: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<batch, max_pages>}, %cache_seqlens: !tile.tile<?xi32, global> {tile.dims = #tile.dims<batch>}, %O: !tile.tile<?x?x64xbf16, global> {tile.dims = #tile.dims<heads, total_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = false, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(total_q, 128), heads, batch>} {
    %batch = tile.program_id z : index
    %seq_k = tile.load_index %cache_seqlens[%batch] : !tile.tile<?xi32, global>
    %c0 = arith.constant 0 : index
    %q_block = tile.program_id x : index
    %head = tile.program_id y : index
    %q_start = tile.load_index %seqstart_q[%batch] : !tile.tile<?xi32, global>
    %q_end = tile.load_index %seqend_q[%batch] : !tile.tile<?xi32, global>
    %seq_q = arith.subi %q_end, %q_start : index
    %c128 = arith.constant 128 : index
    %q0 = arith.muli %q_block, %c128 : index
    %rows_left = arith.subi %seq_q, %q0 : index
    %rows_left_pos = arith.maxsi %rows_left, %c0 : index
    %c1 = arith.constant 1 : index
    %has_rows = arith.minsi %rows_left_pos, %c1 : index
    %n_kv = arith.ceildivui %seq_k, %c128 : index
    %n_kv_block = arith.muli %n_kv, %has_rows : index
    %heads = tile.dim %Q[0] : !tile.tile<?x?x64xbf16, global>
    %heads_k = tile.dim %K[2] : !tile.tile<?x?x?x64xbf16, global>
    %group = arith.divui %heads, %heads_k : index
    %kv_head = arith.divui %head, %group : index
    %q_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %v_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %q_row = arith.addi %q_start, %q0 : index
    %q_window = tile.view %Q[%head, %q_row, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %q_window, %q_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %m_init = tile.fill -inf : !tile.tile<128xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<128xf32, register>
    %acc_init = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %m_final, %l_final, %acc_final = scf.for %j = %c0 to %n_kv_block step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init) -> (!tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x64xf32, register>) {
      %k0 = arith.muli %j, %c128 : index
      tile.cp_async_gather %K[%kv_head, %c0], %page_table[%batch], %k0, %seq_k, %k_smem : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      tile.cp_async_gather %V[%kv_head, %c0], %page_table[%batch], %k0, %seq_k, %v_smem : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s_zero = tile.fill 0.0 : !tile.tile<128x128xf32, register>
      %s = tile.mma %q_smem, %k_smem, %s_zero transpose_b : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
      %s_scaled = tile.scale %s by 1.250000e-01 : !tile.tile<128x128xf32, register>
      %s_masked = tile.mask_bounds %s_scaled, %k0, %seq_k : !tile.tile<128x128xf32, register>
      %s_max = tile.row_max %s_masked : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<128xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<128xf32, register>
      %p = tile.exp_subtract %s_masked, %m_new : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
      %p_sum = tile.row_sum %p : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %l_new = tile.fma %alpha, %l, %p_sum : !tile.tile<128xf32, register>
      %acc_scaled = tile.mul_rows %acc, %alpha : !tile.tile<128x64xf32, register>, !tile.tile<128xf32, register>
      %p_half = tile.cast %p : !tile.tile<128x128xf32, register> -> !tile.tile<128x128xbf16, register>
      %acc_next = tile.mma %p_half, %v_smem, %acc_scaled : !tile.tile<128x128xbf16, register>, !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<128x64xf32, register>
      tile.barrier
      scf.yield %m_new, %l_new, %acc_next : !tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x64xf32, register>
    }
    %o = tile.div_rows %acc_final, %l_final : !tile.tile<128x64xf32, register>, !tile.tile<128xf32, register>
    %o_half = tile.cast %o : !tile.tile<128x64xf32, register> -> !tile.tile<128x64xbf16, register>
    %rows_left_1 = arith.subi %seq_q, %q0 : index
    %o_row = arith.addi %q_start, %q0 : index
    %o_window = tile.view %O[%head, %o_row, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.store_global_rows %o_half, %o_window, %rows_left_1 : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
    func.return
  }
}

