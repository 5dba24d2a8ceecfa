// One chunk per verifier rule of the tile dialect (dialects/tile.py, tile_memory.py, tile_compute.py,
// tile_types.py), each checking the rule's message, then the IRDL-level constraints (operand kinds, shared
// type variables, property types).
// Rules shared by several ops through a base class are tested once, on different ops in turn.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// ===== !tile.tile and #tile.dims (types are verified while they are parsed, so messages carry a location)

// CHECK: invalid.mlir:[[# @LINE + 2]]:31
// CHECK: tile type: rank must be at least 1
"test.op"() : () -> !tile.tile<f32, register>

// -----

// CHECK: tile type: dimensions must be positive, got [4, 0]
"test.op"() : () -> !tile.tile<4x0xf32, register>

// -----

// CHECK: tile type: dynamic dimensions are allowed only in global memory
"test.op"() : () -> !tile.tile<?x64xf16, shared>

// -----

// CHECK: tile type: element type must be bf16, f16, f32, f8E4M3FN, f8E5M2, i32, i64, index or i1, got i8
"test.op"() : () -> !tile.tile<4xi8, register>

// -----

// CHECK: tile type: swizzle must be one of 0, 32, 64, 128 bytes, got 16
"test.op"() : () -> !tile.tile<8x64xf16, shared, swizzle 16>

// -----

// CHECK: tile type: only shared tiles can be swizzled
"test.op"() : () -> !tile.tile<8x64xf16, global, swizzle 128>

// -----

// CHECK: tile type: a 128B swizzle needs rows of a multiple of 128 bytes, but rows are 16 bytes
"test.op"() : () -> !tile.tile<64x8xf16, shared, swizzle 128>

// -----

