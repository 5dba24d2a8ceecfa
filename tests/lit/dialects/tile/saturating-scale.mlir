// Round trip of tile.saturating_scale (attention's bias enters the score accumulator as Bias / scale, saturated)
// through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @saturating_scale(%x: !tile.tile<128x128xf32, register>, %r: !tile.tile<64xf32, register>) {
  %y = tile.saturating_scale %x by 8.0 bound 1.70141183e+38 : !tile.tile<128x128xf32, register>
  %z = tile.saturating_scale %r by 11.3137083 bound 8.50705917e+37 {note = "attr-dict"} : !tile.tile<64xf32, register>
  func.return
}

// CHECK:      %y = tile.saturating_scale %x by 8.000000e+00 bound 1.70141183e+38 : !tile.tile<128x128xf32, register>
// CHECK-NEXT: %z = tile.saturating_scale %r by 11.3137083 bound 8.50705917e+37 {note = "attr-dict"} : !tile.tile<64xf32, register>

// GENERIC: "tile.saturating_scale"(%x) <{factor = 8.000000e+00 : f32, bound = 1.70141183e+38 : f32}> : (!tile.tile<128x128xf32, register>) -> !tile.tile<128x128xf32, register>
