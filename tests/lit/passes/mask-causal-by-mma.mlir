// RUN: tessera-opt %s -p mask-causal-by-mma | filecheck %s

!s = !tile.tile<128x128xf32, register>
!r = !tile.tile<128xf32, register>
!k = !tile.tile<128x64xbf16, shared, swizzle 128>

// The masks' branch of peel-masked-iterations{branch=true} with a causal mask of an online softmax's scores,
// keys copied from %K whose rows are seq_k, the loop from key 0: the table is written once, the diagonal is
// added by tile.causal_bias right after the score mma on the masked trips of blocks whose first row sees key 0
// (from %biased_from on), and the select runs only for the others (from %selected_from on).
// CHECK-LABEL: func.func @online
// CHECK:         %causal_table = tile.alloc_shared : !tile.tile<624x8xbf16, shared>
// CHECK-NEXT:    tile.causal_bias_table %causal_table : !tile.tile<624x8xbf16, shared>
// CHECK:         %first_row_limit = arith.subi %q0_plus_seq_k, %seq_q : index
// CHECK:         %blind = arith.cmpi slt, %first_row_limit, %{{.*}} : index
// CHECK-NEXT:    %biased_from = arith.select %blind, %n, %mid : index
// CHECK-NEXT:    %selected_from = arith.select %blind, %mid, %n : index
// CHECK:         %s = tile.mma %q_smem, %k_smem, %zero transpose_b
// CHECK-NEXT:    %unbiased = arith.cmpi slt, %j, %biased_from : index
// CHECK-NEXT:    %s_biased = scf.if %unbiased -> (!tile.tile<128x128xf32, register>) {
// CHECK-NEXT:      scf.yield %s
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %s_biased_1 = tile.causal_bias %s, %causal_table, %q0, %k0, %seq_q, %seq_k
// CHECK-NEXT:      scf.yield %s_biased_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %t = tile.scale %s_biased by 1.250000e-01
// CHECK-NEXT:    %unselected = arith.cmpi slt, %j, %selected_from : index
// CHECK-NEXT:    %m = scf.if %unselected
// CHECK:           tile.mask_causal %t, %q0, %k0, %seq_q, %seq_k
func.func @online(%K: !tile.tile<?x64xbf16, global>, %q0: index, %seq_q: index, %n: index, %mid: index) -> !r {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %seq_k = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
  %q_smem = tile.alloc_shared : !k
  %k_smem = tile.alloc_shared : !k
  %zero = tile.fill 0.0 : !s
  %m_init = tile.fill -inf : !r
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m_run = %m_init) -> (!r) {
    %k0 = arith.muli %j, %c128 : index
    %w = tile.view %K[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %w, %k_smem : !tile.tile<128x64xbf16, global>, !k
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !k, !k, !s
    %t = tile.scale %s by 0.125 : !s
    %unmasked = arith.cmpi slt, %j, %mid : index
    %m = scf.if %unmasked -> (!s) {
      scf.yield %t : !s
    } else {
      %b = tile.mask_causal %t, %q0, %k0, %seq_q, %seq_k : !s
      scf.yield %b : !s
    }
    %row = tile.row_max %m : !s -> !r
    %m_new = tile.element_max %m_run, %row : !r
    %p = tile.exp_subtract %m, %m_new : !s, !r
    scf.yield %m_new : !r
  }
  func.return %r : !r
}

// The same loop whose exponentials subtract the tile's own maximum (two_pass_attention's first pass): a row
// whose keys in a trip are all hidden would take -2^100 as that maximum and p = 1, so the select stays.
// CHECK-LABEL: func.func @own_maximum
// CHECK-NOT:     tile.causal_bias
// CHECK:         tile.mask_causal
func.func @own_maximum(%K: !tile.tile<?x64xbf16, global>, %q0: index, %seq_q: index, %n: index, %mid: index) -> !r {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %seq_k = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
  %q_smem = tile.alloc_shared : !k
  %k_smem = tile.alloc_shared : !k
  %zero = tile.fill 0.0 : !s
  %l_init = tile.fill 0.0 : !r
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%l = %l_init) -> (!r) {
    %k0 = arith.muli %j, %c128 : index
    %w = tile.view %K[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %w, %k_smem : !tile.tile<128x64xbf16, global>, !k
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !k, !k, !s
    %unmasked = arith.cmpi slt, %j, %mid : index
    %m = scf.if %unmasked -> (!s) {
      scf.yield %s : !s
    } else {
      %b = tile.mask_causal %s, %q0, %k0, %seq_q, %seq_k : !s
      scf.yield %b : !s
    }
    %row = tile.row_max %m : !s -> !r
    %p = tile.exp_subtract %m, %row : !s, !r
    %sum = tile.row_sum %p : !s -> !r
    %l_next = tile.add %l, %sum : !r
    scf.yield %l_next : !r
  }
  func.return %r : !r
}
