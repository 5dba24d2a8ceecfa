// What Tile IR refuses of 8-bit floats: casts the hardware has no instruction for, arithmetic on them (the
// tensor core is their only arithmetic), an 8-bit operand beside a 16-bit one in tile.mma.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.cast' op an 8-bit float converts only to and from f32, bf16 or f16, got f8E4M3FN -> i32
func.func @to_int(%x: !tile.tile<64x32xf8E4M3FN, register>) {
  %y = tile.cast %x : !tile.tile<64x32xf8E4M3FN, register> -> !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.cast' op an 8-bit float converts only to and from f32, bf16 or f16, got f8E5M2 -> f8E4M3FN
func.func @between_formats(%x: !tile.tile<64x32xf8E5M2, register>) {
  %y = tile.cast %x : !tile.tile<64x32xf8E5M2, register> -> !tile.tile<64x32xf8E4M3FN, register>
  func.return
}

// -----

// CHECK: 'tile.add' op operand must be a float or i32 tile, got f8E4M3FN
func.func @arithmetic(%x: !tile.tile<64x32xf8E4M3FN, register>) {
  %y = tile.add %x, %x : !tile.tile<64x32xf8E4M3FN, register>
  func.return
}

// -----

// CHECK: 'tile.mma' op A (f8E4M3FN) and B (bf16) must have the same element type (or both be 8-bit floats)
func.func @mixed(%a: !tile.tile<64x32xf8E4M3FN, register>, %b: !tile.tile<64x32xbf16, shared>, %c: !tile.tile<64x64xf32, register>) {
  %d = tile.mma %a, %b, %c transpose_b : !tile.tile<64x32xf8E4M3FN, register>, !tile.tile<64x32xbf16, shared>, !tile.tile<64x64xf32, register>
  func.return
}

// -----

// CHECK: tile type: element type must be bf16, f16, f32, f8E4M3FN, f8E5M2, i32, i64, index or i1, got f8E4M3FNUZ
"test.op"() : () -> !tile.tile<4xf8E4M3FNUZ, register>

// -----

// CHECK: 'tile.row_max' op source must have a float element type (an 8-bit float's only arithmetic is tile.mma; tile.cast it to f32 first), got f8E4M3FN
func.func @row_max(%x: !tile.tile<64x32xf8E4M3FN, register>) {
  %y = tile.row_max %x : !tile.tile<64x32xf8E4M3FN, register> -> !tile.tile<64xf32, register>
  func.return
}

// -----

// CHECK: 'tile.mma' op accumulator must be f32, got bf16
func.func @bf16_accumulator(%a: !tile.tile<64x32xf8E4M3FN, register>, %b: !tile.tile<64x32xf8E4M3FN, shared>, %c: !tile.tile<64x64xbf16, register>) {
  %d = tile.mma %a, %b, %c transpose_b : !tile.tile<64x32xf8E4M3FN, register>, !tile.tile<64x32xf8E4M3FN, shared>, !tile.tile<64x64xbf16, register>
  func.return
}
