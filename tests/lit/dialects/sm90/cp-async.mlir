// Round trip of the cp.async ops (dialects/sm90_cp_async.py): the copy with its src-size, its groups and the
// mbarrier arrive that signals a ring slot.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s

%dst = "test.op"() : () -> i32
%src = "test.op"() : () -> i64
%size = "test.op"() : () -> i32
%bar = "test.op"() : () -> i32
// CHECK: sm90.cp_async %{{.*}}, %{{.*}}, %{{.*}}, 16
sm90.cp_async %dst, %src, %size, 16
// CHECK-NEXT: sm90.cp_async_commit_group
sm90.cp_async_commit_group
// CHECK-NEXT: sm90.cp_async_wait_group 1
sm90.cp_async_wait_group 1
// CHECK-NEXT: sm90.cp_async_mbarrier_arrive_noinc %{{.*}}
sm90.cp_async_mbarrier_arrive_noinc %bar
