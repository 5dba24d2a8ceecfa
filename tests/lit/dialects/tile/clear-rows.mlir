// Round trip of tile.clear_rows (zero a shared key tile's rows at or past seq_k) through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @clear_rows(%V: !tile.tile<?x64xbf16, global>, %u: index, %k0: index, %seq_k: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %ring = tile.alloc_shared align 1024 : !tile.tile<2x128x64xbf16, shared, swizzle 128>
  %slot = arith.remui %u, %c2 : index
  %stage = tile.stage %ring[%slot] : !tile.tile<2x128x64xbf16, shared, swizzle 128> -> !tile.tile<128x64xbf16, shared, swizzle 128>
  %w = tile.view %V[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
  tile.cp_async %w, %stage : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group 0
  tile.clear_rows %stage, %k0, %seq_k : !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.clear_rows %stage, %k0, %seq_k {note = "attr-dict"} : !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.release %stage : !tile.tile<128x64xbf16, shared, swizzle 128>
  func.return
}

// CHECK:      tile.cp_wait_group 0
// CHECK-NEXT: tile.clear_rows %stage, %k0, %seq_k : !tile.tile<128x64xbf16, shared, swizzle 128>
// CHECK-NEXT: tile.clear_rows %stage, %k0, %seq_k {note = "attr-dict"} : !tile.tile<128x64xbf16, shared, swizzle 128>
// CHECK-NEXT: tile.release %stage

// GENERIC:      "tile.clear_rows"(%stage, %k0, %seq_k) : (!tile.tile<128x64xbf16, shared, swizzle 128>, index, index) -> ()
