// Round trip of tile.release (the block finished reading a ring stage) through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @release(%A: !tile.tile<?x64xbf16, global>, %u: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %ring = tile.alloc_shared align 1024 : !tile.tile<2x64x64xbf16, shared, swizzle 128>
  %slot = arith.remui %u, %c2 : index
  %stage = tile.stage %ring[%slot] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
  %w = tile.view %A[%c0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  tile.cp_async %w, %stage : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group 0
  %x = tile.load %stage : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
  tile.release %stage : !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.release %stage {note = "attr-dict"} : !tile.tile<64x64xbf16, shared, swizzle 128>
  func.return
}

// CHECK:      %stage = tile.stage %ring[%slot] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK:      %x = tile.load %stage : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
// CHECK-NEXT: tile.release %stage : !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT: tile.release %stage {note = "attr-dict"} : !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT: func.return

// GENERIC:      "tile.release"(%stage) : (!tile.tile<64x64xbf16, shared, swizzle 128>) -> ()
// GENERIC-NEXT: "tile.release"(%stage) {note = "attr-dict"} : (!tile.tile<64x64xbf16, shared, swizzle 128>) -> ()
