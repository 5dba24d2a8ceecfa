// A product after a name in a dimension expression (a grid of B * H blocks, as a batched kernel's user writes it)
// is a located diagnostic naming the forms there are, and exit status 1 (it was xDSL's "'>' expected").
// RUN: not tessera-opt %s 2>&1 | filecheck %s

// CHECK: dims-product-invalid.mlir:[[# @LINE + 2]]:50
// CHECK: a dimension expression has one name, and its constant factor in front (`3 * heads`): a product after a name (`B * H`, `heads * 3`) is not one; give each name a grid axis of its own
"test.op"() {grid = #tile.dims<ceildiv(M, 64), B * H>} : () -> ()
