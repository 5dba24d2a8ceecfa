// 8-bit float tiles (f8E4M3FN, f8E5M2) in global, shared and register space; tile.cast to and from them and
// tile.mma of 8-bit operands round-trip through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP

func.func @fp8(%g: !tile.tile<?x64xf8E4M3FN, global>, %s: !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>,
               %k: !tile.tile<64x64xf8E5M2, shared, swizzle 64>, %x: !tile.tile<128x64xf32, register>,
               %acc: !tile.tile<128x64xf32, register>) {
  %p = tile.cast %x : !tile.tile<128x64xf32, register> -> !tile.tile<128x64xf8E4M3FN, register>
  %w = tile.cast %p : !tile.tile<128x64xf8E4M3FN, register> -> !tile.tile<128x64xbf16, register>
  %d = tile.mma %p, %k, %acc transpose_b : !tile.tile<128x64xf8E4M3FN, register>, !tile.tile<64x64xf8E5M2, shared, swizzle 64>, !tile.tile<128x64xf32, register>
  %e = tile.mma %s, %k, %d transpose_b : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>, !tile.tile<64x64xf8E5M2, shared, swizzle 64>, !tile.tile<128x64xf32, register>
  func.return
}

// CHECK:      %p = tile.cast %x : !tile.tile<128x64xf32, register> -> !tile.tile<128x64xf8E4M3FN, register>
// CHECK-NEXT: %w = tile.cast %p : !tile.tile<128x64xf8E4M3FN, register> -> !tile.tile<128x64xbf16, register>
// CHECK-NEXT: %d = tile.mma %p, %k, %acc transpose_b : !tile.tile<128x64xf8E4M3FN, register>, !tile.tile<64x64xf8E5M2, shared, swizzle 64>
// CHECK-NEXT: %e = tile.mma %s, %k, %d transpose_b : !tile.tile<128x64xf8E4M3FN, shared, swizzle 64>
