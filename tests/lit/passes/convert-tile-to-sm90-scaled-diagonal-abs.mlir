// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// x - slope * f32(|q_idx - kv_idx|), symmetric ALiBi's bias subtracted from a score (the i32 magnitude
// converted), with the product used once: computed 8 registers at a time as the asymmetric bias is, each
// register's distance rebuilt from the thread's scalar plus its constant offset, in f32, and its magnitude
// taken there (|f32(s + d)| = f32(|s + d|), both exact below 2^24): no view of the difference's distinct
// values, nor of their magnitudes, is live beside x.

func.func @symmetric_alibi(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                           %S: !tile.tile<4xf32, global> {tile.dims = #tile.dims<4>},
                           %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c5 = arith.constant 5 : index
  %xw = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %h = tile.splat %c0 : index -> !tile.tile<64xi32, register>
  %slope = tile.gather %S[%h] : !tile.tile<4xf32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
  %q = tile.iota rows offset %c5 : !tile.tile<64xi32, register>
  %k = tile.iota cols : !tile.tile<1x64xi32, register>
  %d = tile.sub %q, %k : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
  %a = tile.abs %d : !tile.tile<64x64xi32, register>
  %af = tile.cast %a : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
  %bias = tile.mul %slope, %af : !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>
  %y = tile.sub %x, %bias : !tile.tile<64x64xf32, register>
  %o = tile.view %O[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %[[START:.*]] = sm90.cvt %{{.*}} : i32 -> f32
// CHECK-NEXT: %[[X0:.*]] = vector.shuffle %x, %x [0, 1, 2, 3, 4, 5, 6, 7] : vector<32xf32>, vector<32xf32>
// CHECK:      %[[X3:.*]] = vector.shuffle %x, %x [24, 25, 26, 27, 28, 29, 30, 31] : vector<32xf32>, vector<32xf32>
// CHECK-NEXT: %[[C0:.*]] = arith.constant dense<[0.000000e+00, -1.000000e+00, 8.000000e+00, 7.000000e+00, -8.000000e+00, -9.000000e+00, 0.000000e+00, -1.000000e+00]> : vector<8xf32>
// CHECK-NEXT: %[[B:.*]] = vector.broadcast %[[START]] : f32 to vector<8xf32>
// CHECK-NEXT: %[[D0:.*]] = arith.addf %[[B]], %[[C0]] : vector<8xf32>
// CHECK-NEXT: %[[A0:.*]] = math.absf %[[D0]] : vector<8xf32>
// CHECK-NEXT: %[[S0:.*]] = vector.shuffle %slope, %slope [0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
// CHECK-NEXT: %[[M0:.*]] = arith.mulf %[[S0]], %[[A0]] : vector<8xf32>
// CHECK-NEXT: %{{.*}} = arith.subf %[[X0]], %[[M0]] : vector<8xf32>
// CHECK-COUNT-3: math.absf
// CHECK:      %y = vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, {{.*}}, 31] : vector<24xf32>, vector<8xf32>
// CHECK-NOT:  arith.maxsi
