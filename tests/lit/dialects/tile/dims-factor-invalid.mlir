// A factor of a dimension expression must be positive and multiply a name (a constant is written as one number).
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: dimension expression: a factor must be positive and multiply a name, got 0 * heads
"test.op"() {dims = #tile.dims<0 * heads>} : () -> ()

// -----

// CHECK: dimension expression: a factor must be positive and multiply a name, got -2 * ceildiv(seq_q, 64)
"test.op"() {dims = #tile.dims<-2 * ceildiv(seq_q, 64)>} : () -> ()
