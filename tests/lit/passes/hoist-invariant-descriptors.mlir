// RUN: tessera-opt %s -p hoist-invariant-descriptors | filecheck %s

// The k-step descriptors of an operand whose slot no trip changes (%dq, made before the loop) are computed once,
// right after their base, and the loop's and the peeled trip's copies share them; those of a slot chosen per trip
// (%dk, made in the loop) stay in the loop. The consumer branch peaks well below its setmaxnreg budget of 240.

func.func @roomy(%n: index) attributes {sm90.kernel = {threads = 256 : i64, smem_bytes = 65536 : i64}} {
  %tid = sm90.special "tid.x" : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %producer = arith.cmpi ult, %tid, %c128 : index
  scf.if %producer {
    sm90.setmaxnreg "dec" 24
  } else {
    sm90.setmaxnreg "inc" 240
    %sq = sm90.shared_buffer "q" offset 0 size 16384 align 1024 swizzle 128 : i32
    %dq = sm90.make_descriptor %sq lbo 16 sbo 1024 swizzle 128 : i64
    %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
    %false = arith.constant false
    %dq2 = sm90.descriptor_advance %dq, 32 : i64
    sm90.wgmma_fence
    %p0 = sm90.wgmma_mma_async %zero, %dq, %dq scale_d %false n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
    %p1 = sm90.wgmma_mma_async %p0, %dq2, %dq2 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
    %acc = scf.for %i = %c0 to %n step %c1 iter_args(%a = %p1) -> (vector<64xf32>) {
      %sk = sm90.shared_buffer "k" offset 16384 size 16384 align 1024 swizzle 128 : i32
      %dk = sm90.make_descriptor %sk lbo 16 sbo 1024 swizzle 128 : i64
      %q2 = sm90.descriptor_advance %dq, 32 : i64
      %k2 = sm90.descriptor_advance %dk, 32 : i64
      %q4 = sm90.descriptor_advance %dq, 64 : i64
      %k4 = sm90.descriptor_advance %dk, 64 : i64
      sm90.wgmma_fence
      %s0 = sm90.wgmma_mma_async %a, %dq, %dk n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      %s1 = sm90.wgmma_mma_async %s0, %q2, %k2 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      %s2 = sm90.wgmma_mma_async %s1, %q4, %k4 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      sm90.wgmma_commit_group
      sm90.wgmma_wait_group 0
      scf.yield %s2 : vector<64xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @roomy
// CHECK:      %dq = sm90.make_descriptor %sq lbo 16 sbo 1024 swizzle 128 : i64
// CHECK-NEXT: %[[Q2:.*]] = sm90.descriptor_advance %dq, 32 : i64
// CHECK-NEXT: %[[Q4:.*]] = sm90.descriptor_advance %dq, 64 : i64
// CHECK:      %p1 = sm90.wgmma_mma_async %p0, %[[Q2]], %[[Q2]]
// CHECK:      scf.for
// CHECK:        %dk = sm90.make_descriptor
// CHECK-NEXT:   %k2 = sm90.descriptor_advance %dk, 32 : i64
// CHECK-NEXT:   %k4 = sm90.descriptor_advance %dk, 64 : i64
// CHECK:        %s1 = sm90.wgmma_mma_async %s0, %[[Q2]], %k2
// CHECK:        %s2 = sm90.wgmma_mma_async %s1, %[[Q4]], %k4
// CHECK-NOT:  sm90.descriptor_advance %dq

// A budget the accumulators already fill (24 registers, 64 needed): nothing is hoisted.

func.func @tight(%n: index) attributes {sm90.kernel = {threads = 256 : i64, smem_bytes = 65536 : i64}} {
  %tid = sm90.special "tid.x" : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %producer = arith.cmpi ult, %tid, %c128 : index
  scf.if %producer {
    sm90.setmaxnreg "dec" 24
  } else {
    sm90.setmaxnreg "inc" 24
    %sq = sm90.shared_buffer "q" offset 0 size 16384 align 1024 swizzle 128 : i32
    %dq = sm90.make_descriptor %sq lbo 16 sbo 1024 swizzle 128 : i64
    %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
    %acc = scf.for %i = %c0 to %n step %c1 iter_args(%a = %zero) -> (vector<64xf32>) {
      %q2 = sm90.descriptor_advance %dq, 32 : i64
      sm90.wgmma_fence
      %s0 = sm90.wgmma_mma_async %a, %dq, %dq n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      %s1 = sm90.wgmma_mma_async %s0, %q2, %q2 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      sm90.wgmma_commit_group
      sm90.wgmma_wait_group 0
      scf.yield %s1 : vector<64xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @tight
// CHECK:      %dq = sm90.make_descriptor
// CHECK-NEXT: %zero
// CHECK:      scf.for
// CHECK-NEXT:   %q2 = sm90.descriptor_advance %dq, 32 : i64

// A ring of two K slots, the trip's slot chosen by the induction variable: the slot's descriptor (made from
// the buffer's address plus the slot's offset on every trip) becomes the buffer's descriptor, made once before
// the first loop of its block, moved by the offset (sm90.descriptor_offset). The peeled trip before the loop
// (no loop around it) and the second loop share nothing with it but that descriptor; the k-step advances stay.

func.func @ring(%n: index) attributes {sm90.kernel = {threads = 256 : i64, smem_bytes = 65536 : i64}} {
  %tid = sm90.special "tid.x" : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c128 = arith.constant 128 : index
  %producer = arith.cmpi ult, %tid, %c128 : index
  scf.if %producer {
    sm90.setmaxnreg "dec" 24
  } else {
    sm90.setmaxnreg "inc" 240
    %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
    %sk0 = sm90.shared_buffer "k" offset 0 size 32768 align 1024 swizzle 128 : i32
    %dk0 = sm90.make_descriptor %sk0 lbo 16 sbo 1024 swizzle 128 : i64
    sm90.wgmma_fence
    %p0 = sm90.wgmma_mma_async %zero, %dk0, %dk0 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
    %acc = scf.for %i = %c1 to %n step %c1 iter_args(%a = %p0) -> (vector<64xf32>) {
      %slot = arith.remui %i, %c2 : index
      %c16384 = arith.constant 16384 : index
      %bytes = arith.muli %slot, %c16384 : index
      %off = arith.index_cast %bytes : index to i32
      %sk = sm90.shared_buffer "k" offset 0 size 32768 align 1024 swizzle 128 : i32
      %addr = arith.addi %sk, %off : i32
      %dk = sm90.make_descriptor %addr lbo 16 sbo 1024 swizzle 128 : i64
      %k2 = sm90.descriptor_advance %dk, 32 : i64
      sm90.wgmma_fence
      %s0 = sm90.wgmma_mma_async %a, %dk, %dk n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      %s1 = sm90.wgmma_mma_async %s0, %k2, %k2 n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      sm90.wgmma_commit_group
      sm90.wgmma_wait_group 0
      scf.yield %s1 : vector<64xf32>
    }
    %acc2 = scf.for %j = %c0 to %n step %c1 iter_args(%b = %acc) -> (vector<64xf32>) {
      %slot2 = arith.remui %j, %c2 : index
      %c16384b = arith.constant 16384 : index
      %bytes2 = arith.muli %slot2, %c16384b : index
      %off2 = arith.index_cast %bytes2 : index to i32
      %skb = sm90.shared_buffer "k" offset 0 size 32768 align 1024 swizzle 128 : i32
      %addr2 = arith.addi %skb, %off2 : i32
      %dkb = sm90.make_descriptor %addr2 lbo 16 sbo 1024 swizzle 128 : i64
      sm90.wgmma_fence
      %t0 = sm90.wgmma_mma_async %b, %dkb, %dkb n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
      sm90.wgmma_commit_group
      sm90.wgmma_wait_group 0
      scf.yield %t0 : vector<64xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @ring
// CHECK:      %dk0 = sm90.make_descriptor %sk0
// CHECK:      %[[BUF:.*]] = sm90.shared_buffer "k" offset 0 size 32768
// CHECK-NEXT: %[[RING:.*]] = sm90.make_descriptor %[[BUF]] lbo 16 sbo 1024 swizzle 128 : i64
// CHECK-NEXT: scf.for
// CHECK-NOT:    sm90.make_descriptor
// CHECK:        %dk = sm90.descriptor_offset %[[RING]], %off : i64
// CHECK-NEXT:   %k2 = sm90.descriptor_advance %dk, 32 : i64
// CHECK:      scf.for
// CHECK-NOT:    sm90.make_descriptor
// CHECK:        %dkb = sm90.descriptor_offset %[[RING]], %off2 : i64
// CHECK-NOT:  sm90.make_descriptor
