// tile.gather's verifier: an f32 or i32 global table, one i32 register index tile per dimension, indices that
// broadcast, and a register result of their broadcast shape and the table's element type.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.gather' op the table must hold f32 or i32 elements, got bf16
func.func @half(%t: !tile.tile<8xbf16, global>, %i: !tile.tile<1x1xi32, register>) {
  %r = tile.gather %t[%i] : !tile.tile<8xbf16, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.gather' op source must be a global tile, got register
func.func @register(%t: !tile.tile<8xf32, register>, %i: !tile.tile<1x1xi32, register>) {
  %r = tile.gather %t[%i] : !tile.tile<8xf32, register>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
  func.return
}

// -----

// CHECK: 'tile.gather' op needs 2 index tiles (one per dimension of the table), got 1
func.func @count(%t: !tile.tile<8x63xf32, global>, %i: !tile.tile<1x1xi32, register>) {
  %r = tile.gather %t[%i] : !tile.tile<8x63xf32, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
  func.return
}

// -----

// CHECK: 'tile.gather' op index 0 must be an i32 tile, got f32
func.func @float_index(%t: !tile.tile<8xf32, global>, %i: !tile.tile<1x1xf32, register>) {
  %r = tile.gather %t[%i] : !tile.tile<8xf32, global>, !tile.tile<1x1xf32, register> -> !tile.tile<1x1xf32, register>
  func.return
}

// -----

// CHECK: 'tile.gather' op index shapes [[64, 32], [32, 64]] do not broadcast
func.func @shapes(%t: !tile.tile<8x8xf32, global>, %i: !tile.tile<64x32xi32, register>, %j: !tile.tile<32x64xi32, register>) {
  %r = tile.gather %t[%i, %j] : !tile.tile<8x8xf32, global>, !tile.tile<64x32xi32, register>, !tile.tile<32x64xi32, register> -> !tile.tile<64x32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.gather' op result must be a register tile [64, 32] of f32, got !tile.tile<64x32xi32, register>
func.func @result(%t: !tile.tile<8xf32, global>, %i: !tile.tile<64x32xi32, register>) {
  %r = tile.gather %t[%i] : !tile.tile<8xf32, global>, !tile.tile<64x32xi32, register> -> !tile.tile<64x32xi32, register>
  func.return
}