// CHECK: dimension expression: constants must be positive, got 0
"test.op"() {dims = #tile.dims<n, 0>} : () -> ()

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:31
// CHECK: dimension expression: ceildiv divisor must be positive, got -2
"test.op"() {dims = #tile.dims<ceildiv(n, -2)>} : () -> ()

// ===== tile.program_id, tile.dim

// -----

// CHECK: 'tile.program_id' op axis must be x, y or z, got 'w'
%i = tile.program_id w : index

// -----

%t = "test.op"() : () -> !tile.tile<64x64xf16, shared>
// CHECK: 'tile.dim' op source must be a global tile, got shared
%n = tile.dim %t[0] : !tile.tile<64x64xf16, shared>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
// CHECK: 'tile.dim' op dimension 2 is out of range for a rank-2 tile
%n = tile.dim %t[2] : !tile.tile<?x64xf16, global>

// ===== tile.alloc_shared, tile.stage, tile.view

// -----

// CHECK: 'tile.alloc_shared' op result must be a shared tile, got register
%s = tile.alloc_shared : !tile.tile<64x64xf16, register>

// -----

%r = "test.op"() : () -> !tile.tile<2x64x64xf16, register>
%i = "test.op"() : () -> index
// CHECK: 'tile.stage' op source must be a shared tile, got register
%b = tile.stage %r[%i] : !tile.tile<2x64x64xf16, register> -> !tile.tile<64x64xf16, register>

// -----

%r = "test.op"() : () -> !tile.tile<64x64xf16, shared>
%i = "test.op"() : () -> index
// CHECK: 'tile.stage' op source must have a leading stage dimension (rank >= 3), got rank 2
%b = tile.stage %r[%i] : !tile.tile<64x64xf16, shared> -> !tile.tile<64xf16, shared>

// -----

%r = "test.op"() : () -> !tile.tile<2x64x64xf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.stage' op result must be the source without its stage dimension, !tile.tile<64x64xf16, shared, swizzle 128>
%b = tile.stage %r[%i] : !tile.tile<2x64x64xf16, shared, swizzle 128> -> !tile.tile<64x64xf16, shared>

// -----

%t = "test.op"() : () -> !tile.tile<64x64xf16, shared>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op source must be a global tile, got shared
%w = tile.view %t[%i, %i] : !tile.tile<64x64xf16, shared> -> !tile.tile<16x16xf16, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op result must be a global tile, got register
%w = tile.view %t[%i, %i] : !tile.tile<?x64xf16, global> -> !tile.tile<16x16xf16, register>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op the window must have a static shape
%w = tile.view %t[%i, %i] : !tile.tile<?x64xf16, global> -> !tile.tile<?x16xf16, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x?x64xf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op needs 3 indices (one per source dimension), got 2
%w = tile.view %t[%i, %i] : !tile.tile<?x?x64xf16, global> -> !tile.tile<16x16xf16, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op window rank 3 exceeds source rank 2
%w = tile.view %t[%i, %i] : !tile.tile<?x64xf16, global> -> !tile.tile<2x16x16xf16, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.view' op window and source element types must match
%w = tile.view %t[%i, %i] : !tile.tile<?x64xf16, global> -> !tile.tile<16x16xbf16, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x1xf32, global>
%i = "test.op"() : () -> index
%c1 = arith.constant 1 : index
// CHECK: 'tile.view' op the window [1, 2) of dimension 1 lies wholly outside the tensor's 1: it would read only zeros and store nothing
%w = tile.view %t[%i, %c1] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf32, global>
%i = "test.op"() : () -> index
%c = arith.constant -16 : index
// CHECK: 'tile.view' op the window [-16, 0) of dimension 1 lies wholly outside the tensor's 64: it would read only zeros and store nothing
%w = tile.view %t[%i, %c] : !tile.tile<?x64xf32, global> -> !tile.tile<64x16xf32, global>

// -----

%t = "test.op"() : () -> !tile.tile<4x?x64xf32, global>
%i = "test.op"() : () -> index
%c4 = arith.constant 4 : index
// CHECK: 'tile.view' op the window [4, 5) of dimension 0 lies wholly outside the tensor's 4: it would read only zeros and store nothing
%w = tile.view %t[%c4, %i, %i] : !tile.tile<4x?x64xf32, global> -> !tile.tile<64x64xf32, global>

// ===== tile.cp_async, tile.cp_wait_group

// -----

%g = "test.op"() : () -> !tile.tile<16x16xf16, shared>
%s = "test.op"() : () -> !tile.tile<16x16xf16, shared>
// CHECK: 'tile.cp_async' op source must be a global tile, got shared
tile.cp_async %g, %s : !tile.tile<16x16xf16, shared>, !tile.tile<16x16xf16, shared>

// -----

%g = "test.op"() : () -> !tile.tile<16x16xf16, global>
%s = "test.op"() : () -> !tile.tile<16x16xf16, register>
// CHECK: 'tile.cp_async' op destination must be a shared tile, got register
tile.cp_async %g, %s : !tile.tile<16x16xf16, global>, !tile.tile<16x16xf16, register>

// -----

%g = "test.op"() : () -> !tile.tile<16x32xf16, global>
%s = "test.op"() : () -> !tile.tile<16x16xf16, shared>
// CHECK: 'tile.cp_async' op source shape [16, 32] and destination shape [16, 16] must match
tile.cp_async %g, %s : !tile.tile<16x32xf16, global>, !tile.tile<16x16xf16, shared>

// -----

%g = "test.op"() : () -> !tile.tile<16x16xf16, global>
%s = "test.op"() : () -> !tile.tile<16x16xbf16, shared>
// CHECK: 'tile.cp_async' op source and destination element types must match
tile.cp_async %g, %s : !tile.tile<16x16xf16, global>, !tile.tile<16x16xbf16, shared>

// -----

// CHECK: 'tile.cp_wait_group' op pending group count must be >= 0, got -1
tile.cp_wait_group -1

// ===== tile.load, tile.store_global

// -----

%t = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.load' op source must be a global or shared tile, got register
%r = tile.load %t : !tile.tile<16x16xf32, register> -> !tile.tile<16x16xf32, register>

// -----

%t = "test.op"() : () -> !tile.tile<16x16xf32, global>
// CHECK: 'tile.load' op result must be a register tile, got shared
%r = tile.load %t : !tile.tile<16x16xf32, global> -> !tile.tile<16x16xf32, shared>

// -----

%t = "test.op"() : () -> !tile.tile<16x16xf32, global>
// CHECK: 'tile.load' op source and result shapes must match
%r = tile.load %t : !tile.tile<16x16xf32, global> -> !tile.tile<256xf32, register>

// -----

%t = "test.op"() : () -> !tile.tile<1xf32, global>
// CHECK: 'tile.load' op source and result shapes must match (tile.load_broadcast reads the 1-D window into [1, 1])
%r = tile.load %t : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>

// -----

%t = "test.op"() : () -> !tile.tile<16x16xf32, shared>
// CHECK: 'tile.load' op source and result element types must match
%r = tile.load %t : !tile.tile<16x16xf32, shared> -> !tile.tile<16x16xf16, register>

// -----

%v = "test.op"() : () -> !tile.tile<16x16xf32, shared>
%w = "test.op"() : () -> !tile.tile<16x16xf32, global>
// CHECK: 'tile.store_global' op value must be a register tile, got shared
tile.store_global %v, %w : !tile.tile<16x16xf32, shared>, !tile.tile<16x16xf32, global>

// -----

%v = "test.op"() : () -> !tile.tile<16x16xf32, register>
%w = "test.op"() : () -> !tile.tile<16x16xf32, shared>
// CHECK: 'tile.store_global' op destination must be a global tile, got shared
tile.store_global %v, %w : !tile.tile<16x16xf32, register>, !tile.tile<16x16xf32, shared>

// -----

%v = "test.op"() : () -> !tile.tile<16x16xf32, register>
%w = "test.op"() : () -> !tile.tile<16x32xf32, global>
// CHECK: 'tile.store_global' op value shape [16, 16] and window shape [16, 32] must match
tile.store_global %v, %w : !tile.tile<16x16xf32, register>, !tile.tile<16x32xf32, global>

// -----

%v = "test.op"() : () -> !tile.tile<16x16xf32, register>
%w = "test.op"() : () -> !tile.tile<16x16xbf16, global>
// CHECK: 'tile.store_global' op value element type f32 must match the window's bf16 (insert a tile.cast)
tile.store_global %v, %w : !tile.tile<16x16xf32, register>, !tile.tile<16x16xbf16, global>

// ===== tile.mma

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, global>
%b = "test.op"() : () -> !tile.tile<16x8xf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand A must be a shared or register tile, got global
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, global>, !tile.tile<16x8xf16, register>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand A must have rank 2, got rank 1
%d = tile.mma %a, %b, %c : !tile.tile<16xf16, register>, !tile.tile<16x8xf16, register>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf32, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand A must be bf16, f16, f8E4M3FN or f8E5M2, got f32
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf32, register>, !tile.tile<16x8xf16, register>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, shared>
%b = "test.op"() : () -> !tile.tile<16x8xf16, global>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand B must be a shared or register tile, got global
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, shared>, !tile.tile<16x8xf16, global>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%b = "test.op"() : () -> !tile.tile<2x16x8xf16, shared>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand B must have rank 2, got rank 3
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, register>, !tile.tile<2x16x8xf16, shared>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xi32, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op operand B must be bf16, f16, f8E4M3FN or f8E5M2, got i32
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, register>, !tile.tile<16x8xi32, register>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xbf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op A (f16) and B (bf16) must have the same element type (or both be 8-bit floats)
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, register>, !tile.tile<16x8xbf16, register>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xbf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xbf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, shared>
// CHECK: 'tile.mma' op accumulator must be a register tile, got shared
%d = tile.mma %a, %b, %c : !tile.tile<16x16xbf16, register>, !tile.tile<16x8xbf16, register>, !tile.tile<16x8xf32, shared>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xbf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xbf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xbf16, register>
// CHECK: 'tile.mma' op accumulator must be f32, got bf16
%d = tile.mma %a, %b, %c : !tile.tile<16x16xbf16, register>, !tile.tile<16x8xbf16, register>, !tile.tile<16x8xbf16, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xbf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xbf16, register>
%c = "test.op"() : () -> !tile.tile<128xf32, register>
// CHECK: 'tile.mma' op accumulator must have rank 2, got rank 1
%d = tile.mma %a, %b, %c : !tile.tile<16x16xbf16, register>, !tile.tile<16x8xbf16, register>, !tile.tile<128xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x32xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, shared>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op contraction sizes differ: A is [M, K] = [16, 32], B is [K, N] = [16, 8]
%d = tile.mma %a, %b, %c : !tile.tile<16x32xf16, register>, !tile.tile<16x8xf16, shared>, !tile.tile<16x8xf32, register>

// -----

// With transpose_b, B is [N, K]: the [16, 8] B that is right without it contracts over 8 here.
%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, shared>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op contraction sizes differ: A is [M, K] = [16, 16], B is [N, K] = [16, 8]
%d = tile.mma %a, %b, %c transpose_b : !tile.tile<16x16xf16, register>, !tile.tile<16x8xf16, shared>, !tile.tile<16x8xf32, register>

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, register>
%c = "test.op"() : () -> !tile.tile<8x16xf32, register>
// CHECK: 'tile.mma' op accumulator must be [M, N] = [16, 8], got [8, 16]
%d = tile.mma %a, %b, %c : !tile.tile<16x16xf16, register>, !tile.tile<16x8xf16, register>, !tile.tile<8x16xf32, register>

// -----

// The same operands are right with transpose_b only if acc is [16, 16] (N is B's first dimension).
%a = "test.op"() : () -> !tile.tile<16x8xf16, register>
%b = "test.op"() : () -> !tile.tile<16x8xf16, register>
%c = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.mma' op accumulator must be [M, N] = [16, 16], got [16, 8]
%d = tile.mma %a, %b, %c transpose_b : !tile.tile<16x8xf16, register>, !tile.tile<16x8xf16, register>, !tile.tile<16x8xf32, register>

// ===== tile.row_max, tile.row_sum (_RowReductionOp)

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, shared>
// CHECK: 'tile.row_max' op source must be a register tile, got shared
%m = tile.row_max %x : !tile.tile<16x16xf32, shared> -> !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xi1, register>
// CHECK: 'tile.row_sum' op source must have a float or i32 element type, got i1 (select it into an i32 tile of 0 and 1 to count)
%m = tile.row_sum %x : !tile.tile<16x16xi1, register> -> !tile.tile<16xi1, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xi32, register>
// CHECK: 'tile.row_max' op result must be a row vector with one entry per row (16), got [8]
%m = tile.row_max %x : !tile.tile<16x16xi32, register> -> !tile.tile<8xi32, register>

// -----

%x = "test.op"() : () -> !tile.tile<2x16x16xf32, register>
// CHECK: 'tile.row_max' op source must have rank 2, got rank 3
%m = tile.row_max %x : !tile.tile<2x16x16xf32, register> -> !tile.tile<2xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.row_sum' op result must be a register tile, got shared
%m = tile.row_sum %x : !tile.tile<16x16xf32, register> -> !tile.tile<16xf32, shared>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.row_max' op result must have a float element type, got index
%m = tile.row_max %x : !tile.tile<16x16xf32, register> -> !tile.tile<16xindex, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.row_sum' op result must have rank 1, got rank 2
%m = tile.row_sum %x : !tile.tile<16x16xf32, register> -> !tile.tile<16x1xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x8xf32, register>
// CHECK: 'tile.row_max' op result must have one entry per row (16), got 8
%m = tile.row_max %x : !tile.tile<16x8xf32, register> -> !tile.tile<8xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.row_sum' op result element type must match the source's
%m = tile.row_sum %x : !tile.tile<16x16xf32, register> -> !tile.tile<16xf16, register>

// ===== elementwise ops (_ElementwiseOp: exp_diff, fma, scale; the broadcasting ones are in elementwise-invalid.mlir)

// -----

%x = "test.op"() : () -> !tile.tile<16xf32, shared>
// CHECK: 'tile.exp_diff' op result must be a register tile, got shared
%r = tile.exp_diff %x, %x : !tile.tile<16xf32, shared>

// -----

%x = "test.op"() : () -> !tile.tile<16xi32, register>
// CHECK: 'tile.exp_diff' op result must have a float element type, got i32
%r = tile.exp_diff %x, %x : !tile.tile<16xi32, register>

// ===== tile.exp_subtract, tile.mul_rows, tile.div_rows (_RowBroadcastOp)

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, global>
%m = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK: 'tile.exp_subtract' op source must be a register tile, got global
%p = tile.exp_subtract %x, %m : !tile.tile<16x16xf32, global>, !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xi64, register>
%m = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK: 'tile.mul_rows' op source must have a float element type, got i64
%p = tile.mul_rows %x, %m : !tile.tile<16x16xi64, register>, !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<256xf32, register>
%m = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK: 'tile.div_rows' op source must have rank 2, got rank 1
%p = tile.div_rows %x, %m : !tile.tile<256xf32, register>, !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
%m = "test.op"() : () -> !tile.tile<16xf32, shared>
// CHECK: 'tile.exp_subtract' op row vector must be a register tile, got shared
%p = tile.exp_subtract %x, %m : !tile.tile<16x16xf32, register>, !tile.tile<16xf32, shared>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
%m = "test.op"() : () -> !tile.tile<16xi32, register>
// CHECK: 'tile.mul_rows' op row vector must have a float element type, got i32
%p = tile.mul_rows %x, %m : !tile.tile<16x16xf32, register>, !tile.tile<16xi32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
%m = "test.op"() : () -> !tile.tile<16x1xf32, register>
// CHECK: 'tile.div_rows' op row vector must have rank 1, got rank 2
%p = tile.div_rows %x, %m : !tile.tile<16x16xf32, register>, !tile.tile<16x1xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x8xf32, register>
%m = "test.op"() : () -> !tile.tile<8xf32, register>
// CHECK: 'tile.mul_rows' op row vector must have one entry per row (16), got 8
%p = tile.mul_rows %x, %m : !tile.tile<16x8xf32, register>, !tile.tile<8xf32, register>

// ===== tile.cast, tile.reshape, tile.fill

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, shared>
// CHECK: 'tile.cast' op source must be a register tile, got shared
%c = tile.cast %x : !tile.tile<16x16xf32, shared> -> !tile.tile<16x16xf16, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.cast' op result must be a register tile, got global
%c = tile.cast %x : !tile.tile<16x16xf32, register> -> !tile.tile<16x16xf16, global>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.cast' op cast keeps the shape: [16, 16] vs [256]
%c = tile.cast %x : !tile.tile<16x16xf32, register> -> !tile.tile<256xf16, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, global>
// CHECK: 'tile.reshape' op source must be a register tile, got global
%c = tile.reshape %x : !tile.tile<16x16xf32, global> -> !tile.tile<256xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.reshape' op result must be a register tile, got shared
%c = tile.reshape %x : !tile.tile<16x16xf32, register> -> !tile.tile<256xf32, shared>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.reshape' op reshape keeps the element type
%c = tile.reshape %x : !tile.tile<16x16xf32, register> -> !tile.tile<256xf16, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK: 'tile.reshape' op reshape keeps the element count: 256 vs 128
%c = tile.reshape %x : !tile.tile<16x16xf32, register> -> !tile.tile<128xf32, register>

// -----

// CHECK: 'tile.fill' op result must be a register tile, got shared
%f = tile.fill 0.0 : !tile.tile<16x16xf32, shared>

// ===== tile.mask_causal, tile.mask_bounds

// -----

%s = "test.op"() : () -> !tile.tile<16x16xf32, shared>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_causal' op source must be a register tile, got shared
%m = tile.mask_causal %s, %i, %i, %i, %i : !tile.tile<16x16xf32, shared>

// -----

%s = "test.op"() : () -> !tile.tile<16x16xi32, register>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_causal' op source must have a float element type, got i32
%m = tile.mask_causal %s, %i, %i, %i, %i : !tile.tile<16x16xi32, register>

// -----

%s = "test.op"() : () -> !tile.tile<16xf32, register>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_causal' op source must have rank 2, got rank 1
%m = tile.mask_causal %s, %i, %i, %i, %i : !tile.tile<16xf32, register>

// -----

%s = "test.op"() : () -> !tile.tile<16x16xf32, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_bounds' op source must be a register tile, got global
%m = tile.mask_bounds %s, %i, %i : !tile.tile<16x16xf32, global>

// -----

%s = "test.op"() : () -> !tile.tile<16x16xindex, register>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_bounds' op source must have a float element type, got index
%m = tile.mask_bounds %s, %i, %i : !tile.tile<16x16xindex, register>

// -----

%s = "test.op"() : () -> !tile.tile<2x16x16xf32, register>
%i = "test.op"() : () -> index
// CHECK: 'tile.mask_bounds' op source must have rank 2, got rank 3
%m = tile.mask_bounds %s, %i, %i : !tile.tile<2x16x16xf32, register>

// ===== IRDL constraints, checked before the rules above (reachable through the generic form)

// -----

%i = "test.op"() : () -> index
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}operand 'source' at position 0 does not verify:
// CHECK-NEXT: index should be of base attribute tile.tile
%r = "tile.load"(%i) : (index) -> !tile.tile<4xf32, register>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
%f = "test.op"() : () -> f32
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}operand 'indices' at position 1 does not verify:
// CHECK-NEXT: f32 should be of base attribute index
%w = "tile.view"(%t, %f) : (!tile.tile<?x64xf16, global>, f32) -> !tile.tile<16xf16, global>

