// GEMM's Tile IR pieces: tile.mma with transpose_a and transpose_b (dialects/tile_compute.py),
// tile.load_broadcast (dialects/tile_memory.py; from a global window, or from a one-row shared tile as the
// backward reads LSE2 and dPsum), their round trip and each verifier rule's message.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%a = "test.op"() : () -> !tile.tile<64x128xbf16, shared, swizzle 128>
%b = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%acc = "test.op"() : () -> !tile.tile<128x128xf32, register>
%bias = "test.op"() : () -> !tile.tile<128xf32, global>
%d = tile.mma %a, %b, %acc transpose_a transpose_b : !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
%r = tile.load_broadcast %bias : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
// CHECK: %d = tile.mma %a, %b, %acc transpose_a transpose_b : !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
// CHECK-NEXT: %r = tile.load_broadcast %bias : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>

// -----

%row = "test.op"() : () -> !tile.tile<1x64xf32, shared>
%r = tile.load_broadcast %row : !tile.tile<1x64xf32, shared> -> !tile.tile<128x64xf32, register>
// CHECK: %r = tile.load_broadcast %row : !tile.tile<1x64xf32, shared> -> !tile.tile<128x64xf32, register>

// -----

%rows = "test.op"() : () -> !tile.tile<2x64xf32, shared>
// CHECK: 'tile.load_broadcast' op a shared source must be a one-row tile [1, N], got [2, 64]
%r = tile.load_broadcast %rows : !tile.tile<2x64xf32, shared> -> !tile.tile<128x64xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<64x128xbf16, shared, swizzle 128>
%b = "test.op"() : () -> !tile.tile<32x128xbf16, shared, swizzle 128>
%acc = "test.op"() : () -> !tile.tile<128x128xf32, register>
// CHECK: 'tile.mma' op contraction sizes differ: A is [K, M] = [64, 128], B is [K, N] = [32, 128]
%d = tile.mma %a, %b, %acc transpose_a : !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<32x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<64x128xbf16, register>
%b = "test.op"() : () -> !tile.tile<64x128xbf16, shared, swizzle 128>
%acc = "test.op"() : () -> !tile.tile<128x128xf32, register>
// CHECK: 'tile.mma' op a transposed operand A must be in shared memory (registers hold A as [M, K])
%d = tile.mma %a, %b, %acc transpose_a : !tile.tile<64x128xbf16, register>, !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>

// -----

%bias = "test.op"() : () -> !tile.tile<128x1xf32, global>
// CHECK: 'tile.load_broadcast' op the source must be a static 1-D window, got rank 2
%r = tile.load_broadcast %bias : !tile.tile<128x1xf32, global> -> !tile.tile<128x128xf32, register>

// -----

%bias = "test.op"() : () -> !tile.tile<64xf32, global>
// CHECK: 'tile.load_broadcast' op the result must be [M, 64] (the window on every row), got [128, 128]
%r = tile.load_broadcast %bias : !tile.tile<64xf32, global> -> !tile.tile<128x128xf32, register>

// -----

%bias = "test.op"() : () -> !tile.tile<128xbf16, global>
// CHECK: 'tile.load_broadcast' op source and result element types must match
%r = tile.load_broadcast %bias : !tile.tile<128xbf16, global> -> !tile.tile<128x128xf32, register>
