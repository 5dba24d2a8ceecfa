// RUN: tessera-opt %s -p 'peel-masked-iterations{branch=true}' | filecheck %s

!s = !tile.tile<64x32xf32, register>

// The split point of the split form (peel-masked-iterations.mlir), but one loop: the chain of masks runs under
// `scf.if %iv < %mid` with the unmasked tile in the then-branch, so the tile is last read by the first mask.
// CHECK-LABEL: func.func @causal
// CHECK:       %peeled_trips = arith.maxsi %{{.*}}, %c0 : index
// CHECK-NEXT:  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %x)
// CHECK-NEXT:    %k0 = arith.muli %j, %c32 : index
// CHECK-NEXT:    %unmasked = arith.cmpi slt, %j, %peeled_trips : index
// CHECK-NEXT:    %masked = scf.if %unmasked -> (!tile.tile<64x32xf32, register>) {
// CHECK-NEXT:      scf.yield %x
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %in_bounds = tile.mask_bounds %x, %k0, %seq_k
// CHECK-NEXT:      %masked_1 = tile.mask_causal %in_bounds, %q0, %k0, %seq_q, %seq_k
// CHECK-NEXT:      scf.yield %masked_1
// CHECK-NEXT:    }
// CHECK-NEXT:    %next = tile.add %acc, %masked
// CHECK-NEXT:    scf.yield %next
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %r
// CHECK-NOT:   scf.for
func.func @causal(%x: !s, %q0: index, %seq_q: index, %seq_k: index, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %x) -> (!s) {
    %k0 = arith.muli %j, %c32 : index
    %in_bounds = tile.mask_bounds %x, %k0, %seq_k : !s
    %masked = tile.mask_causal %in_bounds, %q0, %k0, %seq_q, %seq_k : !s
    %next = tile.add %acc, %masked : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}
