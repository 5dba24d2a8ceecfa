// RUN: tessera-opt %s -p 'assign-swizzle{report=true}' 2>&1 | filecheck %s

// Each shared tile gets the widest swizzle its rows allow, and the alignment that swizzle needs.
func.func @tiles() {
  // CHECK: assign-swizzle: %rows128 64x64xbf16: swizzle 128, align 1024
  // CHECK: assign-swizzle: %rows64 64x32xbf16: swizzle 64, align 512
  // CHECK: assign-swizzle: %rows32 64x16xbf16: swizzle 32, align 256
  // CHECK: assign-swizzle: %rows16 64x8xbf16: swizzle 0, align 128
  // CHECK: assign-swizzle: %rows256 128x128xbf16: swizzle 128, align 1024
  // CHECK: assign-swizzle: %ring 2x64x64xbf16: swizzle 128, align 1024
  %rows128 = tile.alloc_shared : !tile.tile<64x64xbf16, shared>
  %rows64 = tile.alloc_shared : !tile.tile<64x32xbf16, shared, swizzle 32>
  %rows32 = tile.alloc_shared : !tile.tile<64x16xbf16, shared>
  %rows16 = tile.alloc_shared : !tile.tile<64x8xbf16, shared>
  %rows256 = tile.alloc_shared : !tile.tile<128x128xbf16, shared>
  %ring = tile.alloc_shared : !tile.tile<2x64x64xbf16, shared>
  %c1 = arith.constant 1 : index
  %stage = tile.stage %ring[%c1] : !tile.tile<2x64x64xbf16, shared> -> !tile.tile<64x64xbf16, shared>
  %acc = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %d = tile.mma %rows128, %stage, %acc transpose_b : !tile.tile<64x64xbf16, shared>, !tile.tile<64x64xbf16, shared>, !tile.tile<64x64xf32, register>
  func.return
}
// The report is computed after the assignment: 128-byte rows under a 128B swizzle read conflict-free; the
// 256-byte rows of a 128x128 bf16 tile still conflict 2 ways (which is why the lowering splits them into
// 64-column boxes).
// CHECK: assign-swizzle: tile.mma operand A %rows128 (one 16-byte chunk of 8 consecutive rows): conflict-free
// CHECK: assign-swizzle: tile.mma operand B %ring (one 16-byte chunk of 8 consecutive rows): conflict-free

// CHECK:      %rows128 = tile.alloc_shared align 1024 : !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT: %rows64 = tile.alloc_shared align 512 : !tile.tile<64x32xbf16, shared, swizzle 64>
// CHECK-NEXT: %rows32 = tile.alloc_shared align 256 : !tile.tile<64x16xbf16, shared, swizzle 32>
// CHECK-NEXT: %rows16 = tile.alloc_shared align 128 : !tile.tile<64x8xbf16, shared>
// CHECK-NEXT: %rows256 = tile.alloc_shared align 1024 : !tile.tile<128x128xbf16, shared, swizzle 128>
// CHECK-NEXT: %ring = tile.alloc_shared align 1024 : !tile.tile<2x64x64xbf16, shared, swizzle 128>
// CHECK:      %stage = tile.stage %ring[%c1] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
