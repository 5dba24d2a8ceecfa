// Round trip of the backward's sm90 ops (dialects/sm90_reductions.py): atomic adds into global memory, bulk
// reductions with their groups, stmatrix.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

%base = "test.op"() : () -> i64
%offs = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi1>
%a = "test.op"() : () -> i32
%r = "test.op"() : () -> vector<4xi32>
%r2 = "test.op"() : () -> vector<2xi32>
// CHECK:      sm90.red_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi1>
// CHECK-NEXT: sm90.red_global_add %base[%offs], %v, %m {column_bytes = array<i32: 0, 4, 8, 12>} : vector<4xi64>, vector<4xf32>, vector<4xi1>
// CHECK-NEXT: %old = sm90.atom_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi1> -> vector<4xf32>
// CHECK-NEXT: sm90.bulk_reduce_add %base, %a, 512 : i64
// CHECK-NEXT: sm90.bulk_commit_group
// CHECK-NEXT: sm90.bulk_wait_group 0 read
// CHECK-NEXT: sm90.bulk_wait_group 1
// CHECK-NEXT: sm90.stmatrix %a, %r : i32, vector<4xi32>
// CHECK-NEXT: sm90.stmatrix %a, %r2 trans : i32, vector<2xi32>
// CHECK-NEXT: %u = sm90.cvt_unpack %r type "f16" : vector<4xi32> -> vector<8xf32>
sm90.red_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi1>
sm90.red_global_add %base[%offs], %v, %m {column_bytes = array<i32: 0, 4, 8, 12>} : vector<4xi64>, vector<4xf32>, vector<4xi1>
%old = sm90.atom_global_add %base[%offs], %v, %m : vector<4xi64>, vector<4xf32>, vector<4xi1> -> vector<4xf32>
sm90.bulk_reduce_add %base, %a, 512 : i64
sm90.bulk_commit_group
sm90.bulk_wait_group 0 read
sm90.bulk_wait_group 1
sm90.stmatrix %a, %r : i32, vector<4xi32>
sm90.stmatrix %a, %r2 trans : i32, vector<2xi32>
%u = sm90.cvt_unpack %r type "f16" : vector<4xi32> -> vector<8xf32>
