// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// tile.floordiv / tile.mod (Python's // and %) on a thread's 32 registers of a [64, 64] i32 tile: a constant
// 2^k divisor is an arithmetic shift by k or a mask with 2^k - 1 (exact for negative dividends); another
// floor division is one arith.floordivsi (printed, for a constant b > 0, as s ^ ((a ^ s) / b) with
// s = a >> 31, an unsigned division of a non-negative value); another modulus the truncated rem with a sign
// fix-up; a run-time divisor sits behind a guard that gives 0 where it is 0.

func.func @integer_division(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                            %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %k64 = arith.constant 64 : i32
  %k3 = arith.constant -3 : i32
  %k48 = arith.constant 48 : i32
  %i = tile.iota rows : !tile.tile<64x64xi32, register>
  %j = tile.iota cols : !tile.tile<1x64xi32, register>
  %d = tile.sub %j, %i : !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>
  %s64 = tile.splat %k64 : i32 -> !tile.tile<64xi32, register>
  %s3 = tile.splat %k3 : i32 -> !tile.tile<64xi32, register>
  %s48 = tile.splat %k48 : i32 -> !tile.tile<64xi32, register>
  %q = tile.floordiv %d, %s64 : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %r = tile.mod %d, %s64 : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %g = tile.floordiv %q, %s48 : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %m = tile.mod %r, %s3 : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %u = tile.mod %g, %m : !tile.tile<64x64xi32, register>
  %f = tile.cast %u : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
  %o = tile.view %O[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %f, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %[[SIX:.*]] = arith.constant dense<6> : vector<32xi32>
// CHECK-NEXT: %q = arith.shrsi %d, %[[SIX]] : vector<32xi32>
// CHECK-NEXT: %[[MASK:.*]] = arith.constant dense<63> : vector<32xi32>
// CHECK-NEXT: %r = arith.andi %d, %[[MASK]] : vector<32xi32>
// CHECK-NEXT: %[[C48:.*]] = arith.constant dense<48> : vector<32xi32>
// CHECK-NEXT: %g = arith.floordivsi %q, %[[C48]] : vector<32xi32>
// CHECK-NEXT: %[[M3:.*]] = arith.constant dense<-3> : vector<32xi32>
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant dense<0> : vector<32xi32>
// CHECK-NEXT: %[[REM:.*]] = arith.remsi %r, %[[M3]] : vector<32xi32>
// CHECK-NEXT: %[[POS:.*]] = sm90.setp "gt" %[[REM]], %[[ZERO]] : vector<32xi32> -> vector<32xi1>
// CHECK-NEXT: %[[FIX:.*]] = arith.addi %[[REM]], %[[M3]] : vector<32xi32>
// CHECK-NEXT: %m = sm90.selp %[[POS]], %[[FIX]], %[[REM]] : vector<32xi1>, vector<32xi32>
// CHECK-NEXT: %[[BYZERO:.*]] = sm90.setp "eq" %m, %[[ZERO]] : vector<32xi32> -> vector<32xi1>
// CHECK-NEXT: %[[ONE:.*]] = arith.constant dense<1> : vector<32xi32>
// CHECK-NEXT: %[[SAFE:.*]] = sm90.selp %[[BYZERO]], %[[ONE]], %m : vector<32xi1>, vector<32xi32>
// CHECK-NEXT: %[[R2:.*]] = arith.remsi %g, %[[SAFE]] : vector<32xi32>
// CHECK:      %u = sm90.selp %[[BYZERO]], %[[ZERO]], %{{.*}} : vector<32xi1>, vector<32xi32>

// PTX-COUNT-32: shr.s32 %r{{[0-9]+}}, %r{{[0-9]+}}, 6;
// PTX-COUNT-32: and.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 63;
// PTX:      shr.s32 [[S:%r[0-9]+]], [[A:%r[0-9]+]], 31;
// PTX-NEXT: xor.b32 [[M:%r[0-9]+]], [[A]], [[S]];
// PTX-NEXT: div.u32 [[M]], [[M]], 48;
// PTX-NEXT: xor.b32 [[A]], [[M]], [[S]];
