// An integer fill an f32 cannot hold exactly (tile.fill keeps its value as an f32, which would round 73856093,
// a hash's multiplier, to 73856096) is a located diagnostic and exit status 1, naming the way to write it.
// RUN: not tessera-opt %s 2>&1 | filecheck %s

// CHECK: fill-syntax-invalid.mlir:[[# @LINE + 3]]:18
// CHECK: a fill of i32 holds its value as an f32, which would round 73856093 to 73856096: splat an arith.constant of it instead (tile.splat)
func.func @f() {
  %a = tile.fill 73856093 : !tile.tile<64x16xi32, register>
  func.return
}
