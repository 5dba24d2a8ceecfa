// The verifier rules of tile.clear_rows (dialects/tile_clear_rows.py), one chunk each.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The rows are cleared in shared memory: a register tile is a value (select its rows instead).
%r, %k0, %n = "test.op"() : () -> (!tile.tile<128x64xbf16, register>, index, index)
// CHECK: 'tile.clear_rows' op operand must be a shared tile, got register
tile.clear_rows %r, %k0, %n : !tile.tile<128x64xbf16, register>

// -----

// A ring has a stage dimension: clear one stage of it (tile.stage), not the whole ring.
%k0, %n = "test.op"() : () -> (index, index)
%ring = tile.alloc_shared : !tile.tile<2x128x64xbf16, shared, swizzle 128>
// CHECK: 'tile.clear_rows' op clears the rows of a [rows, columns] shared tile (or ring stage), got rank 3
tile.clear_rows %ring, %k0, %n : !tile.tile<2x128x64xbf16, shared, swizzle 128>
