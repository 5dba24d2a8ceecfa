// RUN: tessera-opt %s --split-input-file --verify-diagnostics -p 'overlap-softmax{fold=false}' | filecheck %s

!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!ring = !tile.tile<3x64x64xbf16, shared, swizzle 128>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>
!row = !tile.tile<64xf32, register>

// The key loop of flash attention as pipeline-loops{stages=3} leaves it (its prologue is left out): the
// load of trip j+2, the wait for trip j's, the score mma S = Q K_j^T, the softmax, the accumulator update
// acc * alpha + P V_j, the releases.
func.func @flash(%K: !g, %V: !g, %q: !sh, %n: index) -> (!row, !s) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c64 = arith.constant 64 : index
  %k_ring = tile.alloc_shared : !ring
  %v_ring = tile.alloc_shared : !ring
  %m_init = tile.fill -inf : !row
  %acc_init = tile.fill 0.0 : !s
  %m_final, %acc_final = scf.for %j = %c0 to %n step %c1 iter_args(%m = %m_init, %acc = %acc_init) -> (!row, !s) {
    %fill = arith.addi %j, %c2 : index
    %go = arith.cmpi slt, %fill, %n : index
    scf.if %go {
      %k0_fill = arith.muli %fill, %c64 : index
      %fill_slot = arith.remui %fill, %c3 : index
      %k_window = tile.view %K[%k0_fill, %c0] : !g -> !w
      %k_fill = tile.stage %k_ring[%fill_slot] : !ring -> !sh
      tile.cp_async %k_window, %k_fill : !w, !sh
      %v_window = tile.view %V[%k0_fill, %c0] : !g -> !w
      %v_fill = tile.stage %v_ring[%fill_slot] : !ring -> !sh
      tile.cp_async %v_window, %v_fill : !w, !sh
    }
    tile.cp_commit_group
    tile.cp_wait_group 2
    %slot = arith.remui %j, %c3 : index
    %k_stage = tile.stage %k_ring[%slot] : !ring -> !sh
    %v_stage = tile.stage %v_ring[%slot] : !ring -> !sh
    %zero = tile.fill 0.0 : !s
    %s = tile.mma %q, %k_stage, %zero transpose_b : !sh, !sh, !s
    %s_max = tile.row_max %s : !s -> !row
    %m_new = tile.element_max %m, %s_max : !row
    %alpha = tile.exp_diff %m, %m_new : !row
    %p = tile.exp_subtract %s, %m_new : !s, !row
    %acc_scaled = tile.mul_rows %acc, %alpha : !s, !row
    %p_half = tile.cast %p : !s -> !p
    %acc_next = tile.mma %p_half, %v_stage, %acc_scaled : !p, !sh, !s
    tile.release %k_stage : !sh
    tile.release %v_stage : !sh
    scf.yield %m_new, %acc_next : !row, !s
  }
  func.return %m_final, %acc_final : !row, !s
}

// CHECK-LABEL: func.func @flash
// Trip 0 alone: its softmax, P's conversion and the rescale of the initial accumulator; no P.V mma yet.
// CHECK:       %any_trip = arith.cmpi sgt, %n, %c0 : index
// CHECK-NEXT:  %m_final, %acc_final = scf.if %any_trip
// CHECK:         tile.cp_wait_group 1
// CHECK:         %s = tile.mma %q, %k_stage, %zero transpose_b
// CHECK-NOT:     tile.mma
// CHECK:         tile.release %k_stage
// CHECK-NEXT:    %p_half = tile.cast %p
// CHECK-NEXT:    %acc_scaled = tile.mul_rows %acc_init, %alpha
// CHECK-NEXT:    scf.if %go {
// CHECK:         tile.cp_commit_group
// Trip t: S of trip t, then P.V of trip t-1 adding to the accumulator scaled at the end of trip t-1, the
// softmax, the releases, the rescale by trip t's alpha and P's conversion (after the P.V mma retired), the copy.
// CHECK-NEXT:    %m_final_1, %acc_final_1, %p_half_last = scf.for %j = %c1 to %n step %c1
// CHECK-SAME:        iter_args(%m = %m_new, %acc = %acc_scaled, %p_half_prev = %p_half)
// CHECK-NEXT:      %fill_1 = arith.addi %j, %c2 : index
// CHECK-NEXT:      %go_1 = arith.cmpi slt, %fill_1, %n : index
// CHECK-NEXT:      tile.cp_wait_group 1
// CHECK-NEXT:      %slot_1 = arith.remui %j, %c3 : index
// CHECK-NEXT:      %k_stage_1 = tile.stage %k_ring[%slot_1]
// CHECK-NEXT:      %zero_1 = tile.fill 0.0
// CHECK-NEXT:      %s_1 = tile.mma %q, %k_stage_1, %zero_1 transpose_b
// CHECK-NEXT:      %iv_prev = arith.subi %j, %c1 : index
// CHECK-NEXT:      %slot_2 = arith.remui %iv_prev, %c3 : index
// CHECK-NEXT:      %v_stage = tile.stage %v_ring[%slot_2]
// CHECK-NEXT:      %acc_next = tile.mma %p_half_prev, %v_stage, %acc
// CHECK-NEXT:      %s_max_1 = tile.row_max %s_1
// CHECK:           %p_1 = tile.exp_subtract %s_1, %m_new_1
// CHECK-NEXT:      tile.release %k_stage_1
// CHECK-NEXT:      tile.release %v_stage
// CHECK-NEXT:      %acc_scaled_1 = tile.mul_rows %acc_next, %alpha_1
// CHECK-NEXT:      %p_half_1 = tile.cast %p_1
// CHECK-NEXT:      scf.if %go_1 {
// CHECK:           tile.cp_commit_group
// CHECK-NEXT:      scf.yield %m_new_1, %acc_scaled_1, %p_half_1
// CHECK-NEXT:    }
// The P.V mma of the last trip.
// CHECK-NEXT:    %last_trip = arith.subi %n, %c1 : index
// CHECK-NEXT:    %slot_3 = arith.remui %last_trip, %c3 : index
// CHECK-NEXT:    %v_stage_1 = tile.stage %v_ring[%slot_3]
// CHECK-NEXT:    %acc_next_1 = tile.mma %p_half_last, %v_stage_1, %acc_final_1
// CHECK-NEXT:    tile.release %v_stage_1
// CHECK-NEXT:    scf.yield %m_final_1, %acc_next_1
// CHECK-NEXT:  } else {
// CHECK-NEXT:    scf.yield %m_init, %acc_init
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %m_final, %acc_final

