// Each verifier rule of tile.cp_async_gather, with its message.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%K = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op source must be a global tile, got shared
tile.cp_async_gather %K[], %T[%i], %i, %i, %d : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<4x8xi32, shared>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op table must be a global tile, got shared
tile.cp_async_gather %K[%i, %i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<4x8xi32, shared>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, global>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op destination must be a shared tile, got global
tile.cp_async_gather %K[%i, %i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, global>

// -----

%K = "test.op"() : () -> !tile.tile<?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op the source must have rank >= 3 ([pages, page rows, ..., columns]), got rank 2
tile.cp_async_gather %K[], %T[%i], %i, %i, %d : !tile.tile<?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op needs 2 source indices (one per dimension after the page and row dimensions), got 1
tile.cp_async_gather %K[%i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi64, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op the table must hold i32 page numbers, got i64
tile.cp_async_gather %K[%i, %i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi64, global>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op needs 1 table indices (one per dimension before the page slots), got 2
tile.cp_async_gather %K[%i, %i], %T[%i, %i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<2x128x64xbf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op the destination must be a [rows, columns] tile, got rank 3
tile.cp_async_gather %K[%i, %i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<2x128x64xbf16, shared, swizzle 128>

// -----

%K = "test.op"() : () -> !tile.tile<?x?x?x64xbf16, global>
%T = "test.op"() : () -> !tile.tile<?x?xi32, global>
%d = "test.op"() : () -> !tile.tile<128x64xf16, shared, swizzle 128>
%i = "test.op"() : () -> index
// CHECK: 'tile.cp_async_gather' op source and destination element types must match
tile.cp_async_gather %K[%i, %i], %T[%i], %i, %i, %d : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xf16, shared, swizzle 128>
