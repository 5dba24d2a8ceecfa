// A syntax error of the elementwise ops is a located diagnostic and exit status 1 (the other ones are tested in
// tests/test_tile_elementwise.py).
// RUN: not tessera-opt %s 2>&1 | filecheck %s

// CHECK: elementwise-syntax-invalid.mlir:[[# @LINE + 3]]:20
// CHECK: tile.select takes 3 operands (condition, true value, false value), got 2
func.func @f(%p: !tile.tile<64x32xi1, register>, %a: !tile.tile<64x32xf32, register>) {
  %c = tile.select %p, %a : !tile.tile<64x32xi1, register>, !tile.tile<64x32xf32, register>
  func.return
}
