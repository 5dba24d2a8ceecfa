// tile.load_index and tile.store_global_rows round-trip in their custom forms.
// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// CHECK-LABEL: func.func @serving
// CHECK: %{{.*}} = tile.load_index %{{.*}}[%{{.*}}, %{{.*}}] : !tile.tile<?x?xi32, global>
// CHECK: tile.store_global_rows %{{.*}}, %{{.*}}, %{{.*}} : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
func.func @serving(%table: !tile.tile<?x?xi32, global>, %o: !tile.tile<?x?x64xbf16, global>, %v: !tile.tile<128x64xbf16, register>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %page = tile.load_index %table[%c0, %c1] : !tile.tile<?x?xi32, global>
  %w = tile.view %o[%c0, %page, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<128x64xbf16, global>
  tile.store_global_rows %v, %w, %page : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
  func.return
}
