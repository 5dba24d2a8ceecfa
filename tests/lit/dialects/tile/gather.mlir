// tile.cp_async_gather (the paged cache's row gather) round-trips in its custom form, into a plain tile and
// into a ring stage.
// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// CHECK-LABEL: func.func @gather
// CHECK: tile.cp_async_gather %K[%h, %c0], %table[%b], %k0, %seq_k, %k_smem : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
// CHECK: tile.cp_async_gather %K[%h, %c0], %table[%b], %k0, %seq_k, %stage : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
func.func @gather(%K: !tile.tile<?x?x?x64xbf16, global>, %table: !tile.tile<?x?xi32, global>, %h: index, %b: index,
                  %k0: index, %seq_k: index) {
  %c0 = arith.constant 0 : index
  %k_smem = tile.alloc_shared align 1024 : !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_async_gather %K[%h, %c0], %table[%b], %k0, %seq_k, %k_smem : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  %ring = tile.alloc_shared align 1024 : !tile.tile<2x128x64xbf16, shared, swizzle 128>
  %stage = tile.stage %ring[%c0] : !tile.tile<2x128x64xbf16, shared, swizzle 128> -> !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_async_gather %K[%h, %c0], %table[%b], %k0, %seq_k, %stage : !tile.tile<?x?x?x64xbf16, global>, !tile.tile<?x?xi32, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group 0
  func.return
}
