// RUN: tessera-opt %s -p 'peel-masked-iterations{branch=true}' | filecheck %s
// RUN: tessera-opt %s -p 'peel-masked-iterations' | filecheck %s --check-prefix=SPLIT

!s = !tile.tile<64x32xf32, register>
!v = !tile.tile<32x64xbf16, shared, swizzle 128>

// tile.clear_rows of the key tile (k0 + 32 <= seq_k: nothing to clear) is peeled like a bounds mask of width 32:
// one limit, and the clear runs in the masks' else block, after them; a trip that skips the masks skips it too.
// CHECK-LABEL: func.func @clear_with_the_masks
// CHECK:       %unmasked = arith.cmpi slt, %j, %peeled_trips : index
// CHECK-NEXT:  %in_bounds = scf.if %unmasked -> (!tile.tile<64x32xf32, register>) {
// CHECK-NEXT:    scf.yield %x
// CHECK-NEXT:  } else {
// CHECK-NEXT:    %in_bounds_1 = tile.mask_bounds %x, %k0, %seq_k
// CHECK-NEXT:    tile.clear_rows %v, %k0, %seq_k
// CHECK-NEXT:    scf.yield %in_bounds_1
// CHECK-NEXT:  }
// CHECK-NEXT:  %next = tile.add %acc, %in_bounds
// The split form drops it from the first loop (the one limit: one mask_slack) and keeps it in the masked one.
// SPLIT-LABEL: func.func @clear_with_the_masks
// SPLIT:       %mask_slack = arith.subi %seq_k, %c32 : index
// SPLIT-NOT:   = arith.subi %seq_k
// SPLIT:       scf.for %j = %c0 to %peeled_trips
// SPLIT-NEXT:    %next = tile.add %acc, %x
// SPLIT-NEXT:    scf.yield
// SPLIT:       scf.for %j_1 = %peeled_trips to %n
// SPLIT:         tile.mask_bounds
// SPLIT-NEXT:    tile.clear_rows %v, %k0, %seq_k
func.func @clear_with_the_masks(%x: !s, %v: !v, %seq_k: index, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %x) -> (!s) {
    %k0 = arith.muli %j, %c32 : index
    %in_bounds = tile.mask_bounds %x, %k0, %seq_k : !s
    tile.clear_rows %v, %k0, %seq_k : !v
    %next = tile.add %acc, %in_bounds : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}

// A clear that does not follow the masks' branch gets a branch of its own on the same compare's condition.
// CHECK-LABEL: func.func @clear_apart
// CHECK:       %unmasked = arith.cmpi slt, %j, %peeled_trips : index
// CHECK:       %next = tile.add %acc, %in_bounds
// CHECK-NEXT:  %unmasked_1 = arith.cmpi slt, %j, %peeled_trips : index
// CHECK-NEXT:  scf.if %unmasked_1 {
// CHECK-NEXT:  } else {
// CHECK-NEXT:    tile.clear_rows %v, %k0, %seq_k
// CHECK-NEXT:  }
// CHECK-NEXT:  scf.yield %next
func.func @clear_apart(%x: !s, %v: !v, %seq_k: index, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %x) -> (!s) {
    %k0 = arith.muli %j, %c32 : index
    %in_bounds = tile.mask_bounds %x, %k0, %seq_k : !s
    %next = tile.add %acc, %in_bounds : !s
    tile.clear_rows %v, %k0, %seq_k : !v
    scf.yield %next : !s
  }
  func.return %r : !s
}

// A loop whose only peelable op is a clear is left as it is (the lowering's own branch skips it).
// CHECK-LABEL: func.func @clear_alone
// CHECK:       scf.for
// CHECK-NEXT:    %k0 = arith.muli %j, %c32 : index
// CHECK-NEXT:    tile.clear_rows %v, %k0, %seq_k
// SPLIT-LABEL: func.func @clear_alone
// SPLIT-COUNT-1: scf.for
func.func @clear_alone(%v: !v, %seq_k: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  scf.for %j = %c0 to %n step %c1 {
    %k0 = arith.muli %j, %c32 : index
    tile.clear_rows %v, %k0, %seq_k : !v
  }
  func.return
}
