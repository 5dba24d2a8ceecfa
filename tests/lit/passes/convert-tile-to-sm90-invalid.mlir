// RUN: tessera-opt %s --split-input-file --verify-diagnostics -p convert-tile-to-sm90 | filecheck %s

// Constructs the lowering does not handle are refused by name.

// CHECK: convert-tile-to-sm90: %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared>: shared tiles need a 32/64/128-byte swizzle that divides their rows of 128 bytes, got swizzle 0 (run assign-swizzle: it gives every tile the widest one)
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  func.return
}

// -----

// Rows of 16 bytes have no swizzle at all: the refusal says so instead of asking for assign-swizzle.
// CHECK: convert-tile-to-sm90: %s = tile.alloc_shared : !tile.tile<64x8xbf16, shared>: shared tiles need rows of a multiple of 32 bytes (the narrowest swizzle, of 32/64/128 bytes), got rows of 8 x 2 = 16 bytes: widen the tile
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %s = tile.alloc_shared : !tile.tile<64x8xbf16, shared>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  func.return
}

// -----

// CHECK: convert-tile-to-sm90: register tiles have 32 rows; warpgroups take 64 rows each
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %z = tile.fill 0.0 : !tile.tile<32x64xf32, register>
  func.return
}

// -----

// CHECK: convert-tile-to-sm90: %r = tile.reshape %z : !tile.tile<64x8xf32, register> -> !tile.tile<64x8xf32, register>: only reshapes between a row vector [BM] and a column [BM, 1] are supported
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %z = tile.fill 0.0 : !tile.tile<64x8xf32, register>
  %r = tile.reshape %z : !tile.tile<64x8xf32, register> -> !tile.tile<64x8xf32, register>
  func.return
}

// -----

// CHECK: convert-tile-to-sm90: %z = tile.fill 0.0 : !tile.tile<64x12xf32, register>: register tiles need a column count that is a legal wgmma N (8..256 step 8), got 12
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %z = tile.fill 0.0 : !tile.tile<64x12xf32, register>
  func.return
}

// -----

// CHECK: convert-tile-to-sm90: tile.cp_commit_group: copies committed in a loop trip must be waited for in the same trip (overlapping trips is pipeline-loops' job)
func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  scf.for %i = %c0 to %c4 step %c1 {
    %w = tile.view %A[%i, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
  }
  func.return
}
