// Round trip of tile.scatter_add (the backward's addition into the gradient of a captured array a score_mod
// reads, e.g. a relative-position table at [h, q_idx - kv_idx]) through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @scatter_add(%dtable: !tile.tile<8x63xf32, global>, %h: !tile.tile<64xi32, register>,
                       %rel: !tile.tile<64x32xi32, register>, %ds: !tile.tile<64x32xf32, register>) {
  tile.scatter_add %ds, %dtable[%h, %rel] : !tile.tile<64x32xf32, register>, !tile.tile<8x63xf32, global>, !tile.tile<64xi32, register>, !tile.tile<64x32xi32, register>
  func.return
}

// CHECK: tile.scatter_add %ds, %dtable[%h, %rel] : !tile.tile<64x32xf32, register>, !tile.tile<8x63xf32, global>, !tile.tile<64xi32, register>, !tile.tile<64x32xi32, register>

// GENERIC: "tile.scatter_add"(%ds, %dtable, %h, %rel) : (!tile.tile<64x32xf32, register>, !tile.tile<8x63xf32, global>, !tile.tile<64xi32, register>, !tile.tile<64x32xi32, register>) -> ()
