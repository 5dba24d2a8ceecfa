// RUN: tessera-opt %s -p slab-elementwise-chains | filecheck %s

// A chain that holds several whole fragments at once (the score %s read by the first op and again by the
// last, beside the remainder %r and the quotient %q: the shape of float_division's fmod ladder) is emitted
// SLAB (8) lanes at a time right before its last op: %s cut into slabs first, a constant's slab a constant,
// each slab's div, trunc, fma and sub, the result's slabs joined by a shuffle; each slab keeps the name (and
// source location) of the value it is a slab of.
// A straight chain (a soft-cap's mul, tanh, mul: one fragment live at a time) is left as it is.

func.func @ladder(%s: vector<16xf32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %c = arith.constant dense<1.5> : vector<16xf32>
  %m = arith.constant dense<-1.5> : vector<16xf32>
  %d = arith.divf %s, %c : vector<16xf32>
  %q = math.trunc %d : vector<16xf32>
  %r = math.fma %q, %m, %s : vector<16xf32>
  %d2 = arith.divf %r, %c : vector<16xf32>
  %q2 = math.trunc %d2 : vector<16xf32>
  %r2 = math.fma %q2, %m, %r : vector<16xf32>
  %out = arith.subf %s, %r2 : vector<16xf32>
  %off = arith.constant dense<[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]> : vector<16xi32>
  %mask = arith.constant dense<true> : vector<16xi1>
  sm90.st_global %p[%off], %out, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  %k = arith.constant dense<0.125> : vector<16xf32>
  %x = arith.mulf %s, %k : vector<16xf32>
  %t = sm90.tanh_approx %x : vector<16xf32>
  %capped = arith.mulf %t, %c : vector<16xf32>
  sm90.st_global %p[%off], %capped, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  func.return
}

// CHECK-LABEL: func.func @ladder
// CHECK:      %s_1 = vector.shuffle %s, %s [0, 1, 2, 3, 4, 5, 6, 7] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT: %s_2 = vector.shuffle %s, %s [8, 9, 10, 11, 12, 13, 14, 15] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT: %0 = arith.constant dense<1.500000e+00> : vector<8xf32>
// CHECK-NEXT: %d = arith.divf %s_1, %0 : vector<8xf32>
// CHECK-NEXT: %q = math.trunc %d : vector<8xf32>
// CHECK-NEXT: %1 = arith.constant dense<-1.500000e+00> : vector<8xf32>
// CHECK-NEXT: %r = math.fma %q, %1, %s_1 : vector<8xf32>
// CHECK:      %r2 = math.fma %q2, %3, %r : vector<8xf32>
// CHECK-NEXT: %out = arith.subf %s_1, %r2 : vector<8xf32>
// CHECK-NEXT: %4 = arith.constant dense<1.500000e+00> : vector<8xf32>
// CHECK-NEXT: %d_1 = arith.divf %s_2, %4 : vector<8xf32>
// CHECK:      %out_1 = arith.subf %s_2, %r2_1 : vector<8xf32>
// CHECK-NEXT: %out_2 = vector.shuffle %out, %out_1 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xf32>, vector<8xf32>
// CHECK-NOT:  arith.divf {{.*}} vector<16xf32>
// CHECK:      sm90.st_global %p[%off], %out_2, %mask
// CHECK:      %x = arith.mulf %s, %k : vector<16xf32>
// CHECK-NEXT: %t = sm90.tanh_approx %x : vector<16xf32>
// CHECK-NEXT: %capped = arith.mulf %t, %c : vector<16xf32>


// A chain whose value is read outside it before the chain's last op (a store between its ops) is cut there:
// the ops before the store are one run (%a alone, one fragment: left as it is), the rest another (%b and
// %c read %s and %a again, three fragments at once: emitted in slabs, %a and %s cut as leaves).
func.func @cut(%s: vector<16xf32>, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %off = arith.constant dense<[0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]> : vector<16xi32>
  %mask = arith.constant dense<true> : vector<16xi1>
  %a = math.trunc %s : vector<16xf32>
  sm90.st_global %p[%off], %a, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  %b = arith.subf %s, %a : vector<16xf32>
  %e = math.floor %b : vector<16xf32>
  %f = arith.mulf %e, %b : vector<16xf32>
  %g = arith.addf %f, %a : vector<16xf32>
  %h = arith.subf %g, %s : vector<16xf32>
  sm90.st_global %p[%off], %h, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  func.return
}

// CHECK-LABEL: func.func @cut
// CHECK:      %a = math.trunc %s : vector<16xf32>
// CHECK-NEXT: sm90.st_global %p[%off], %a, %mask
// CHECK-NEXT: %s_1 = vector.shuffle %s, %s [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-NEXT: %s_2 = vector.shuffle %s, %s [8, 9, 10, 11, 12, 13, 14, 15]
// CHECK-NEXT: %a_1 = vector.shuffle %a, %a [0, 1, 2, 3, 4, 5, 6, 7]
// CHECK-NEXT: %a_2 = vector.shuffle %a, %a [8, 9, 10, 11, 12, 13, 14, 15]
// CHECK-NEXT: %b = arith.subf %s_1, %a_1 : vector<8xf32>
// CHECK:      %h_1 = arith.subf %g_1, %s_2 : vector<8xf32>
// CHECK-NEXT: %h_2 = vector.shuffle %h, %h_1 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
// CHECK-NEXT: sm90.st_global %p[%off], %h_2, %mask
