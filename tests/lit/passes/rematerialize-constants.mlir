// RUN: tessera-opt %s -p rematerialize-constants | filecheck %s

// Each use of a constant gets its own copy before it, in the form that costs the fewest registers there. A
// whole-tile splat (a tile.fill): swapped into a commutative op's immediate operand; one scalar and a broadcast
// where PTX takes no immediate (the minuend of a sub, a store's value); left whole where its registers become
// the result (the other operand is a shuffle), a loop's carried registers or a wgmma accumulator. Row-vector
// splats (two lanes) and non-splat tables are cloned as they are.

func.func @fills(%x: vector<64xf32>, %r: vector<2xf32>, %n: index, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %half = arith.constant dense<5.000000e-01> : vector<64xf32>
  %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
  %neg = arith.constant dense<0xff800000> : vector<2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = arith.addf %half, %x : vector<64xf32>
  %b = arith.subf %half, %a : vector<64xf32>
  %spread = vector.shuffle %r, %r [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
  %c = arith.mulf %zero, %spread : vector<64xf32>
  %m = arith.maximumf %neg, %r : vector<2xf32>
  %acc = scf.for %i = %c0 to %n step %c1 iter_args(%t = %zero) -> (vector<64xf32>) {
    %u = arith.addf %t, %b : vector<64xf32>
    scf.yield %u : vector<64xf32>
  }
  func.return
}

// CHECK-LABEL: func.func @fills
// The fill first in a commutative op: swapped, an immediate.
// CHECK:      %half = arith.constant dense<5.000000e-01> : vector<64xf32>
// CHECK-NEXT: %a = arith.addf %x, %half : vector<64xf32>
// The minuend of a sub: one register, broadcast.
// CHECK-NEXT: %{{.*}} = arith.constant 5.000000e-01 : f32
// CHECK-NEXT: %half_1 = vector.broadcast %{{.*}} : f32 to vector<64xf32>
// CHECK-NEXT: %b = arith.subf %half_1, %a : vector<64xf32>
// Multiplied by a shuffle, the fill's registers become the result's: left whole, in place.
// CHECK:      %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
// CHECK-NEXT: %c = arith.mulf %zero, %spread : vector<64xf32>
// A row vector's splat is cloned as it is.
// CHECK-NEXT: %neg = arith.constant dense<0xff800000> : vector<2xf32>
// CHECK-NEXT: %m = arith.maximumf %neg, %r : vector<2xf32>
// A loop's initial value: the carried registers, whole.
// CHECK:      %zero_1 = arith.constant dense<0.000000e+00> : vector<64xf32>
// CHECK:      %acc = scf.for {{.*}} iter_args(%t = %zero_1)

// An index vector of a scalar and constant lane offsets (a tile.iota's columns) read twice: one broadcast
// and one add before each reader, so that only the scalar stays live between them.
func.func @lane_offsets(%k0: i32, %q: vector<4xi32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %base = vector.broadcast %k0 : i32 to vector<4xi32>
  %lanes = arith.constant dense<[0, 1, 8, 9]> : vector<4xi32>
  %kv_idx = arith.addi %base, %lanes : vector<4xi32>
  %first = arith.subi %q, %kv_idx : vector<4xi32>
  %second = arith.muli %first, %kv_idx : vector<4xi32>
  func.return
}

// CHECK-LABEL: func.func @lane_offsets
// CHECK:      %[[B1:.*]] = vector.broadcast %k0 : i32 to vector<4xi32>
// CHECK-NEXT: %[[L1:.*]] = arith.constant dense<[0, 1, 8, 9]> : vector<4xi32>
// CHECK-NEXT: %[[K1:.*]] = arith.addi %[[B1]], %[[L1]] : vector<4xi32>
// CHECK-NEXT: %first = arith.subi %q, %[[K1]] : vector<4xi32>
// CHECK-NEXT: %[[B2:.*]] = vector.broadcast %k0 : i32 to vector<4xi32>
// CHECK-NEXT: %[[L2:.*]] = arith.constant dense<[0, 1, 8, 9]> : vector<4xi32>
// CHECK-NEXT: %[[K2:.*]] = arith.addi %[[B2]], %[[L2]] : vector<4xi32>
// CHECK-NEXT: %second = arith.muli %first, %[[K2]] : vector<4xi32>

// A small index expression over such vectors and a row vector's shuffle (a score_mod's `(kv_idx - q_idx) % 5`
// and a mask_mod's `(kv_idx - q_idx) // 3`, merged by CSE) read twice: re-created before each reader, so that
// no [BM, BN] tile of it stays live between them; its leaves (the broadcast, the shuffle) are shared.
func.func @index_trees(%k0: i32, %row: vector<2xi32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %base = vector.broadcast %k0 : i32 to vector<4xi32>
  %lanes = arith.constant dense<[0, 1, 8, 9]> : vector<4xi32>
  %kv_idx = arith.addi %base, %lanes : vector<4xi32>
  %q_idx = vector.shuffle %row, %row [0, 0, 1, 1] : vector<2xi32>, vector<2xi32>
  %dist = arith.subi %kv_idx, %q_idx : vector<4xi32>
  %five = arith.constant dense<5> : vector<4xi32>
  %residue = arith.remsi %dist, %five : vector<4xi32>
  %three = arith.constant dense<3> : vector<4xi32>
  %quotient = arith.floordivsi %dist, %three : vector<4xi32>
  func.return
}

// CHECK-LABEL: func.func @index_trees
// CHECK:      %[[B:.*]] = vector.broadcast %k0 : i32 to vector<4xi32>
// CHECK:      %q_idx = vector.shuffle %row, %row [0, 0, 1, 1]
// CHECK:      %[[K1:.*]] = arith.addi %[[B]], %{{.*}} : vector<4xi32>
// CHECK-NEXT: %[[D1:.*]] = arith.subi %[[K1]], %q_idx : vector<4xi32>
// CHECK:      %residue = arith.remsi %[[D1]], %{{.*}} : vector<4xi32>
// CHECK:      %[[K2:.*]] = arith.addi %[[B]], %{{.*}} : vector<4xi32>
// CHECK-NEXT: %[[D2:.*]] = arith.subi %[[K2]], %q_idx : vector<4xi32>
// CHECK:      %quotient = arith.floordivsi %[[D2]], %{{.*}} : vector<4xi32>

// A size expression (64 * ceildiv(seq_q, 64): the rows of the backward's padded intermediates) of a kernel
// argument, read before and inside a loop: re-created before each reader, not held across the loop.
func.func @sizes(%seq_q: index, %n: index, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %blocks = arith.ceildivsi %seq_q, %c64 : index
  %rows = arith.muli %blocks, %c64 : index
  %first = arith.addi %rows, %n : index
  scf.for %i = %c0 to %n step %c1 {
    %inside = arith.muli %rows, %i : index
  }
  func.return
}

// CHECK-LABEL: func.func @sizes
// CHECK:      %[[B1:.*]] = arith.ceildivsi %seq_q, %{{.*}} : index
// CHECK:      %[[R1:.*]] = arith.muli %[[B1]], %{{.*}} : index
// CHECK-NEXT: %first = arith.addi %[[R1]], %n : index
// CHECK:      scf.for
// CHECK:      %[[B2:.*]] = arith.ceildivsi %seq_q, %{{.*}} : index
// CHECK:      %[[R2:.*]] = arith.muli %[[B2]], %{{.*}} : index
// CHECK-NEXT: %inside = arith.muli %[[R2]], %i : index

// A byte offset (a row index times 4) read early and again late, where the row index itself is read later
// still: re-created right before the late read (the row index is live there anyway), not held from the first
// read to it. The last read of the row index keeps its own; an offset whose factor dies first stays whole.
func.func @late_offsets(%row: i64, %other: i64, %a: i64, %b: i64)
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %c4 = arith.constant 4 : i64
  %bytes = arith.muli %row, %c4 : i64
  %early = arith.addi %a, %bytes : i64
  %late = arith.addi %b, %bytes : i64
  %last = arith.addi %row, %a : i64
  %kept = arith.muli %other, %c4 : i64
  %one = arith.addi %a, %kept : i64
  %two = arith.addi %b, %kept : i64
  func.return
}