// -----

!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!ring2 = !tile.tile<2x64x64xbf16, shared, swizzle 128>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>

// A GEMM K loop has an accumulator but no second tile.mma: nothing to overlap, left as it is.
// CHECK-LABEL: func.func @gemm
// CHECK:       scf.for %j = %c0 to %n step %c1 iter_args(%acc = %acc_init)
// CHECK-NEXT:    %fill = arith.addi %j, %c1 : index
// CHECK:         tile.cp_wait_group 1
// CHECK:         %acc_next = tile.mma %a_stage, %b_stage, %acc
// CHECK-NEXT:    tile.release %a_stage
// CHECK-NEXT:    tile.release %b_stage
// CHECK-NEXT:    scf.yield %acc_next
func.func @gemm(%A: !g, %B: !g, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %a_ring = tile.alloc_shared : !ring2
  %b_ring = tile.alloc_shared : !ring2
  %acc_init = tile.fill 0.0 : !s
  %acc_final = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %acc_init) -> (!s) {
    %fill = arith.addi %j, %c1 : index
    %go = arith.cmpi slt, %fill, %n : index
    scf.if %go {
      %k0 = arith.muli %fill, %c64 : index
      %fill_slot = arith.remui %fill, %c2 : index
      %a_window = tile.view %A[%c0, %k0] : !g -> !w
      %a_fill = tile.stage %a_ring[%fill_slot] : !ring2 -> !sh
      tile.cp_async %a_window, %a_fill : !w, !sh
      %b_window = tile.view %B[%k0, %c0] : !g -> !w
      %b_fill = tile.stage %b_ring[%fill_slot] : !ring2 -> !sh
      tile.cp_async %b_window, %b_fill : !w, !sh
    }
    tile.cp_commit_group
    tile.cp_wait_group 1
    %slot = arith.remui %j, %c2 : index
    %a_stage = tile.stage %a_ring[%slot] : !ring2 -> !sh
    %b_stage = tile.stage %b_ring[%slot] : !ring2 -> !sh
    %acc_next = tile.mma %a_stage, %b_stage, %acc : !sh, !sh, !s
    tile.release %a_stage : !sh
    tile.release %b_stage : !sh
    scf.yield %acc_next : !s
  }
  func.return %acc_final : !s
}

// -----

!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!ring1 = !tile.tile<1x64x64xbf16, shared, swizzle 128>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>

// With one stage, trip t's copy would overwrite the V tile the update of trip t-1 still reads.
// CHECK: overlap-softmax: %acc_next = tile.mma %p_half, %v_stage, %acc : {{.*}}: reads a stage of %v_ring, a 1-stage ring: trip t's copy would overwrite it while the update of trip t-1 reads it; overlap-softmax needs pipeline-loops{stages=N} with N >= 2
func.func @one_stage(%K: !g, %V: !g, %q: !sh, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %k_ring = tile.alloc_shared : !ring1
  %v_ring = tile.alloc_shared : !ring1
  %acc_init = tile.fill 0.0 : !s
  %acc_final = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %acc_init) -> (!s) {
    %k0 = arith.muli %j, %c64 : index
    %slot = arith.remui %j, %c1 : index
    %k_window = tile.view %K[%k0, %c0] : !g -> !w
    %k_fill = tile.stage %k_ring[%slot] : !ring1 -> !sh
    tile.cp_async %k_window, %k_fill : !w, !sh
    %v_window = tile.view %V[%k0, %c0] : !g -> !w
    %v_fill = tile.stage %v_ring[%slot] : !ring1 -> !sh
    tile.cp_async %v_window, %v_fill : !w, !sh
    tile.cp_commit_group
    tile.cp_wait_group 0
    %k_stage = tile.stage %k_ring[%slot] : !ring1 -> !sh
    %v_stage = tile.stage %v_ring[%slot] : !ring1 -> !sh
    %zero = tile.fill 0.0 : !s
    %s = tile.mma %q, %k_stage, %zero transpose_b : !sh, !sh, !s
    %p_half = tile.cast %s : !s -> !p
    %acc_next = tile.mma %p_half, %v_stage, %acc : !p, !sh, !s
    tile.release %k_stage : !sh
    tile.release %v_stage : !sh
    scf.yield %acc_next : !s
  }
  func.return %acc_final : !s
}

