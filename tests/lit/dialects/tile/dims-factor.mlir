// A dimension expression may carry a constant factor (a split-KV grid axis counts parts x heads); it prints and
// parses back in the custom and the generic form.
// RUN: tessera-opt %s | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

// CHECK: dims = #tile.dims<ceildiv(seq_q, 128), 3 * heads, 2 * ceildiv(seq_k, 64), batch, 7>
"test.op"() {dims = #tile.dims<ceildiv(seq_q, 128), 3 * heads, 2 * ceildiv(seq_k, 64), batch, 7>} : () -> ()