// CHECK-LABEL: func.func @late_offsets
// CHECK:      %[[B1:.*]] = arith.muli %row, %{{.*}} : i64
// CHECK-NEXT: %early = arith.addi %a, %[[B1]] : i64
// CHECK:      %[[B2:.*]] = arith.muli %row, %{{.*}} : i64
// CHECK-NEXT: %late = arith.addi %b, %[[B2]] : i64
// CHECK:      %[[K:.*]] = arith.muli %other, %{{.*}} : i64
// CHECK:      %one = arith.addi %a, %[[K]] : i64
// CHECK:      %two = arith.addi %b, %[[K]] : i64

// |kv_idx - q_idx| on a thread's distinct offsets (compute-distinct-lanes: ops on 4 registers, read through
// views of 8) read early (a conversion) and late (a compare, a select): the abs, the add and their views are
// re-created right before each reader, so that only the scalar stays live between them (T5's buckets). An
// expression reading a view of a value with registers of its own (%w) is no index expression: re-created, it
// would keep those registers live instead of its own.
func.func @distinct_views(%k0: i32, %w: vector<4xi32>, %m: vector<8xi32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %base = vector.broadcast %k0 : i32 to vector<4xi32>
  %lanes = arith.constant dense<[-8, -7, 0, 1]> : vector<4xi32>
  %d = arith.addi %base, %lanes {sm90.distinct_lanes} : vector<4xi32>
  %d8 = vector.shuffle %d, %d [0, 1, 2, 3, 2, 3, 0, 1] : vector<4xi32>, vector<4xi32>
  %d4 = vector.shuffle %d8, %d8 [0, 1, 2, 3] : vector<8xi32>, vector<8xi32>
  %n = math.absi %d4 {sm90.distinct_lanes} : vector<4xi32>
  %n8 = vector.shuffle %n, %n [0, 1, 2, 3, 2, 3, 0, 1] : vector<4xi32>, vector<4xi32>
  %f = sm90.cvt %n8 : vector<8xi32> -> vector<8xf32>
  %eight = arith.constant dense<8> : vector<8xi32>
  %lt = sm90.setp "lt" %n8, %eight : vector<8xi32> -> vector<8xi1>
  %sel = sm90.selp %lt, %n8, %m : vector<8xi1>, vector<8xi32>
  %w8 = vector.shuffle %w, %w [0, 1, 2, 3, 2, 3, 0, 1] : vector<4xi32>, vector<4xi32>
  %spread = vector.broadcast %k0 : i32 to vector<8xi32>
  %kept = arith.addi %w8, %spread : vector<8xi32>
  %x = arith.muli %kept, %m : vector<8xi32>
  %y = arith.subi %kept, %m : vector<8xi32>
  func.return
}

