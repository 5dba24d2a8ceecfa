// A cluster_shared copy needs its kernel to declare a cluster; `tile.cluster` is three sizes >= 1.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @no_cluster(%k: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %w = tile.view %k[%c0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  // expected-error @+1 {{'tile.cp_async' op is cluster_shared, but its kernel declares no 'tile.cluster' shape}}
  tile.cp_async %w, %s cluster_shared : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  func.return
}

// -----

// CHECK: kernel @two_sizes: 'tile.cluster' needs three sizes >= 1 (x, y, z), got [2, 1]
func.func @two_sizes(%k: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>, tile.cluster = array<i64: 2, 1>} {
  func.return
}

// -----

// CHECK: kernel @not_array: 'tile.cluster' must be array<i64: X, Y, Z>, got 2 : i64
func.func @not_array(%k: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>, tile.cluster = 2 : i64} {
  func.return
}
