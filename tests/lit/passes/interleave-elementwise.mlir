// RUN: tessera-opt %s -p interleave-elementwise | filecheck %s

// A tile made only of row and column vectors (ALiBi's slope * (kv - q), over broadcast views) is computed SLAB
// (8) lanes at a time with the op that combines it with a tile of its own (+ score): the score is shuffled out
// slab by slab first, then each slab's sub, mul and add, and the slabs are joined by a shuffle named as the
// root (each slab is named as the value it is a slab of). A cheap tree read by no lane-wise root (a store's
// value) and a mask's predicates (no registers to save) are left as they are.

func.func @alibi(%s: vector<16xf32>, %col: vector<4xf32>, %row: vector<2xf32>, %slope: vector<2xf32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %kv = vector.shuffle %col, %col [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3] : vector<4xf32>, vector<4xf32>
  %q = vector.shuffle %row, %row [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
  %d = arith.subf %kv, %q : vector<16xf32>
  %h = vector.shuffle %slope, %slope [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
  %bias = arith.mulf %h, %d : vector<16xf32>
  %score = arith.addf %s, %bias : vector<16xf32>
  %off = arith.constant dense<[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]> : vector<16xi32>
  %mask = arith.constant dense<true> : vector<16xi1>
  sm90.st_global %p[%off], %score, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  %lanes = arith.constant dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]> : vector<16xf32>
  %two = arith.constant dense<2.0> : vector<16xf32>
  %e = arith.mulf %kv, %two : vector<16xf32>
  %f = arith.addf %e, %lanes : vector<16xf32>
  sm90.st_global %p[%off], %f, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  %c = sm90.setp "lt" %kv, %q : vector<16xf32> -> vector<16xi1>
  %masked = sm90.selp %c, %s, %s : vector<16xi1>, vector<16xf32>
  sm90.st_global %p[%off], %masked, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  func.return
}

// CHECK-LABEL: func.func @alibi
// CHECK:      %s_1 = vector.shuffle %s, %s [0, 1, 2, 3, 4, 5, 6, 7] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT: %s_2 = vector.shuffle %s, %s [8, 9, 10, 11, 12, 13, 14, 15] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT: %0 = vector.shuffle %col, %col [0, 1, 0, 1, 2, 3, 2, 3] : vector<4xf32>, vector<4xf32>
// CHECK-NEXT: %1 = vector.shuffle %row, %row [0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
// CHECK-NEXT: %d = arith.subf %0, %1 : vector<8xf32>
// CHECK-NEXT: %2 = vector.shuffle %slope, %slope [0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
// CHECK-NEXT: %bias = arith.mulf %2, %d : vector<8xf32>
// CHECK-NEXT: %score = arith.addf %s_1, %bias : vector<8xf32>
// CHECK:      %bias_1 = arith.mulf %5, %d_1 : vector<8xf32>
// CHECK-NEXT: %score_1 = arith.addf %s_2, %bias_1 : vector<8xf32>
// CHECK-NEXT: %score_2 = vector.shuffle %score, %score_1 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xf32>, vector<8xf32>
// CHECK-NOT:  arith.subf {{.*}} vector<16xf32>
// CHECK:      sm90.st_global %p[%off], %score_2, %mask
// CHECK:      %e = arith.mulf %kv, %two : vector<16xf32>
// CHECK-NEXT: %f = arith.addf %e, %lanes : vector<16xf32>
// CHECK:      %c = sm90.setp "lt" %kv, %q : vector<16xf32> -> vector<16xi1>
// CHECK-NEXT: %masked = sm90.selp %c, %s, %s : vector<16xi1>, vector<16xf32>


// A mask's setp (cheap, but predicates only) read by a select of the score, which is no root of its own; the
// add that reads the select and kv - q is: only kv - q is interleaved with it, the setp and select stay.
func.func @masked(%s: vector<16xf32>, %col: vector<4xf32>, %row: vector<2xf32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %kv = vector.shuffle %col, %col [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3] : vector<4xf32>, vector<4xf32>
  %q = vector.shuffle %row, %row [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
  %c = sm90.setp "lt" %kv, %q : vector<16xf32> -> vector<16xi1>
  %m = sm90.selp %c, %s, %s : vector<16xi1>, vector<16xf32>
  %d = arith.subf %kv, %q : vector<16xf32>
  %r = arith.addf %m, %d : vector<16xf32>
  %off = arith.constant dense<[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]> : vector<16xi32>
  %mask = arith.constant dense<true> : vector<16xi1>
  sm90.st_global %p[%off], %r, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  func.return
}

// CHECK-LABEL: func.func @masked
// CHECK:      %c = sm90.setp "lt" %kv, %q : vector<16xf32> -> vector<16xi1>
// CHECK-NEXT: %m = sm90.selp %c, %s, %s : vector<16xi1>, vector<16xf32>
// CHECK-NEXT: vector.shuffle %m, %m [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK:      arith.subf %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK:      %r_2 = vector.shuffle %r, %r_1
