// The verifier rules of tile.key_bias (dialects/tile_clear_rows.py), one chunk each.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The bias is a wgmma B operand: a shared tile, not a register tile.
%r, %k0, %n = "test.op"() : () -> (!tile.tile<64x16xbf16, register>, index, index)
// CHECK: 'tile.key_bias' op operand must be a shared tile, got register
tile.key_bias %r, %k0, %n : !tile.tile<64x16xbf16, register>

// -----

// A ring has a stage dimension: the bias tile is one [keys, columns] tile.
%k0, %n = "test.op"() : () -> (index, index)
%ring = tile.alloc_shared : !tile.tile<2x64x16xbf16, shared, swizzle 32>
// CHECK: 'tile.key_bias' op writes the bias of a [keys, columns] shared tile, got rank 3
tile.key_bias %ring, %k0, %n : !tile.tile<2x64x16xbf16, shared, swizzle 32>

// -----

// wgmma's 16-bit operands hold -inf exactly; an f32 tile is no wgmma operand.
%k0, %n = "test.op"() : () -> (index, index)
%t = tile.alloc_shared : !tile.tile<64x8xf32, shared, swizzle 32>
// CHECK: 'tile.key_bias' op the bias tile is a wgmma B operand of bf16 or f16, got f32
tile.key_bias %t, %k0, %n : !tile.tile<64x8xf32, shared, swizzle 32>