// CHECK-LABEL: func.func @distinct_views
// CHECK:      %[[D1:.*]] = arith.addi %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<4xi32>
// CHECK-NEXT: %[[V1:.*]] = vector.shuffle %[[D1]], %[[D1]] [0, 1, 2, 3, 2, 3, 0, 1]
// CHECK-NEXT: %[[W1:.*]] = vector.shuffle %[[V1]], %[[V1]] [0, 1, 2, 3]
// CHECK-NEXT: %[[N1:.*]] = math.absi %[[W1]] {sm90.distinct_lanes} : vector<4xi32>
// CHECK-NEXT: %[[E1:.*]] = vector.shuffle %[[N1]], %[[N1]] [0, 1, 2, 3, 2, 3, 0, 1]
// CHECK-NEXT: %f = sm90.cvt %[[E1]]
// CHECK:      math.absi
// CHECK-NEXT: %[[E2:.*]] = vector.shuffle
// CHECK:      %lt = sm90.setp "lt" %[[E2]]
// CHECK:      math.absi
// CHECK-NEXT: %[[E3:.*]] = vector.shuffle
// CHECK-NEXT: %sel = sm90.selp %lt, %[[E3]], %m
// CHECK:      %kept = arith.addi %w8, %spread : vector<8xi32>
// CHECK-NEXT: %x = arith.muli %kept, %m : vector<8xi32>
// CHECK-NEXT: %y = arith.subi %kept, %m : vector<8xi32>
