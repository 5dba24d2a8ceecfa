// A hex literal in tile.fill reads as MLIR reads one: of a float tile the f32 bit pattern, of an integer tile its
// value (0x4B800000 was read as the f32 16777216.0 whose bits it is, silently, and 0x10 refused as 2.2e-44).
// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s | tessera-opt | filecheck %s

func.func @f() {
  %a = tile.fill 0xff800000 : !tile.tile<64x16xf32, register>
  %b = tile.fill 0x10 : !tile.tile<64x16xi32, register>
  %c = tile.fill 0x4B800000 : !tile.tile<64x16xi32, register>
  %d = tile.fill -0x7fffff80 : !tile.tile<64x16xi32, register>
  func.return
}

// CHECK:      %a = tile.fill -inf : !tile.tile<64x16xf32, register>
// CHECK-NEXT: %b = tile.fill 16.0 : !tile.tile<64x16xi32, register>
// CHECK-NEXT: %c = tile.fill 1266679808.0 : !tile.tile<64x16xi32, register>
// CHECK-NEXT: %d = tile.fill -2147483520.0 : !tile.tile<64x16xi32, register>
