// SSA dominance (tessera/ir/dominance.py), which xDSL does not verify: one chunk per way a use can fail to be
// dominated by its definition, each diagnostic naming the place, the function, the use and the value; then
// uses that are valid. Before the check, these inputs crashed a pass or an interpreter with a KeyError.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// CHECK: dominance-invalid.mlir:[[# @LINE + 3]]:3: func @use_before_def: operand #0 of 'arith.addf' uses %0 before its definition (later in the same block); %0 is defined at {{.*}}dominance-invalid.mlir:[[# @LINE + 4]]:3
// CHECK-NOT: Traceback
func.func @use_before_def(%a: f32) -> f32 {
  %1 = arith.addf %0, %a : f32
  %0 = arith.mulf %a, %a : f32
  func.return %1 : f32
}

// -----

// CHECK: dominance-invalid.mlir:[[# @LINE + 2]]:3: func @own_result: operand #0 of 'arith.addf' uses %x which is its own result
func.func @own_result(%a: f32) -> f32 {
  %x = arith.addf %x, %a : f32
  func.return %x : f32
}

// -----

// CHECK: dominance-invalid.mlir:[[# @LINE + 4]]:5: func @enclosing_result: operand #0 of 'arith.addi' uses %r which is a result of the 'scf.for' that contains this use
func.func @enclosing_result(%a: index) -> index {
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %a to %a step %c1 iter_args(%s = %a) -> (index) {
    %t = arith.addi %r, %s : index
    scf.yield %t : index
  }
  func.return %r : index
}

// -----

// A value defined in a loop body is not visible before the loop (textually first, bound to the later definition).
// CHECK: dominance-invalid.mlir:[[# @LINE + 2]]:3: func @outside_region: operand #0 of 'arith.addf' uses %x outside the region that defines it (a region of 'scf.for' ({{.*}}dominance-invalid.mlir:[[# @LINE + 5]]:3), which does not enclose this use); %x is defined at {{.*}}dominance-invalid.mlir:[[# @LINE + 6]]:5
func.func @outside_region(%a: f32, %n: index) -> f32 {
  %y = arith.addf %x, %a : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %x = arith.mulf %a, %a : f32
    scf.yield
  }
  func.return %y : f32
}

// -----

// ... nor after it (reported by the parser, at the use).
// CHECK: dominance-invalid.mlir:[[# @LINE + 8]]:19
// CHECK: use of undefined value %x (no definition of it is in scope here: a value defined inside a region is not visible after it)
func.func @after_region(%a: f32, %n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %x = arith.mulf %a, %a : f32
  }
  %y = arith.addf %x, %a : f32
  func.return %y : f32
}

// -----

// CHECK: dominance-invalid.mlir:[[# @LINE + 3]]:3: func @isolated: operand #0 of 'arith.addf' uses %c which is defined outside 'func.func' @isolated, an op isolated from above that contains this use (it sees only values defined inside it); %c is defined at {{.*}}dominance-invalid.mlir:[[# @LINE + 1]]:1
%c = arith.constant 1.0 : f32
func.func @isolated(%a: f32) -> f32 {
  %y = arith.addf %c, %a : f32
  func.return %y : f32
}

// -----

// CHECK: dominance-invalid.mlir:[[# @LINE + 9]]:3: func @branch: operand #0 of 'arith.addf' uses %x in a block that the block defining it does not dominate; %x is defined at {{.*}}dominance-invalid.mlir:[[# @LINE + 4]]:3
func.func @branch(%c: i1, %a: f32) -> f32 {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  %x = arith.mulf %a, %a : f32
  cf.br ^bb3
^bb2:
  cf.br ^bb3
^bb3:
  %y = arith.addf %x, %a : f32
  func.return %y : f32
}

// -----

// A kernel is named as a kernel.
// CHECK: dominance-invalid.mlir:[[# @LINE + 4]]:3: kernel @k: operand #0 of 'arith.muli' uses %m0 before its definition (later in the same block)
func.func @k(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %c64 = arith.constant 64 : index
  %n0 = arith.muli %m0, %c64 : index
  %m0 = tile.program_id x : index
  func.return
}

// -----

// Valid: the body of builtin.module is a graph region (any order); a block dominates the blocks it leads to;
// a loop body sees the values defined before the loop.
// CHECK-LABEL: builtin.module
// CHECK:      %a = arith.addf %b, %b : f32
// CHECK-NEXT: %b = arith.constant 1.000000e+00 : f32
%a = arith.addf %b, %b : f32
%b = arith.constant 1.0 : f32
func.func @valid(%c: i1, %v: f32, %n: index) -> f32 {
  %x = arith.mulf %v, %v : f32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (f32) {
    %t = arith.addf %acc, %x : f32
    scf.yield %t : f32
  }
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  cf.br ^bb2
^bb2:
  %y = arith.addf %x, %s : f32
  func.return %y : f32
}
