// The 16-bit copy ops of the any-shape GEMM (dialects/sm90_memory.py): sm90.ld_global_u16 (with column immediates, as
// attention's bias loads it), sm90.st_shared_b16 and sm90.st_global_b16 (a 16-bit tile stored into rows of any
// length) round-trip, and each verifier rule reports its message.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
%a = "test.op"() : () -> vector<4xi32>
%v = sm90.ld_global_u16 %g[%o], %m : vector<4xi32>, vector<4xi1> -> vector<4xi32>
sm90.st_shared_b16 %a, %v : vector<4xi32>, vector<4xi32>
// CHECK: %v = sm90.ld_global_u16 %g[%o], %m : vector<4xi32>, vector<4xi1> -> vector<4xi32>
// CHECK-NEXT: sm90.st_shared_b16 %a, %v : vector<4xi32>, vector<4xi32>

// -----

// A 16-bit register tile whose rows need not start on 4 bytes (attention's bias): the columns are immediates.
%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
%v = sm90.ld_global_u16 %g[%o], %m {column_bytes = array<i32: 0, 2, 16, 18>} : vector<4xi32>, vector<4xi1> -> vector<4xi32>
// CHECK: %v = sm90.ld_global_u16 %g[%o], %m {column_bytes = array<i32: 0, 2, 16, 18>} : vector<4xi32>, vector<4xi1> -> vector<4xi32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{.*}}: 'sm90.ld_global_u16' op column_bytes must be 4 i32 values (one per register), got array<i32: 0, 2>
%v = sm90.ld_global_u16 %g[%o], %m {column_bytes = array<i32: 0, 2>} : vector<4xi32>, vector<4xi1> -> vector<4xi32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{.*}}: 'sm90.ld_global_u16' op loads into 32-bit integer registers, got vector<4xf32>
%v = sm90.ld_global_u16 %g[%o], %m : vector<4xi32>, vector<4xi1> -> vector<4xf32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<2xi32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{.*}}: 'sm90.ld_global_u16' op offsets must be vector<4xi64> or vector<4xi32> (sign-extended), got vector<2xi32>
%v = sm90.ld_global_u16 %g[%o], %m : vector<2xi32>, vector<4xi1> -> vector<4xi32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<2xi1>
// CHECK: {{.*}}: 'sm90.ld_global_u16' op mask must be vector<4xi1>, got vector<2xi1>
%v = sm90.ld_global_u16 %g[%o], %m : vector<4xi32>, vector<2xi1> -> vector<4xi32>

// -----

%a = "test.op"() : () -> vector<4xi32>
%v = "test.op"() : () -> vector<4xf32>
// CHECK: {{.*}}: 'sm90.st_shared_b16' op stores from 32-bit integer registers, got vector<4xf32>
sm90.st_shared_b16 %a, %v : vector<4xi32>, vector<4xf32>

// -----

%a = "test.op"() : () -> vector<2xi32>
%v = "test.op"() : () -> vector<4xi32>
// CHECK: {{.*}}: 'sm90.st_shared_b16' op one i32 shared address per register (4), got vector<2xi32>
sm90.st_shared_b16 %a, %v : vector<2xi32>, vector<4xi32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
%v = "test.op"() : () -> vector<4xi32>
sm90.st_global_b16 %g[%o], %v, %m {column_bytes = array<i32: 0, 2, 16, 18>} : vector<4xi32>, vector<4xi32>, vector<4xi1>
// CHECK: sm90.st_global_b16 %g[%o], %v, %m {column_bytes = array<i32: 0, 2, 16, 18>} : vector<4xi32>, vector<4xi32>, vector<4xi1>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
%v = "test.op"() : () -> vector<4xf32>
// CHECK: {{.*}}: 'sm90.st_global_b16' op stores from 32-bit integer registers, got vector<4xf32>
sm90.st_global_b16 %g[%o], %v, %m : vector<4xi32>, vector<4xf32>, vector<4xi1>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<2xi1>
%v = "test.op"() : () -> vector<4xi32>
// CHECK: {{.*}}: 'sm90.st_global_b16' op mask must be vector<4xi1>, got vector<2xi1>
sm90.st_global_b16 %g[%o], %v, %m : vector<4xi32>, vector<4xi32>, vector<2xi1>
