// RUN: tessera-opt %s -p mask-by-mma | filecheck %s

!s = !tile.tile<64x64xf32, register>
!k = !tile.tile<64x64xbf16, shared, swizzle 128>

// The masks' branch of peel-masked-iterations{branch=true} on a score mma whose key tile is copied from %K,
// whose rows are seq_k: the mask is added by a bias mma right after the score mma, on the masked trips only.
// CHECK-LABEL: func.func @bias
// CHECK:         %k_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT:    %key_bias = tile.alloc_shared : !tile.tile<64x16xbf16, shared, swizzle 32>
// CHECK:         %s = tile.mma %q_smem, %k_smem, %zero transpose_b
// CHECK-NEXT:    %unmasked = arith.cmpi slt, %j, %mid : index
// CHECK-NEXT:    %s_biased = scf.if %unmasked -> (!tile.tile<64x64xf32, register>) {
// CHECK-NEXT:      scf.yield %s
// CHECK-NEXT:    } else {
// CHECK-NEXT:      tile.key_bias %key_bias, %k0, %seq_k : !tile.tile<64x16xbf16, shared, swizzle 32>
// CHECK-NEXT:      %ones = tile.fill 1.0 : !tile.tile<64x16xbf16, register>
// CHECK-NEXT:      %s_biased_1 = tile.mma %ones, %key_bias, %s transpose_b
// CHECK-NEXT:      scf.yield %s_biased_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %t = tile.scale %s_biased by 1.250000e-01
// CHECK-NEXT:    %next = tile.add %acc, %t
// CHECK-NOT:     tile.mask_bounds
func.func @bias(%K: !tile.tile<?x64xbf16, global>, %n: index, %mid: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %seq_k = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
  %q_smem = tile.alloc_shared : !k
  %k_smem = tile.alloc_shared : !k
  %zero = tile.fill 0.0 : !s
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zero) -> (!s) {
    %k0 = arith.muli %j, %c64 : index
    %w = tile.view %K[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %k_smem : !tile.tile<64x64xbf16, global>, !k
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !k, !k, !s
    %t = tile.scale %s by 0.125 : !s
    %unmasked = arith.cmpi slt, %j, %mid : index
    %m = scf.if %unmasked -> (!s) {
      scf.yield %t : !s
    } else {
      %b = tile.mask_bounds %t, %k0, %seq_k : !s
      scf.yield %b : !s
    }
    %next = tile.add %acc, %m : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}

// The same loop with a key tile that another op writes (a store of registers: what its rows past seq_k hold
// is not known to be zero) keeps its select.
// CHECK-LABEL: func.func @written_keys
// CHECK-NOT:     tile.key_bias
// CHECK:         tile.mask_bounds
func.func @written_keys(%K: !tile.tile<?x64xbf16, global>, %x: !tile.tile<64x64xbf16, register>, %n: index, %mid: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %seq_k = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
  %q_smem = tile.alloc_shared : !k
  %k_smem = tile.alloc_shared : !k
  %zero = tile.fill 0.0 : !s
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zero) -> (!s) {
    %k0 = arith.muli %j, %c64 : index
    tile.store_shared %x, %k_smem : !tile.tile<64x64xbf16, register>, !k
    tile.barrier
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !k, !k, !s
    %unmasked = arith.cmpi slt, %j, %mid : index
    %m = scf.if %unmasked -> (!s) {
      scf.yield %s : !s
    } else {
      %b = tile.mask_bounds %s, %k0, %seq_k : !s
      scf.yield %b : !s
    }
    %next = tile.add %acc, %m : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}

// The unmasked scores read again after the masks' branch: the bias would mask them there too, so the select stays.
// CHECK-LABEL: func.func @unmasked_read_again
// CHECK-NOT:     tile.key_bias
// CHECK:         tile.mask_bounds
func.func @unmasked_read_again(%K: !tile.tile<?x64xbf16, global>, %n: index, %mid: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %seq_k = tile.dim %K[0] : !tile.tile<?x64xbf16, global>
  %q_smem = tile.alloc_shared : !k
  %k_smem = tile.alloc_shared : !k
  %zero = tile.fill 0.0 : !s
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zero) -> (!s) {
    %k0 = arith.muli %j, %c64 : index
    %w = tile.view %K[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %k_smem : !tile.tile<64x64xbf16, global>, !k
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !k, !k, !s
    %unmasked = arith.cmpi slt, %j, %mid : index
    %m = scf.if %unmasked -> (!s) {
      scf.yield %s : !s
    } else {
      %b = tile.mask_bounds %s, %k0, %seq_k : !s
      scf.yield %b : !s
    }
    %both = tile.add %m, %s : !s
    %next = tile.add %acc, %both : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}