// -----

// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: i32 should be of base attribute index
%i = "tile.program_id"() <{axis = "x"}> : () -> i32

// -----

%a = "test.op"() : () -> !tile.tile<16x16xf16, register>
%c = "test.op"() : () -> !tile.tile<16x16xf32, register>
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute !tile.tile<16x16xf32, register> expected from variable 'T', but got !tile.tile<16x8xf32, register>
%d = "tile.mma"(%a, %a, %c) : (!tile.tile<16x16xf16, register>, !tile.tile<16x16xf16, register>, !tile.tile<16x16xf32, register>) -> !tile.tile<16x8xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16xf32, register>
%y = "test.op"() : () -> !tile.tile<16xf16, register>
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}operand 'rhs' at position 1 does not verify:
// CHECK-NEXT: attribute !tile.tile<16xf32, register> expected from variable 'T', but got !tile.tile<16xf16, register>
%r = "tile.exp_diff"(%x, %y) : (!tile.tile<16xf32, register>, !tile.tile<16xf16, register>) -> !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}operand 'c' at position 2 does not verify:
// CHECK-NEXT: attribute !tile.tile<16xf32, register> expected from variable 'T', but got !tile.tile<8xf32, register>
%z = "test.op"() : () -> !tile.tile<8xf32, register>
%r = "tile.fma"(%x, %x, %z) : (!tile.tile<16xf32, register>, !tile.tile<16xf32, register>, !tile.tile<8xf32, register>) -> !tile.tile<16xf32, register>

