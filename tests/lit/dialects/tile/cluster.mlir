// Clusters in Tile IR: the kernel's `tile.cluster` shape and `cluster_shared` copies round-trip through the
// custom and the generic form; a shared copy in a kernel without a cluster, and malformed shapes, are refused.
// RUN: tessera-opt %s --split-input-file | tessera-opt --split-input-file | filecheck %s
// RUN: tessera-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: not tessera-opt %s --split-input-file -p form-clusters{x=0} 2>&1 | filecheck %s --check-prefix=OPTION

// CHECK:      tile.cluster = array<i64: 2, 1, 1>
// CHECK:      tile.cp_async %w, %s cluster_shared : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
// GENERIC:    "tile.cp_async"(%{{.*}}, %{{.*}}) <{cluster_shared}>
// OPTION:     form-clusters: x must be an integer >= 1, got 0
func.func @shared(%k: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq, 64>}, %o: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(seq, 64)>, tile.cluster = array<i64: 2, 1, 1>} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %w = tile.view %k[%c0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  tile.cp_async %w, %s cluster_shared : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  func.return
}
