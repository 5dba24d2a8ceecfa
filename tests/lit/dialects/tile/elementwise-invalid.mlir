// Every verifier rule of the elementwise ops (dialects/tile_elementwise.py); their syntax errors are in
// elementwise-syntax-invalid.mlir and tests/test_tile_elementwise.py.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.add' op operand shapes [[64, 32], [32]] do not broadcast: each operand must be [M, N], a row vector [M], a column [M, 1] or a column vector [1, N] of the result
func.func @f(%a: !tile.tile<64x32xf32, register>, %b: !tile.tile<32xf32, register>) {
  %c = tile.add %a, %b : !tile.tile<64x32xf32, register>, !tile.tile<32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.sub' op operands must share one element type, got
func.func @f(%a: !tile.tile<64x32xf32, register>, %b: !tile.tile<64x32xi32, register>) {
  %c = tile.sub %a, %b : !tile.tile<64x32xf32, register>, !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.mul' op operand 1 must be a register tile, got shared
func.func @f(%a: !tile.tile<64x32xf32, register>, %b: !tile.tile<64x32xf32, shared>) {
  %c = tile.mul %a, %b : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, shared>
  func.return
}

// -----

// CHECK: 'tile.element_max' op operand must be a float or i32 tile, got i64
func.func @f(%a: !tile.tile<64x32xi64, register>) {
  %c = tile.element_max %a, %a : !tile.tile<64x32xi64, register>
  func.return
}

// -----

// CHECK: 'tile.div' op divides f32 tiles, got i32
func.func @f(%a: !tile.tile<64x32xi32, register>) {
  %c = tile.div %a, %a : !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.add' op result must be !tile.tile<64x32xf32, register>, got !tile.tile<64xf32, register>
func.func @f(%a: !tile.tile<64x32xf32, register>, %b: !tile.tile<64xf32, register>) {
  %c = "tile.add"(%a, %b) : (!tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>) -> !tile.tile<64xf32, register>
  func.return
}

// -----

// CHECK: 'tile.cmp' op predicate must be one of lt, le, gt, ge, eq, ne, got 'ult'
func.func @f(%a: !tile.tile<64x32xi32, register>) {
  %c = tile.cmp ult %a, %a : !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.cmp' op compares f32 or i32 tiles, got bf16
func.func @f(%a: !tile.tile<64x32xbf16, register>) {
  %c = tile.cmp lt %a, %a : !tile.tile<64x32xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.cmp' op result must be !tile.tile<64x32xi1, register>, got !tile.tile<64x32xi32, register>
func.func @f(%a: !tile.tile<64x32xi32, register>) {
  %c = "tile.cmp"(%a, %a) <{predicate = "lt"}> : (!tile.tile<64x32xi32, register>, !tile.tile<64x32xi32, register>) -> !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.select' op condition must be an i1 tile, got i32
func.func @f(%p: !tile.tile<64x32xi32, register>, %a: !tile.tile<64x32xf32, register>) {
  %c = tile.select %p, %a, %a : !tile.tile<64x32xi32, register>, !tile.tile<64x32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.select' op operands must share one element type, got
func.func @f(%p: !tile.tile<64x32xi1, register>, %a: !tile.tile<64x32xf32, register>, %b: !tile.tile<64x32xi32, register>) {
  %c = tile.select %p, %a, %b : !tile.tile<64x32xi1, register>, !tile.tile<64x32xf32, register>, !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: tile type: i1 (predicate) tiles live in registers only
func.func @f(%p: !tile.tile<64x32xi1, shared>) {
  func.return
}

// -----

// CHECK: 'tile.tanh' op computes on f32 tiles, got i32
func.func @f(%a: !tile.tile<64x32xi32, register>) {
  %c = tile.tanh %a : !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.abs' op computes on f32 or i32 tiles, got bf16
func.func @f(%a: !tile.tile<64x32xbf16, register>) {
  %c = tile.abs %a : !tile.tile<64x32xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.exp' op operand must be a register tile, got shared
func.func @f(%a: !tile.tile<64x32xf32, shared>) {
  %c = tile.exp %a : !tile.tile<64x32xf32, shared>
  func.return
}

// -----

// CHECK: 'tile.iota' op axis must be rows or cols, got 'diag'
func.func @f() {
  %c = tile.iota diag : !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.iota' op result must be an i32 tile, got f32
func.func @f() {
  %c = tile.iota rows : !tile.tile<64x32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.iota' op a row vector [M] has row coordinates only (use rows)
func.func @f() {
  %c = tile.iota cols : !tile.tile<64xi32, register>
  func.return
}

// -----

// CHECK: 'tile.iota' op result must have rank 1 or 2, got rank 3
func.func @f() {
  %c = tile.iota rows : !tile.tile<2x64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.iota' op result must be a register tile, got global
func.func @f() {
  %c = tile.iota rows : !tile.tile<64x32xi32, global>
  func.return
}

// -----

// CHECK: 'tile.splat' op splats an f32 scalar into an f32 tile or an i32/index scalar into an i32 tile, got index into f32
func.func @f(%n: index) {
  %c = tile.splat %n : index -> !tile.tile<64x32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.splat' op result must be a register tile, got shared
func.func @f(%s: f32) {
  %c = tile.splat %s : f32 -> !tile.tile<64x32xf32, shared>
  func.return
}

// -----

// CHECK: 'tile.floordiv' op operand must be an i32 tile (integer floor division), got f32
func.func @f(%a: !tile.tile<64x32xf32, register>) {
  %c = tile.floordiv %a, %a : !tile.tile<64x32xf32, register>
  func.return
}

// -----

// CHECK: 'tile.mod' op operand must be an i32 tile (Python's %), got f32
func.func @f(%a: !tile.tile<64x32xi32, register>, %b: !tile.tile<64xf32, register>) {
  %c = tile.mod %b, %b : !tile.tile<64xf32, register>
  func.return
}

// -----

// CHECK: 'tile.mod' op operands must share one element type
func.func @f(%a: !tile.tile<64x32xi32, register>, %b: !tile.tile<64xf32, register>) {
  %c = tile.mod %a, %b : !tile.tile<64x32xi32, register>, !tile.tile<64xf32, register>
  func.return
}

// -----

// CHECK: 'tile.floor' op an i32 tile is integral already: floor of an integer is the integer itself (use the operand)
func.func @f(%a: !tile.tile<64x32xi32, register>) {
  %c = tile.floor %a : !tile.tile<64x32xi32, register>
  func.return
}

// -----

// CHECK: 'tile.rint' op rounds f32 tiles, got bf16
func.func @f(%a: !tile.tile<64x32xbf16, register>) {
  %c = tile.rint %a : !tile.tile<64x32xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.trunc' op operand must be a register tile, got shared
func.func @f(%a: !tile.tile<64x32xf32, shared>) {
  %c = tile.trunc %a : !tile.tile<64x32xf32, shared>
  func.return
}