// -----

%x = "test.op"() : () -> !tile.tile<16x16xf32, register>
%m = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute !tile.tile<16x16xf32, register> expected from variable 'T', but got !tile.tile<16x16xf16, register>
%p = "tile.div_rows"(%x, %m) : (!tile.tile<16x16xf32, register>, !tile.tile<16xf32, register>) -> !tile.tile<16x16xf16, register>

// -----

%s = "test.op"() : () -> !tile.tile<16x16xf32, register>
%i = "test.op"() : () -> index
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'tile\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute !tile.tile<16x16xf32, register> expected from variable 'T', but got !tile.tile<16x32xf32, register>
%m = "tile.mask_bounds"(%s, %i, %i) : (!tile.tile<16x16xf32, register>, index, index) -> !tile.tile<16x32xf32, register>

// -----

// tile.scale's factor is an f32 constant (the property's type constraint).
%x = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK: f64 should be of base attribute f32
%r = "tile.scale"(%x) <{factor = 1.0 : f64}> : (!tile.tile<16xf32, register>) -> !tile.tile<16xf32, register>

// -----

// A NaN or infinite factor: the custom form (`by 0x7fc00000`) would not read back.
%x = "test.op"() : () -> !tile.tile<16xf32, register>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'tile.scale' op factor must be a finite f32, got nan
%r = "tile.scale"(%x) <{factor = 0x7FC00000 : f32}> : (!tile.tile<16xf32, register>) -> !tile.tile<16xf32, register>

