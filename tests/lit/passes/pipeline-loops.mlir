// pipeline-loops{stages=N}: the canonical copy loop becomes a ring pipeline (notes/pipeline_spec.md).
// RUN: tessera-opt %s --split-input-file -p 'pipeline-loops{stages=2}' | filecheck %s --check-prefixes=CHECK,S2
// RUN: tessera-opt %s --split-input-file -p 'pipeline-loops{stages=3}' | filecheck %s --check-prefixes=CHECK,S3
// RUN: tessera-opt %s --split-input-file -p 'pipeline-loops{stages=1}' | filecheck %s --check-prefix=S1
// A second run leaves pipelined loops alone (their copies fill ring stages already):
// RUN: tessera-opt %s --split-input-file -p 'pipeline-loops{stages=2},pipeline-loops{stages=4}' | filecheck %s --check-prefixes=CHECK,S2

// The flash attention loop (tessera.kernels.flash_attention(64) after assign-swizzle). Q is copied and
// committed before the loop, so the prologue ends with the wait and barrier that publish it.
func.func @flash_attention_d64_bf16(%Q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>}, %K: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %V: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 64>}, %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "attention", causal = false, scale = 1.250000e-01 : f32}, tile.grid = #tile.dims<ceildiv(seq_q, 128), heads, batch>} {
  %q_block = tile.program_id x : index
  %head = tile.program_id y : index
  %batch = tile.program_id z : index
  %seq_q = tile.dim %Q[2] : !tile.tile<?x?x?x64xbf16, global>
  %seq_k = tile.dim %K[2] : !tile.tile<?x?x?x64xbf16, global>
  %c128 = arith.constant 128 : index
  %q0 = arith.muli %q_block, %c128 : index
  %n_kv = arith.ceildivui %seq_k, %c128 : index
  %q_smem = tile.alloc_shared align 1024 : !tile.tile<128x64xbf16, shared, swizzle 128>
  %k_smem = tile.alloc_shared align 1024 : !tile.tile<128x64xbf16, shared, swizzle 128>
  %v_smem = tile.alloc_shared align 1024 : !tile.tile<128x64xbf16, shared, swizzle 128>
  %c0 = arith.constant 0 : index
  %q_window = tile.view %Q[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
  tile.cp_async %q_window, %q_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  %m_init = tile.fill -inf : !tile.tile<128xf32, register>
  %l_init = tile.fill 0.0 : !tile.tile<128xf32, register>
  %acc_init = tile.fill 0.0 : !tile.tile<128x64xf32, register>
  %c1 = arith.constant 1 : index
  %m_final, %l_final, %acc_final = scf.for %j = %c0 to %n_kv step %c1 iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init) -> (!tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x64xf32, register>) {
    %k0 = arith.muli %j, %c128 : index
    %k_window = tile.view %K[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %k_window, %k_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
    %v_window = tile.view %V[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %v_window, %v_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
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
  %o_window = tile.view %O[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
  tile.store_global %o_half, %o_window : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
  func.return
}

// K and V become rings of their own, with the tiles' element type, swizzle and alignment.
// CHECK-LABEL: func.func @flash_attention_d64_bf16
// CHECK-NOT:   %k_smem
// S2:          %k_ring = tile.alloc_shared align 1024 : !tile.tile<2x128x64xbf16, shared, swizzle 128>
// S2-NEXT:     %v_ring = tile.alloc_shared align 1024 : !tile.tile<2x128x64xbf16, shared, swizzle 128>
// S3:          %k_ring = tile.alloc_shared align 1024 : !tile.tile<3x128x64xbf16, shared, swizzle 128>
// S3-NEXT:     %v_ring = tile.alloc_shared align 1024 : !tile.tile<3x128x64xbf16, shared, swizzle 128>
// CHECK:       tile.cp_commit_group
// S2:          %[[CN:c2]] = arith.constant 2 : index
// S3:          %[[CN:c3]] = arith.constant 3 : index
// CHECK:       %span = arith.subi %n_kv, %c0 : index
// CHECK-NEXT:  %trips = arith.ceildivsi %span, %c1 : index
//
// Prologue: loads 0 .. N-2, each guarded by p < trips, each followed by a commit (empty when not taken).
// CHECK-NEXT:  %go = arith.cmpi slt, %c0, %trips : index
// CHECK-NEXT:  scf.if %go {
// CHECK-NEXT:    %fill_slot = arith.remui %c0, %[[CN]] : index
// CHECK-NEXT:    %k_fill = tile.stage %k_ring[%fill_slot]
// CHECK-NEXT:    %v_fill = tile.stage %v_ring[%fill_slot]
// CHECK-NEXT:    %k0 = arith.muli %c0, %c128 : index
// CHECK-NEXT:    %k_window = tile.view %K[%batch, %head, %k0, %c0]
// CHECK-NEXT:    tile.cp_async %k_window, %k_fill
// CHECK-NEXT:    %v_window = tile.view %V[%batch, %head, %k0, %c0]
// CHECK-NEXT:    tile.cp_async %v_window, %v_fill
// CHECK-NEXT:  }
// CHECK-NEXT:  tile.cp_commit_group
// S3-NEXT:     %[[GO1:go_[0-9]+]] = arith.cmpi slt, %c1, %trips : index
// S3-NEXT:     scf.if %[[GO1]] {
// S3-NEXT:       %[[SLOT1:fill_slot_[0-9]+]] = arith.remui %c1, %c3 : index
// S3-NEXT:       %[[KF1:k_fill_[0-9]+]] = tile.stage %k_ring[%[[SLOT1]]]
// S3-NEXT:       %[[VF1:v_fill_[0-9]+]] = tile.stage %v_ring[%[[SLOT1]]]
// S3-NEXT:       %[[K01:k0_[0-9]+]] = arith.muli %c1, %c128 : index
// S3-NEXT:       %[[KW1:k_window_[0-9]+]] = tile.view %K[%batch, %head, %[[K01]], %c0]
// S3-NEXT:       tile.cp_async %[[KW1]], %[[KF1]]
// S3-NEXT:       %[[VW1:v_window_[0-9]+]] = tile.view %V[%batch, %head, %[[K01]], %c0]
// S3-NEXT:       tile.cp_async %[[VW1]], %[[VF1]]
// S3-NEXT:     }
// S3-NEXT:     tile.cp_commit_group
//
// Q was committed before the loop: one wait for everything but the prologue's N-1 groups, and a barrier.
// S2-NEXT:     tile.cp_wait_group 1
// S3-NEXT:     tile.cp_wait_group 2
// CHECK-NEXT:  tile.barrier
//
// Trip j (use index j: the loop runs from 0 step 1) loads j + N-1 if there is such a trip, commits, waits
// for load j, reads stage remui(j, N) of each ring and releases it where the trailing barrier was.
// CHECK-NEXT:  scf.for %j = %c0 to %n_kv step %c1 iter_args
// CHECK-NEXT:    %[[K0:k0_[0-9]+]] = arith.muli %j, %c128 : index
// S2-NEXT:       %fill = arith.addi %j, %c1 : index
// S3-NEXT:       %fill = arith.addi %j, %c2 : index
// CHECK-NEXT:    %[[GO:go_[0-9]+]] = arith.cmpi slt, %fill, %trips : index
// CHECK-NEXT:    scf.if %[[GO]] {
// CHECK-NEXT:      %[[SLOT:fill_slot_[0-9]+]] = arith.remui %fill, %[[CN]] : index
// CHECK-NEXT:      %[[KF:k_fill_[0-9]+]] = tile.stage %k_ring[%[[SLOT]]]
// CHECK-NEXT:      %[[VF:v_fill_[0-9]+]] = tile.stage %v_ring[%[[SLOT]]]
// CHECK-NEXT:      %[[K0F:k0_[0-9]+]] = arith.muli %fill, %c128 : index
// CHECK-NEXT:      %[[KW:k_window_[0-9]+]] = tile.view %K[%batch, %head, %[[K0F]], %c0]
// CHECK-NEXT:      tile.cp_async %[[KW]], %[[KF]]
// CHECK-NEXT:      %[[VW:v_window_[0-9]+]] = tile.view %V[%batch, %head, %[[K0F]], %c0]
// CHECK-NEXT:      tile.cp_async %[[VW]], %[[VF]]
// CHECK-NEXT:    }
// CHECK-NEXT:    tile.cp_commit_group
// S2-NEXT:       tile.cp_wait_group 1
// S3-NEXT:       tile.cp_wait_group 2
// CHECK-NEXT:    %use_slot = arith.remui %j, %[[CN]] : index
// CHECK-NEXT:    %k_stage = tile.stage %k_ring[%use_slot]
// CHECK-NEXT:    %v_stage = tile.stage %v_ring[%use_slot]
// CHECK-NEXT:    %s_zero = tile.fill 0.0
// CHECK-NEXT:    %s = tile.mma %q_smem, %k_stage, %s_zero transpose_b
// CHECK-NOT:     tile.barrier
// CHECK:         %s_masked = tile.mask_bounds %s_scaled, %[[K0]], %seq_k
// CHECK-NOT:     tile.barrier
// CHECK:         %acc_next = tile.mma %p_half, %v_stage, %acc_scaled
// CHECK-NEXT:    tile.release %k_stage : !tile.tile<128x64xbf16, shared, swizzle 128>
// CHECK-NEXT:    tile.release %v_stage : !tile.tile<128x64xbf16, shared, swizzle 128>
// CHECK-NEXT:    scf.yield %m_new, %l_new, %acc_next
// CHECK-NEXT:  }
// CHECK-NEXT:  %o = tile.div_rows %acc_final, %l_final

// With one stage there is no prologue: trip j loads j, waits for it (0 pending) and reads stage remui(j, 1).
// S1-LABEL: func.func @flash_attention_d64_bf16
// S1:       %[[C1:c1]] = arith.constant 1 : index
// S1-NEXT:  %span = arith.subi %n_kv, %c0 : index
// S1-NEXT:  %trips = arith.ceildivsi %span, %c1 : index
// S1-NEXT:  tile.cp_wait_group 0
// S1-NEXT:  tile.barrier
// S1-NEXT:  scf.for %j = %c0 to %n_kv step %c1
// S1-NEXT:    %k0 = arith.muli %j, %c128 : index
// S1-NEXT:    %fill = arith.addi %j, %c0 : index
// S1-NEXT:    %go = arith.cmpi slt, %fill, %trips : index
// S1-NEXT:    scf.if %go {
// S1-NEXT:      %fill_slot = arith.remui %fill, %c1 : index
// S1:         tile.cp_commit_group
// S1-NEXT:    tile.cp_wait_group 0
// S1-NEXT:    %use_slot = arith.remui %j, %c1 : index
// S1:         tile.release %k_stage
// S1-NEXT:    tile.release %v_stage
// S1-NEXT:    scf.yield

// -----

// Any bounds: the use index is (iv - lb) / step, and load u copies the window of iv = lb + u * step, so that
// fill and use numbers count trips from 0 whatever the bounds. Nothing is committed before this loop: no
// wait or barrier before it. The second loop does not copy and is left as it is.
func.func @strided(%A: !tile.tile<?x64xbf16, global>, %lb: index, %ub: index, %step: index) -> !tile.tile<64x64xf32, register> {
  %c0 = arith.constant 0 : index
  %a_smem = tile.alloc_shared align 1024 : !tile.tile<64x64xbf16, shared, swizzle 128>
  %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %acc_final = scf.for %i = %lb to %ub step %step iter_args(%acc = %acc_init) -> (!tile.tile<64x64xf32, register>) {
    %a_window = tile.view %A[%i, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %acc_next = tile.mma %a_smem, %a_smem, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %acc_next : !tile.tile<64x64xf32, register>
  }
  %twice = scf.for %i = %lb to %ub step %step iter_args(%x = %acc_final) -> (!tile.tile<64x64xf32, register>) {
    %y = tile.add %x, %x : !tile.tile<64x64xf32, register>
    scf.yield %y : !tile.tile<64x64xf32, register>
  }
  func.return %twice : !tile.tile<64x64xf32, register>
}

// CHECK-LABEL: func.func @strided
// CHECK:       %a_ring = tile.alloc_shared align 1024 : !tile.tile<{{[23]}}x64x64xbf16, shared, swizzle 128>
// CHECK:       %span = arith.subi %ub, %lb : index
// CHECK-NEXT:  %trips = arith.ceildivsi %span, %step : index
// CHECK-NEXT:  %go = arith.cmpi slt, %c0, %trips : index
// CHECK-NEXT:  scf.if %go {
// CHECK-NEXT:    %fill_offset = arith.muli %c0, %step : index
// CHECK-NEXT:    %fill_iv = arith.addi %lb, %fill_offset : index
// CHECK-NEXT:    %fill_slot = arith.remui %c0, %[[CN:c[23]]] : index
// CHECK-NEXT:    %a_fill = tile.stage %a_ring[%fill_slot]
// CHECK-NEXT:    %a_window = tile.view %A[%fill_iv, %c0]
// CHECK-NEXT:    tile.cp_async %a_window, %a_fill
// CHECK-NEXT:  }
// CHECK-NEXT:  tile.cp_commit_group
// CHECK-NOT:   tile.barrier
// CHECK:       scf.for %i = %lb to %ub step %step
// CHECK-NEXT:    %iv_offset = arith.subi %i, %lb : index
// CHECK-NEXT:    %use = arith.divui %iv_offset, %step : index
// CHECK-NEXT:    %fill = arith.addi %use, %{{c[12]}} : index
// CHECK-NEXT:    %[[GO:go_[0-9]+]] = arith.cmpi slt, %fill, %trips : index
// CHECK-NEXT:    scf.if %[[GO]] {
// CHECK-NEXT:      %[[OFF:fill_offset_[0-9]+]] = arith.muli %fill, %step : index
// CHECK-NEXT:      %[[IV:fill_iv_[0-9]+]] = arith.addi %lb, %[[OFF]] : index
// CHECK-NEXT:      %[[SLOT:fill_slot_[0-9]+]] = arith.remui %fill, %[[CN]] : index
// CHECK-NEXT:      %[[DST:a_fill_[0-9]+]] = tile.stage %a_ring[%[[SLOT]]]
// CHECK-NEXT:      %[[WIN:a_window_[0-9]+]] = tile.view %A[%[[IV]], %c0]
// CHECK-NEXT:      tile.cp_async %[[WIN]], %[[DST]]
// CHECK-NEXT:    }
// CHECK-NEXT:    tile.cp_commit_group
// CHECK-NEXT:    tile.cp_wait_group {{[12]}}
// CHECK-NEXT:    %use_slot = arith.remui %use, %[[CN]] : index
// CHECK-NEXT:    %a_stage = tile.stage %a_ring[%use_slot]
// CHECK-NEXT:    %acc_next = tile.mma %a_stage, %a_stage, %acc transpose_b
// CHECK-NEXT:    tile.release %a_stage
// CHECK-NEXT:    scf.yield %acc_next
// CHECK-NEXT:  }
// CHECK-NEXT:  %twice = scf.for %i_1 = %lb to %ub step %step iter_args(%x = %acc_final) -> (!tile.tile<64x64xf32, register>) {
// CHECK-NEXT:    %y = tile.add %x, %x : !tile.tile<64x64xf32, register>
// CHECK-NEXT:    scf.yield %y : !tile.tile<64x64xf32, register>
// CHECK-NEXT:  }

// S1-LABEL: func.func @strided
// S1:       %a_ring = tile.alloc_shared align 1024 : !tile.tile<1x64x64xbf16, shared, swizzle 128>
// S1:       scf.for %i = %lb to %ub step %step
// S1:         %use_slot = arith.remui %use, %c1 : index

// -----

// Two loops of one block refill the same tile (a block-sparse kernel: full key blocks, then partial ones):
// one ring, whose fill and use numbers go on in the second loop from the first loop's trip count.
func.func @two_loops_one_ring(%A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>}, %counts: !tile.tile<?xi32, global> {tile.dims = #tile.dims<2>}, %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, M>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>, tile.divisible = {K = 8 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %a_smem = tile.alloc_shared align 1024 : !tile.tile<64x64xbf16, shared, swizzle 128>
  %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %n_first = tile.load_index %counts[%c0] : !tile.tile<?xi32, global>
  %n_second = tile.load_index %counts[%c1] : !tile.tile<?xi32, global>
  %acc_first = scf.for %j = %c0 to %n_first step %c1 iter_args(%acc = %acc_init) -> (!tile.tile<64x64xf32, register>) {
    %k0 = arith.muli %j, %c64 : index
    %a_window = tile.view %A[%c0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %acc_next = tile.mma %a_smem, %a_smem, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %acc_next : !tile.tile<64x64xf32, register>
  }
  %acc_second = scf.for %j = %c0 to %n_second step %c1 iter_args(%acc = %acc_first) -> (!tile.tile<64x64xf32, register>) {
    %k0 = arith.muli %j, %c64 : index
    %a_window = tile.view %A[%c0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %acc_next = tile.mma %a_smem, %a_smem, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %acc_next : !tile.tile<64x64xf32, register>
  }
  %c_window = tile.view %C[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %acc_second, %c_window : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @two_loops_one_ring
// CHECK:       %a_ring = tile.alloc_shared align 1024 : !tile.tile<{{[23]}}x64x64xbf16, shared, swizzle 128>
// CHECK-NOT:   tile.alloc_shared
// CHECK:       %trips = arith.ceildivsi
// CHECK:       %acc_first = scf.for %j
// CHECK:         %use_slot = arith.remui %j, %c{{[23]}} : index
// CHECK:       %trips_1 = arith.ceildivsi
// CHECK:       %acc_second = scf.for %j_1
// CHECK:         %[[N:.*]] = arith.addi %trips, %j_1 : index
// CHECK-NEXT:    %use_slot_1 = arith.remui %[[N]], %c{{[23]}} : index
// CHECK-NEXT:    %a_stage_1 = tile.stage %a_ring[%use_slot_1]

// S1-LABEL: func.func @two_loops_one_ring
// S1:       %a_ring = tile.alloc_shared align 1024 : !tile.tile<1x64x64xbf16, shared, swizzle 128>
// S1-NOT:   tile.alloc_shared
// S1:       %[[N:.*]] = arith.addi %trips, %j_1 : index
// S1-NEXT:  %use_slot_1 = arith.remui %[[N]], %c1 : index
