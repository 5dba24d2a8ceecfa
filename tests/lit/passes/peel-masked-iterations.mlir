// RUN: tessera-opt %s --split-input-file -p peel-masked-iterations | filecheck %s

!s = !tile.tile<64x32xf32, register>

// Key blocks k0 = 32 j of a [64, 32] score tile. The bounds mask is the identity while k0 + 32 <= seq_k, the
// causal one while k0 + 32 <= q0 + 1 + seq_k - seq_q: trips j <= floordiv(T - 32 - 0, 32). The first loop
// runs the trips below the smaller limit, clamped to [0, n], without the masks; the second the rest.
// CHECK-LABEL: func.func @causal
// CHECK:       %mask_slack = arith.subi %seq_k, %c32 : index
// CHECK-NEXT:  %last_unmasked_trip = arith.floordivsi %mask_slack, %c32 : index
// CHECK-NEXT:  %unmasked_trips = arith.addi %last_unmasked_trip, %c1 : index
// CHECK-NEXT:  %[[Q1:.*]] = arith.addi %q0, %c1 : index
// CHECK-NEXT:  %[[QK:.*]] = arith.addi %[[Q1]], %seq_k : index
// CHECK-NEXT:  %causal_limit = arith.subi %[[QK]], %seq_q : index
// CHECK-NEXT:  %mask_slack_1 = arith.subi %causal_limit, %c32 : index
// CHECK-NEXT:  %last_unmasked_trip_1 = arith.floordivsi %mask_slack_1, %c32 : index
// CHECK-NEXT:  %unmasked_trips_1 = arith.addi %last_unmasked_trip_1, %c1 : index
// CHECK-NEXT:  %[[MIN:.*]] = arith.minsi %unmasked_trips, %unmasked_trips_1 : index
// CHECK-NEXT:  %[[CLAMP:.*]] = arith.minsi %[[MIN]], %n : index
// CHECK-NEXT:  %peeled_trips = arith.maxsi %[[CLAMP]], %c0 : index
// CHECK-NEXT:  %r = scf.for %j = %c0 to %peeled_trips step %c1 iter_args(%acc = %x)
// CHECK-NEXT:    %next = tile.add %acc, %x
// CHECK-NEXT:    scf.yield %next
// CHECK-NEXT:  }
// CHECK-NEXT:  %r_1 = scf.for %j_1 = %peeled_trips to %n step %c1 iter_args(%acc_1 = %r)
// CHECK-NEXT:    %k0 = arith.muli %j_1, %c32 : index
// CHECK-NEXT:    %in_bounds = tile.mask_bounds %x, %k0, %seq_k
// CHECK-NEXT:    %masked = tile.mask_causal %in_bounds, %q0, %k0, %seq_q, %seq_k
// CHECK-NEXT:    %next_1 = tile.add %acc_1, %masked
// CHECK-NEXT:    scf.yield %next_1
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %r_1
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

// -----

!s = !tile.tile<64x32xf32, register>

// A loop from 3 in steps of 2 whose key block comes from the use index t = (j - 3) / 2 (pipeline-loops'
// form): k0 = 32 t grows by 32 a trip. The split point is a trip boundary, mid = 3 + 2 k_mid.
// CHECK-LABEL: func.func @strided
// CHECK:       %[[SPAN:.*]] = arith.subi %ub, %c3 : index
// CHECK-NEXT:  %trips = arith.ceildivsi %[[SPAN]], %c2 : index
// CHECK-NEXT:  %mask_slack = arith.subi %seq_k, %c32 : index
// CHECK-NEXT:  %last_unmasked_trip = arith.floordivsi %mask_slack, %c32 : index
// CHECK:       %unmasked_trips = arith.addi %last_unmasked_trip, %c1 : index
// CHECK-NEXT:  %[[CLAMP:.*]] = arith.minsi %unmasked_trips, %trips : index
// CHECK-NEXT:  %peeled_trips = arith.maxsi %[[CLAMP]], %c0 : index
// CHECK-NEXT:  %[[SKIP:.*]] = arith.muli %peeled_trips, %c2 : index
// CHECK-NEXT:  %mid = arith.addi %c3, %[[SKIP]] : index
// CHECK-NEXT:  %r = scf.for %j = %c3 to %mid step %c2
// CHECK-NOT:     tile.mask_bounds
// CHECK:       %r_1 = scf.for %j_1 = %mid to %ub step %c2 iter_args(%acc_1 = %r)
// CHECK:         tile.mask_bounds
func.func @strided(%x: !s, %seq_k: index, %ub: index) -> !s {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c32 = arith.constant 32 : index
  %r = scf.for %j = %c3 to %ub step %c2 iter_args(%acc = %x) -> (!s) {
    %offset = arith.subi %j, %c3 : index
    %t = arith.divsi %offset, %c2 : index
    %k0 = arith.muli %t, %c32 : index
    %masked = tile.mask_bounds %x, %k0, %seq_k : !s
    %next = tile.add %acc, %masked : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}

// -----

!s = !tile.tile<64x32xf32, register>

// k0 wraps around (remui): not affine in j, the loop is left as it is.
// CHECK-LABEL: func.func @not_affine
// CHECK:       %r = scf.for %j = %c0 to %n step %c1
// CHECK:         %masked = tile.mask_bounds %x, %k0, %seq_k
// CHECK-NOT:   scf.for
func.func @not_affine(%x: !s, %seq_k: index, %n: index) -> !s {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %x) -> (!s) {
    %wrapped = arith.remui %j, %c4 : index
    %k0 = arith.muli %wrapped, %c32 : index
    %masked = tile.mask_bounds %x, %k0, %seq_k : !s
    %next = tile.add %acc, %masked : !s
    scf.yield %next : !s
  }
  func.return %r : !s
}