// -----

%t = "test.op"() : () -> !tile.tile<?x64xf16, global>
// CHECK: Expected attribute i64 but got i32
%n = "tile.dim"(%t) <{index = 1 : i32}> : (!tile.tile<?x64xf16, global>) -> index

// -----

// CHECK: property 'pending' expected in operation 'tile.cp_wait_group'
"tile.cp_wait_group"() : () -> ()

// -----

// CHECK: 'tile.fill' op fill value must not be NaN
%f = "tile.fill"() <{value = 0x7FC00000 : f32}> : () -> !tile.tile<16xf32, register>

// -----

// CHECK: 'tile.fill' op a fill of i32 takes a whole number from -2147483648 to 2147483647, got 3.5
%f = tile.fill 3.5 : !tile.tile<64x16xi32, register>

// -----

// CHECK: 'tile.fill' op a fill of i32 takes a whole number from -2147483648 to 2147483647, got 10000000000.0
%f = tile.fill 1.0e+10 : !tile.tile<64x16xi32, register>

// -----

// CHECK: 'tile.fill' op a fill of i1 takes a whole number from 0 to 1, got -1.0
%f = tile.fill -1.0 : !tile.tile<64x16xi1, register>

// -----

// CHECK: 'tile.alloc_shared' op alignment must be a power of two >= 16 bytes, got 48
%s = tile.alloc_shared align 48 : !tile.tile<64x64xbf16, shared>
