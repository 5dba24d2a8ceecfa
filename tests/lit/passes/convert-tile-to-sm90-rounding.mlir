// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// tile.floor / ceil / rint / trunc on a thread's 32 registers of a [64, 64] f32 tile: upstream math.floor,
// math.ceil, math.roundeven and math.trunc on the registers, printed as cvt with the integer rounding
// modifier (.rmi, .rpi, .rni, .rzi) of a same-size f32 conversion, without .ftz.

func.func @rounding(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                    %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %xw = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %f = tile.floor %x : !tile.tile<64x64xf32, register>
  %c = tile.ceil %f : !tile.tile<64x64xf32, register>
  %r = tile.rint %c : !tile.tile<64x64xf32, register>
  %t = tile.trunc %r : !tile.tile<64x64xf32, register>
  %o = tile.view %O[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %t, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %f = math.floor %x : vector<32xf32>
// CHECK-NEXT: %c = math.ceil %f : vector<32xf32>
// CHECK-NEXT: %r = math.roundeven %c : vector<32xf32>
// CHECK-NEXT: %t = math.trunc %r : vector<32xf32>

// PTX-COUNT-32: cvt.rmi.f32.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: cvt.rpi.f32.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: cvt.rni.f32.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: cvt.rzi.f32.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
