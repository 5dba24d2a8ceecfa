// sm90.lg2_approx round-trips in the custom and generic forms, and its verifier refuses non-f32 registers.
// RUN: tessera-opt %s --split-input-file | filecheck %s
// RUN: tessera-opt %s --split-input-file --print-op-generic | tessera-opt | filecheck %s

%x = "test.op"() : () -> vector<4xf32>
%s = "test.op"() : () -> f32
// CHECK: %l = sm90.lg2_approx %x : vector<4xf32>
%l = sm90.lg2_approx %x : vector<4xf32>
// CHECK-NEXT: %m = sm90.lg2_approx %s : f32
%m = sm90.lg2_approx %s : f32