// -----

!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>

// Unpipelined: the update of trip t-1 would read the V tile that trip t's copy refills.
// CHECK: overlap-softmax: %acc_next = tile.mma %p_half, %v_smem, %acc : {{.*}}: reads %v_smem, which this loop refills every trip; the update of trip t-1 can only run during trip t from a ring stage: run pipeline-loops{stages=N} with N >= 2 first
func.func @unpipelined(%K: !g, %V: !g, %q: !sh, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %k_smem = tile.alloc_shared : !sh
  %v_smem = tile.alloc_shared : !sh
  %acc_init = tile.fill 0.0 : !s
  %acc_final = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %acc_init) -> (!s) {
    %k0 = arith.muli %j, %c64 : index
    %k_window = tile.view %K[%k0, %c0] : !g -> !w
    tile.cp_async %k_window, %k_smem : !w, !sh
    %v_window = tile.view %V[%k0, %c0] : !g -> !w
    tile.cp_async %v_window, %v_smem : !w, !sh
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %zero = tile.fill 0.0 : !s
    %s = tile.mma %q, %k_smem, %zero transpose_b : !sh, !sh, !s
    %p_half = tile.cast %s : !s -> !p
    %acc_next = tile.mma %p_half, %v_smem, %acc : !p, !sh, !s
    tile.barrier
    scf.yield %acc_next : !s
  }
  func.return %acc_final : !s
}

// -----

// The same loop marked tile.no_overlap (a block-sparse kernel's loop over partial blocks): left as it is.
// CHECK-LABEL: func.func @flash_no_overlap
// CHECK-NOT:   scf.if %{{.*}} -> (
// CHECK:       scf.for %j = %c0 to %n step %c1 iter_args(%m = %m_init, %acc = %acc_init) -> (!tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>) {
// CHECK:         %s = tile.mma
// CHECK-NEXT:    %s_max = tile.row_max
// CHECK:         %acc_next = tile.mma %p_half, %v_stage, %acc_scaled
// CHECK:       } {tile.no_overlap}
!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!ring = !tile.tile<3x64x64xbf16, shared, swizzle 128>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>
!row = !tile.tile<64xf32, register>

func.func @flash_no_overlap(%K: !g, %V: !g, %q: !sh, %n: index) -> (!row, !s) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c64 = arith.constant 64 : index
  %k_ring = tile.alloc_shared : !ring
  %v_ring = tile.alloc_shared : !ring
  %m_init = tile.fill -inf : !row
  %acc_init = tile.fill 0.0 : !s
  %m_final, %acc_final = scf.for %j = %c0 to %n step %c1 iter_args(%m = %m_init, %acc = %acc_init) -> (!row, !s) {
    %fill = arith.addi %j, %c2 : index
    %go = arith.cmpi slt, %fill, %n : index
    scf.if %go {
      %k0_fill = arith.muli %fill, %c64 : index
      %fill_slot = arith.remui %fill, %c3 : index
      %k_window = tile.view %K[%k0_fill, %c0] : !g -> !w
      %k_fill = tile.stage %k_ring[%fill_slot] : !ring -> !sh
      tile.cp_async %k_window, %k_fill : !w, !sh
      %v_window = tile.view %V[%k0_fill, %c0] : !g -> !w
      %v_fill = tile.stage %v_ring[%fill_slot] : !ring -> !sh
      tile.cp_async %v_window, %v_fill : !w, !sh
    }
    tile.cp_commit_group
    tile.cp_wait_group 2
    %slot = arith.remui %j, %c3 : index
    %k_stage = tile.stage %k_ring[%slot] : !ring -> !sh
    %v_stage = tile.stage %v_ring[%slot] : !ring -> !sh
    %zero = tile.fill 0.0 : !s
    %s = tile.mma %q, %k_stage, %zero transpose_b : !sh, !sh, !s
    %s_max = tile.row_max %s : !s -> !row
    %m_new = tile.element_max %m, %s_max : !row
    %alpha = tile.exp_diff %m, %m_new : !row
    %p = tile.exp_subtract %s, %m_new : !s, !row
    %acc_scaled = tile.mul_rows %acc, %alpha : !s, !row
    %p_half = tile.cast %p : !s -> !p
    %acc_next = tile.mma %p_half, %v_stage, %acc_scaled : !p, !sh, !s
    tile.release %k_stage : !sh
    tile.release %v_stage : !sh
    scf.yield %m_new, %acc_next : !row, !s
  } {tile.no_overlap}
  func.return %m_final, %acc_final : !row, !s
}
