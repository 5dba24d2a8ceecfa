// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// tile.saturating_scale on a thread's 32 registers of a [64, 64] f32 tile: the +-inf predicates are taken from
// x first, then mul, max, min and the two selects each read only the register they write (in place, no second
// vector live); the bounds are +-2^127 (1.70141183e+38), the infinities hex constants.

func.func @saturate(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                    %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %y = tile.saturating_scale %x by 8.0 bound 1.70141183e+38 : !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %x = sm90.ld_global
// CHECK:      %[[PLUS:.*]] = sm90.setp "gt" %x, %{{.*}} : vector<32xf32> -> vector<32xi1>
// CHECK:      %[[MINUS:.*]] = sm90.setp "lt" %x, %{{.*}} : vector<32xf32> -> vector<32xi1>
// CHECK:      %[[SCALED:.*]] = arith.mulf %x, %{{.*}} : vector<32xf32>
// CHECK:      arith.constant dense<-1.70141183e+38> : vector<32xf32>
// CHECK-NEXT: %[[FLOOR:.*]] = arith.maximumf %[[SCALED]], %{{.*}} : vector<32xf32>
// CHECK:      arith.constant dense<1.70141183e+38> : vector<32xf32>
// CHECK-NEXT: %[[CLAMP:.*]] = arith.minimumf %[[FLOOR]], %{{.*}} : vector<32xf32>
// CHECK:      arith.constant dense<0xff800000> : vector<32xf32>
// CHECK-NEXT: %[[LOW:.*]] = sm90.selp %[[MINUS]], %{{.*}}, %[[CLAMP]] : vector<32xi1>, vector<32xf32>
// CHECK:      arith.constant dense<0x7f800000> : vector<32xf32>
// CHECK-NEXT: %y = sm90.selp %[[PLUS]], %{{.*}}, %[[LOW]] : vector<32xi1>, vector<32xf32>
// CHECK:      sm90.st_global %{{.*}}, %y,

// Register 0 of the tile, in place in %f0 from the load to the store:
// PTX:      ld.global.b32 %f0,
// PTX:      setp.gt.f32 %[[PLUS:p[0-9]+]], %f0, 0f7F7FFFFF;
// PTX:      setp.lt.f32 %[[MINUS:p[0-9]+]], %f0, 0fFF7FFFFF;
// PTX:      mul.rn.f32 %f0, %f0, 0f41000000;
// PTX:      max.NaN.f32 %f0, %f0, 0fFF000000;
// PTX:      min.NaN.f32 %f0, %f0, 0f7F000000;
// PTX:      selp.f32 %f0, 0fFF800000, %f0, %[[MINUS]];
// PTX:      selp.f32 %f0, 0f7F800000, %f0, %[[PLUS]];
// PTX:      st.global.b32 [%rd{{[0-9]+}}], %f0;
