// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// The bounds mask alone (flash attention without the causal mask, 64 x 64 blocks, head_dim 64): key k0 + c
// is hidden where c >= seq_k - k0. A thread's 32 accumulator registers cover two rows of the same 16
// columns (0, 1, 8, 9, ...), so the mask compares once per distinct column (16 setp) and the two rows'
// registers share those predicates through a shuffle (an alias: no instruction), one selp per register: the
// second row's selp of a column reads the first row's predicate.

builtin.module {
  func.func @flash_attention_d64_bf16_bounds(%Q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>}, %K: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %V: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = false, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 64), heads, batch>} {
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

// CHECK:      %[[COLS:.*]] = arith.constant dense<[0, 1, 8, 9, 16, 17, 24, 25, 32, 33, 40, 41, 48, 49, 56, 57]> : vector<16xindex>
// CHECK:      scf.for
// CHECK:      %[[LIMIT:.*]] = arith.subi %seq_k, %{{.*}} : index
// CHECK-NEXT: %[[B:.*]] = vector.broadcast %[[LIMIT]] : index to vector<16xindex>
// CHECK-NEXT: %[[P:.*]] = sm90.setp "le" %[[B]], %[[COLS]] : vector<16xindex> -> vector<16xi1>
// CHECK-NEXT: %[[HIDDEN:.*]] = vector.shuffle %[[P]], %[[P]] [0, 1, 0, 1, 2, 3, 2, 3, {{.*}}, 14, 15, 14, 15] : vector<16xi1>, vector<16xi1>
// CHECK-NEXT: sm90.selp %[[HIDDEN]], %{{.*}}, %s : vector<32xi1>, vector<32xf32>
// CHECK-NOT:  sm90.setp {{.*}} : vector<32xindex>

// PTX-COUNT-16: setp.le.s32 %p{{[0-9]+}}, %r{{[0-9]+}}, {{[0-9]+}};
// PTX-NOT:      setp.le.s32
// PTX:          selp.f32 %fa[[R0:[0-9]+]], 0fFF800000, %fa[[R0]], %p[[P0:[0-9]+]];
// PTX-NEXT:     selp.f32 %fa[[R1:[0-9]+]], 0fFF800000, %fa[[R1]], %p[[P1:[0-9]+]];
// PTX-NEXT:     selp.f32 %fa{{[0-9]+}}, 0fFF800000, %fa{{[0-9]+}}, %p[[P0]];
// PTX-NEXT:     selp.f32 %fa{{[0-9]+}}, 0fFF800000, %fa{{[0-9]+}}, %p[[P1]];
// PTX-COUNT-28: selp.f32 %fa{{[0-9]+}}, 0fFF800000, %fa{{[0-9]+}}, %p{{[0-9]+}};
