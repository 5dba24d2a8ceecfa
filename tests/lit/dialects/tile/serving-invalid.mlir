// The verifiers of tile.load_index (an i32 global table, one index per dimension) and tile.store_global_rows
// (the rules of tile.store_global).
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.load_index' op the table must hold i32 elements, got f32
func.func @float_table(%t: !tile.tile<?xf32, global>) {
  %c0 = arith.constant 0 : index
  %i = tile.load_index %t[%c0] : !tile.tile<?xf32, global>
  func.return
}

// -----

// CHECK: 'tile.load_index' op needs 2 indices (one per dimension), got 1
func.func @indices(%t: !tile.tile<?x?xi32, global>) {
  %c0 = arith.constant 0 : index
  %i = tile.load_index %t[%c0] : !tile.tile<?x?xi32, global>
  func.return
}

// -----

// CHECK: 'tile.store_global_rows' op value shape [64, 64] and window shape [128, 64] must match
func.func @shape(%v: !tile.tile<64x64xbf16, register>, %w: !tile.tile<128x64xbf16, global>, %n: index) {
  tile.store_global_rows %v, %w, %n : !tile.tile<64x64xbf16, register>, !tile.tile<128x64xbf16, global>
  func.return
}

// -----

// CHECK: 'tile.store_global_rows' op a column vector [1, N] goes into a 1-D window [N] by its columns, not its rows: store it with tile.store_global
func.func @column_vector_rows(%v: !tile.tile<1x64xf32, register>, %w: !tile.tile<64xf32, global>, %n: index) {
  tile.store_global_rows %v, %w, %n : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
  func.return
}
