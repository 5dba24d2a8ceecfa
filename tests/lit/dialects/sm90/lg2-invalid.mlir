// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%x = "test.op"() : () -> vector<2xf16>
// CHECK: {{^.*lg2-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.lg2_approx' op operates on f32 registers, got vector<2xf16>
%r = sm90.lg2_approx %x : vector<2xf16>
