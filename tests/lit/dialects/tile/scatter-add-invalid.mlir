// tile.scatter_add's verifier: an f32 register value, an f32 global table, one i32 register index tile per
// dimension of the table, broadcasting to the value's shape.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.scatter_add' op table must be f32 (additions are f32), got i32
func.func @int_table(%t: !tile.tile<8xi32, global>, %i: !tile.tile<64xi32, register>, %v: !tile.tile<64x32xf32, register>) {
  tile.scatter_add %v, %t[%i] : !tile.tile<64x32xf32, register>, !tile.tile<8xi32, global>, !tile.tile<64xi32, register>
  func.return
}

// -----

// CHECK: 'tile.scatter_add' op table must be a global tile, got register
func.func @register_table(%t: !tile.tile<8xf32, register>, %i: !tile.tile<64xi32, register>, %v: !tile.tile<64x32xf32, register>) {
  tile.scatter_add %v, %t[%i] : !tile.tile<64x32xf32, register>, !tile.tile<8xf32, register>, !tile.tile<64xi32, register>
  func.return
}

// -----

// CHECK: 'tile.scatter_add' op needs 2 index tiles (one per dimension of the table), got 1
func.func @one_index(%t: !tile.tile<8x63xf32, global>, %i: !tile.tile<64xi32, register>, %v: !tile.tile<64x32xf32, register>) {
  tile.scatter_add %v, %t[%i] : !tile.tile<64x32xf32, register>, !tile.tile<8x63xf32, global>, !tile.tile<64xi32, register>
  func.return
}

// -----

// CHECK: 'tile.scatter_add' op index shapes {{.*}} must broadcast to the value's [64, 32]
func.func @wider(%t: !tile.tile<8xf32, global>, %i: !tile.tile<64x64xi32, register>, %v: !tile.tile<64x32xf32, register>) {
  tile.scatter_add %v, %t[%i] : !tile.tile<64x32xf32, register>, !tile.tile<8xf32, global>, !tile.tile<64x64xi32, register>
  func.return
}
