// Each verifier rule of the backward's Tile IR ops (dialects/tile_backward.py), with its message.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%v = "test.op"() : () -> !tile.tile<64x64xbf16, register>
%s = "test.op"() : () -> !tile.tile<64x64xf16, shared, swizzle 128>
// CHECK: 'tile.store_shared' op value element type bf16 must match the destination's f16 (insert a tile.cast)
tile.store_shared %v, %s : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf16, shared, swizzle 128>

// -----

%v = "test.op"() : () -> !tile.tile<64x64xbf16, register>
%s = "test.op"() : () -> !tile.tile<64x64xbf16, global>
// CHECK: 'tile.store_shared' op destination must be a shared tile, got global
tile.store_shared %v, %s : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>

// -----

%v = "test.op"() : () -> !tile.tile<64x32xbf16, register>
%s = "test.op"() : () -> !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK: 'tile.store_shared' op value shape [64, 32] and destination shape [64, 64] must match
tile.store_shared %v, %s : !tile.tile<64x32xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>

// -----

%v = "test.op"() : () -> !tile.tile<64x64xbf16, register>
%w = "test.op"() : () -> !tile.tile<64x64xbf16, global>
// CHECK: 'tile.atomic_add' op value must be f32 (additions are f32), got bf16
tile.atomic_add %v, %w : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>

// -----

%v = "test.op"() : () -> !tile.tile<64x64xf32, register>
%w = "test.op"() : () -> !tile.tile<64x128xf32, global>
// CHECK: 'tile.atomic_add' op value shape [64, 64] and window shape [64, 128] must match
tile.atomic_add %v, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x128xf32, global>

// -----

%v = "test.op"() : () -> !tile.tile<64x32xf32, register>
%w = "test.op"() : () -> !tile.tile<64x32xf32, global>
// CHECK: 'tile.atomic_add' op a transposed add needs a 2-D value of the window's shape reversed: value [64, 32], window [64, 32]
tile.atomic_add %v, %w transpose : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>

// -----

%v = "test.op"() : () -> !tile.tile<64x64xf32, register>
%w = "test.op"() : () -> !tile.tile<64x64xf32, shared>
// CHECK: 'tile.atomic_add' op destination must be a global tile, got shared
tile.atomic_add %v, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, shared>

// -----

%x = "test.op"() : () -> !tile.tile<64x64xf32, register>
%r = "test.op"() : () -> !tile.tile<32xf32, register>
// CHECK: 'tile.sub_rows' op row vector must have one entry per row (64), got 32
%d = tile.sub_rows %x, %r : !tile.tile<64x64xf32, register>, !tile.tile<32xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<64x64xbf16, register>
%r = "test.op"() : () -> !tile.tile<64xf32, register>
// CHECK: 'tile.exp2_subtract' op source must be f32, got bf16
%d = tile.exp2_subtract %x, %r : !tile.tile<64x64xbf16, register>, !tile.tile<64xf32, register>

// -----

%sem = "test.op"() : () -> !tile.tile<1xi64, global>
%n = "test.op"() : () -> index
// CHECK: 'tile.sem_wait' op semaphore must be an i32 window, got i64
tile.sem_wait %sem, %n : !tile.tile<1xi64, global>

// -----

%sem = "test.op"() : () -> !tile.tile<2xi32, global>
// CHECK: 'tile.sem_signal' op semaphore must be a window of one element ([1]), got [2]
tile.sem_signal %sem : !tile.tile<2xi32, global>
