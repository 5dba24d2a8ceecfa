// RUN: tessera-opt %s -p overlap-softmax | filecheck %s

!g = !tile.tile<?x64xbf16, global>
!w = !tile.tile<64x64xbf16, global>
!ring = !tile.tile<3x64x64xbf16, shared, swizzle 128>
!sh = !tile.tile<64x64xbf16, shared, swizzle 128>
!s = !tile.tile<64x64xf32, register>
!p = !tile.tile<64x64xbf16, register>
!row = !tile.tile<64xf32, register>

// The key loop of tests/lit/passes/overlap-softmax.mlir, rotated with its first trip folded in (the default;
// overlap-softmax{fold=false} peels it, as overlap-softmax.mlir shows): the loop starts
// at lb with the initial values (P's a zero fill, never read); the P.V mma of trip t-1 and its V release run
// under scf.if %first_trip, the skipping branch first, so the accumulator's last read is the mma.
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
// CHECK:       %m_final, %acc_final = scf.if %any_trip
// CHECK-NEXT:    %0 = tile.fill 0.0 : !tile.tile<64x64xbf16, register>
// CHECK-NEXT:    %m_final_1, %acc_final_1, %p_half_last = scf.for %j = %c0 to %n step %c1
// CHECK-SAME:        iter_args(%m = %m_init, %acc = %acc_init, %p_half_prev = %0)
// CHECK:           tile.cp_wait_group 1
// CHECK:           %s = tile.mma %q, %k_stage, %zero transpose_b
// CHECK-NEXT:      %first_trip = arith.cmpi eq, %j, %c0 : index
// CHECK-NEXT:      %iv_prev = arith.subi %j, %c1 : index
// CHECK-NEXT:      %slot_1 = arith.remui %iv_prev, %c3 : index
// CHECK-NEXT:      %v_stage = tile.stage %v_ring[%slot_1]
// CHECK-NEXT:      %acc_next_or_skipped = scf.if %first_trip
// CHECK-NEXT:        scf.yield %acc
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %acc_next = tile.mma %p_half_prev, %v_stage, %acc :
// CHECK-NEXT:        scf.yield %acc_next
// CHECK:           tile.release %k_stage
// CHECK-NEXT:      scf.if %first_trip {
// CHECK-NEXT:      } else {
// CHECK-NEXT:        tile.release %v_stage
// CHECK-NEXT:      }
// CHECK-NEXT:      %acc_scaled = tile.mul_rows %acc_next_or_skipped, %alpha
// CHECK-NEXT:      %p_half = tile.cast %p
// CHECK-NEXT:      scf.if %go {
// CHECK:           tile.cp_commit_group
// CHECK-NEXT:      scf.yield %m_new, %acc_scaled, %p_half
// The last trip's P.V mma after the loop, as in the peeled form.
// CHECK:         %acc_next_1 = tile.mma %p_half_last, %v_stage_1, %acc_final_1
// CHECK-NEXT:    tile.release %v_stage_1
