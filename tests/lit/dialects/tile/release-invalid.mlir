// The verifier rules of tile.release (dialects/tile_memory.py), one chunk each.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%r = "test.op"() : () -> !tile.tile<64x64xbf16, register>
// CHECK: 'tile.release' op operand must be a shared tile, got register
tile.release %r : !tile.tile<64x64xbf16, register>

// -----

// A whole (unstaged) shared tile is not a stage: barriers, not releases, order its reuse.
%s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK: 'tile.release' op operand must be a stage of a ring (the result of tile.stage)
tile.release %s : !tile.tile<64x64xbf16, shared, swizzle 128>

// -----

%i = "test.op"() : () -> index
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}operand 'stage' at position 0 does not verify:
// CHECK-NEXT: index should be of base attribute tile.tile
"tile.release"(%i) : (index) -> ()
