// One chunk per verifier rule of dialects/sm90_reductions.py.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.red_global_add' op adds f32 registers, got vector<4xi32>
sm90.red_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xi32>, vector<4xi1>

// -----

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<2xi64>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.red_global_add' op offsets must be vector<4xi64> or vector<4xi32> (sign-extended), got vector<2xi64>
sm90.red_global_add %base[%offs], %v, %m : vector<2xi64>, vector<4xf32>, vector<4xi1>

// -----

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi32>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.atom_global_add' op mask must be vector<4xi1>, got vector<4xi32>
%o = sm90.atom_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi32> -> vector<4xf32>

// -----

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.atom_global_add' op result must be vector<4xf32> (the old values), got vector<2xf32>
%o = sm90.atom_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi1> -> vector<2xf32>

// -----

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.red_global_add' op column_bytes must be 4 i32 values (one per register), got array<i32: 0, 4>
sm90.red_global_add %base[%offs], %v, %m {column_bytes = array<i32: 0, 4>} : vector<4xi64>, vector<4xf32>, vector<4xi1>

// -----

%base = "test.op"() : () -> i64
%a = "test.op"() : () -> i32
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bulk_reduce_add' op bytes must be a positive multiple of 16 up to a block's 232448 bytes of shared memory, got 24
sm90.bulk_reduce_add %base, %a, 24 : i64

// -----

// The source is shared memory: no more bytes than a block has (the PTX's size operand is 32 bits).
%base = "test.op"() : () -> i64
%a = "test.op"() : () -> i32
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bulk_reduce_add' op bytes must be a positive multiple of 16 up to a block's 232448 bytes of shared memory, got 1099511627776
sm90.bulk_reduce_add %base, %a, 1099511627776 : i64

// -----

// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bulk_wait_group' op pending group count must be in [0, 63], got 64
sm90.bulk_wait_group 64 read

// -----

%a = "test.op"() : () -> i32
%r = "test.op"() : () -> vector<3xi32>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.stmatrix' op values must be vector<Nxi32> with N in (1, 2, 4) (one register per matrix), got vector<3xi32>
sm90.stmatrix %a, %r : i32, vector<3xi32>

// -----

%a = "test.op"() : () -> i32
%r = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.stmatrix' op values must be vector<Nxi32> with N in (1, 2, 4) (one register per matrix), got vector<4xf32>
sm90.stmatrix %a, %r : i32, vector<4xf32>

// -----

%r = "test.op"() : () -> vector<4xi32>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_unpack' op result must be vector<8xf32>, got vector<4xf32>
%u = sm90.cvt_unpack %r type "bf16" : vector<4xi32> -> vector<4xf32>

// -----

%r = "test.op"() : () -> vector<4xi32>
// CHECK: {{^.*reductions-invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_unpack' op type must be bf16 or f16, got 'f32'
%u = sm90.cvt_unpack %r type "f32" : vector<4xi32> -> vector<8xf32>
