// One chunk per verifier rule of dialects/sm90_cp_async.py.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%dst = "test.op"() : () -> i32
%src = "test.op"() : () -> i64
%size = "test.op"() : () -> i32
// CHECK: 'sm90.cp_async' op cp.async.cg copies 16 bytes, got 8
sm90.cp_async %dst, %src, %size, 8

// -----

// CHECK: 'sm90.cp_async_wait_group' op the number of groups left pending must be >= 0, got -1
sm90.cp_async_wait_group -1
