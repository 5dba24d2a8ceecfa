// Round trip of the elementwise ops (dialects/tile_elementwise.py) through the custom and the generic form: one
// type when every operand has it, else one per operand; the result type is inferred (broadcast shape; i1 for
// tile.cmp).
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @ops(%x: !tile.tile<64x32xf32, register>, %r: !tile.tile<64xf32, register>,
               %c: !tile.tile<1x32xf32, register>, %q0: index, %s: f32, %n: index) {
  %a = tile.add %x, %x : !tile.tile<64x32xf32, register>
  %b = tile.sub %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
  %d = tile.div %c, %x {note = "attr-dict"} : !tile.tile<1x32xf32, register>, !tile.tile<64x32xf32, register>
  %o = tile.mul %r, %c : !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
  %mx = tile.element_max %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
  %mn = tile.element_min %r, %r : !tile.tile<64xf32, register>
  %e = tile.exp %x : !tile.tile<64x32xf32, register>
  %e2 = tile.exp2 %x : !tile.tile<64x32xf32, register>
  %l2 = tile.log2 %x : !tile.tile<64x32xf32, register>
  %t = tile.tanh %x : !tile.tile<64x32xf32, register>
  %sg = tile.sigmoid %x : !tile.tile<64x32xf32, register>
  %si = tile.silu %x : !tile.tile<64x32xf32, register>
  %sq = tile.sqrt %r : !tile.tile<64xf32, register>
  %rs = tile.rsqrt %r : !tile.tile<64xf32, register>
  %rc = tile.reciprocal %x : !tile.tile<64x32xf32, register>
  %ab = tile.abs %x : !tile.tile<64x32xf32, register>
  %ng = tile.neg %x : !tile.tile<64x32xf32, register>
  %i = tile.iota rows offset %q0 : !tile.tile<64x32xi32, register>
  %j = tile.iota cols : !tile.tile<1x32xi32, register>
  %k = tile.iota rows : !tile.tile<64xi32, register>
  %p = tile.cmp le %j, %i : !tile.tile<1x32xi32, register>, !tile.tile<64x32xi32, register>
  %pf = tile.cmp ne %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
  %fs = tile.splat %s : f32 -> !tile.tile<64x32xf32, register>
  %is = tile.splat %n : index -> !tile.tile<64xi32, register>
  %y = tile.select %p, %x, %fs : !tile.tile<64x32xi1, register>, !tile.tile<64x32xf32, register>
  %z = tile.select %pf, %r, %c : !tile.tile<64x32xi1, register>, !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
  %ii = tile.sub %k, %is : !tile.tile<64xi32, register>
  %fd = tile.floordiv %j, %is : !tile.tile<1x32xi32, register>, !tile.tile<64xi32, register>
  %md = tile.mod %i, %i : !tile.tile<64x32xi32, register>
  %fl = tile.floor %x : !tile.tile<64x32xf32, register>
  %ce = tile.ceil %r : !tile.tile<64xf32, register>
  %ri = tile.rint %c : !tile.tile<1x32xf32, register>
  %tr = tile.trunc %x : !tile.tile<64x32xf32, register>
  func.return
}

// CHECK:      %a = tile.add %x, %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %b = tile.sub %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %d = tile.div %c, %x {note = "attr-dict"} : !tile.tile<1x32xf32, register>, !tile.tile<64x32xf32, register>
// CHECK-NEXT: %o = tile.mul %r, %c : !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
// CHECK-NEXT: %mx = tile.element_max %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %mn = tile.element_min %r, %r : !tile.tile<64xf32, register>
// CHECK-NEXT: %e = tile.exp %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %e2 = tile.exp2 %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %l2 = tile.log2 %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %t = tile.tanh %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %sg = tile.sigmoid %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %si = tile.silu %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %sq = tile.sqrt %r : !tile.tile<64xf32, register>
// CHECK-NEXT: %rs = tile.rsqrt %r : !tile.tile<64xf32, register>
// CHECK-NEXT: %rc = tile.reciprocal %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %ab = tile.abs %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %ng = tile.neg %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %i = tile.iota rows offset %q0 : !tile.tile<64x32xi32, register>
// CHECK-NEXT: %j = tile.iota cols : !tile.tile<1x32xi32, register>
// CHECK-NEXT: %k = tile.iota rows : !tile.tile<64xi32, register>
// CHECK-NEXT: %p = tile.cmp le %j, %i : !tile.tile<1x32xi32, register>, !tile.tile<64x32xi32, register>
// CHECK-NEXT: %pf = tile.cmp ne %x, %r : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %fs = tile.splat %s : f32 -> !tile.tile<64x32xf32, register>
// CHECK-NEXT: %is = tile.splat %n : index -> !tile.tile<64xi32, register>
// CHECK-NEXT: %y = tile.select %p, %x, %fs : !tile.tile<64x32xi1, register>, !tile.tile<64x32xf32, register>
// CHECK-NEXT: %z = tile.select %pf, %r, %c : !tile.tile<64x32xi1, register>, !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
// CHECK-NEXT: %ii = tile.sub %k, %is : !tile.tile<64xi32, register>
// CHECK-NEXT: %fd = tile.floordiv %j, %is : !tile.tile<1x32xi32, register>, !tile.tile<64xi32, register>
// CHECK-NEXT: %md = tile.mod %i, %i : !tile.tile<64x32xi32, register>
// CHECK-NEXT: %fl = tile.floor %x : !tile.tile<64x32xf32, register>
// CHECK-NEXT: %ce = tile.ceil %r : !tile.tile<64xf32, register>
// CHECK-NEXT: %ri = tile.rint %c : !tile.tile<1x32xf32, register>
// CHECK-NEXT: %tr = tile.trunc %x : !tile.tile<64x32xf32, register>

// GENERIC: "tile.mul"(%r, %c) : (!tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>) -> !tile.tile<64x32xf32, register>
// GENERIC: "tile.iota"(%q0) <{axis = "rows"}> : (index) -> !tile.tile<64x32xi32, register>
// GENERIC: "tile.cmp"(%j, %i) <{predicate = "le"}> : (!tile.tile<1x32xi32, register>, !tile.tile<64x32xi32, register>) -> !tile.tile<64x32xi1, register>
// GENERIC: "tile.floordiv"(%j, %is) : (!tile.tile<1x32xi32, register>, !tile.tile<64xi32, register>) -> !tile.tile<64x32xi32, register>
// GENERIC: "tile.rint"(%c) : (!tile.tile<1x32xf32, register>) -> !tile.tile<1x32xf32, register>
