// The verifier rules of tile.causal_bias_table and tile.causal_bias (dialects/tile_causal_bias.py), one chunk each.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The table is read by wgmma through descriptors: a shared tile, not a register tile.
%r = "test.op"() : () -> (!tile.tile<720x8xbf16, register>)
// CHECK: 'tile.causal_bias_table' op operand must be a shared tile, got register
tile.causal_bias_table %r : !tile.tile<720x8xbf16, register>

// -----

// -2^100 is a bf16 (the bias wgmmas are bf16 whatever the scores' type).
%t = tile.alloc_shared : !tile.tile<720x8xf16, shared>
// CHECK: 'tile.causal_bias_table' op the causal bias table is [rows, 8] of bf16 (16-byte rows)
tile.causal_bias_table %t : !tile.tile<720x8xf16, shared>

// -----

// The table serves one score shape: [128, 176] reads 2 (128 + 176) + 112 rows.
%s, %q0, %k0, %sq, %sk = "test.op"() : () -> (!tile.tile<128x176xf32, register>, index, index, index, index)
%t = tile.alloc_shared : !tile.tile<600x8xbf16, shared>
// CHECK: 'tile.causal_bias' op the table of a [128, 176] score tile is [720, 8] of bf16
%r = tile.causal_bias %s, %t, %q0, %k0, %sq, %sk : !tile.tile<128x176xf32, register>, !tile.tile<600x8xbf16, shared>

// -----

// Each warpgroup adds its 64 rows' diagonal: the score tile's rows are a multiple of 64.
%s, %q0, %k0, %sq, %sk = "test.op"() : () -> (!tile.tile<96x176xf32, register>, index, index, index, index)
%t = tile.alloc_shared : !tile.tile<656x8xbf16, shared>
// CHECK: 'tile.causal_bias' op the score tile is [64 m, 8 n] (wgmma's M, its N up to 256), got [96, 176]
%r = tile.causal_bias %s, %t, %q0, %k0, %sq, %sk : !tile.tile<96x176xf32, register>, !tile.tile<656x8xbf16, shared>
