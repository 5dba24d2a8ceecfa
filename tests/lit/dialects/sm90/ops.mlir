// Round trip of every op of the Target IR dialect sm90 (dialects/sm90.py) and the !sm90.tensormap type, in a
// kernel-like function: shared buffers, mbarrier setup, TMA loads waited on in an scf.while loop, wgmma SS and
// RS (with and without scale_d), a quad shuffle reduction, ex2/rcp, setp/selp, packing, shared and global
// loads and stores under a mask.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @attention_tile(%map_q: !sm90.tensormap, %map_k: !sm90.tensormap, %out: i64, %nbytes: i64) {
  // special registers
  %tid = sm90.special "tid.x" : index
  %tidy = sm90.special "tid.y" : index
  %tidz = sm90.special "tid.z" : index
  %ntid = sm90.special "ntid.x" : index
  %ntidy = sm90.special "ntid.y" : index
  %ntidz = sm90.special "ntid.z" : index
  %bx = sm90.special "ctaid.x" : index
  %by = sm90.special "ctaid.y" : index
  %bz = sm90.special "ctaid.z" : index
  %nbx = sm90.special "nctaid.x" : index
  %nby = sm90.special "nctaid.y" : index
  %nbz = sm90.special "nctaid.z" : index
  %lane = sm90.special "laneid" {note = "attr-dict"} : index
  // the kernel's dynamic shared memory
  %sq = sm90.shared_buffer "q" offset 0 size 16384 align 1024 swizzle 128 : i32
  %sk = sm90.shared_buffer "k" offset 16384 size 16384 align 1024 swizzle 128 : i32
  %sv = sm90.shared_buffer "v" offset 32768 size 2048 align 512 swizzle 64 : i32
  %sp = sm90.shared_buffer "p" offset 34816 size 1024 align 256 swizzle 32 : i32
  %full = sm90.shared_buffer "full" offset 35840 size 8 align 8 swizzle 0 : i32
  %done = sm90.shared_buffer "done" offset 35848 size 8 align 8 swizzle 0 : i32
  // one thread initialises the mbarriers
  %c0 = arith.constant 0 : index
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {
    sm90.mbarrier_init %full, 1
    sm90.mbarrier_init %done, 128
    sm90.fence_mbarrier_init
  }
  sm90.bar_sync 0, 128
  sm90.setmaxnreg "inc" 240
  // an elected lane of warp 0 starts the copies
  %c32 = arith.constant 32 : index
  %warp0 = arith.cmpi ult, %tid, %c32 : index
  scf.if %warp0 {
    %leader = sm90.elect_sync
    scf.if %leader {
      %row = arith.index_cast %bx : index to i32
      %k0 = arith.constant 0 : i32
      sm90.mbarrier_arrive_expect_tx %full, 32768
      sm90.tma_load %map_q[%k0, %row], %sq, %full : i32, i32
      sm90.tma_load %map_k[%c0, %by, %bz], %sk, %full : index, index, index
    }
  }
  // wait for phase 0 of %full
  %parity = arith.constant 0 : i32
  %true = arith.constant true
  scf.while () : () -> () {
    %ready = sm90.mbarrier_try_wait_parity %full, %parity : i32
    %pending = arith.xori %ready, %true : i1
    scf.condition(%pending)
  } do {
    scf.yield
  }
  // S = Q K^T (SS), first without, then with the accumulator
  %dq = sm90.make_descriptor %sq lbo 16 sbo 1024 swizzle 128 : i64
  %dk = sm90.make_descriptor %sk lbo 16 sbo 1024 swizzle 128 : i64
  %dk1 = sm90.descriptor_advance %dk, 32 : i64
  %slot_bytes = arith.constant 16384 : i32
  %dk_slot1 = sm90.descriptor_offset %dk, %slot_bytes : i64
  %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
  %false = arith.constant false
  sm90.wgmma_fence
  %s0 = sm90.wgmma_mma_async %zero, %dq, %dk scale_d %false n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
  %s1 = sm90.wgmma_mma_async %s0, %dq, %dk n 128 type "bf16" trans 1, 1 : vector<64xf32>, i64
  sm90.wgmma_commit_group
  sm90.wgmma_wait_group 0
  // a row maximum across the four threads of a quad, on two rows at once
  %m = vector.shuffle %s1, %s1 [0, 2] : vector<64xf32>, vector<64xf32>
  %m1 = sm90.shfl_sync "bfly" %m, 1, 31 : vector<2xf32>
  %m2 = arith.maximumf %m, %m1 : vector<2xf32>
  %m3 = sm90.shfl_sync "bfly" %m2, 2, 31 : vector<2xf32>
  %mx = arith.maximumf %m2, %m3 : vector<2xf32>
  %e = sm90.ex2_approx %mx : vector<2xf32>
  %l = vector.extract %e[0] : f32 from vector<2xf32>
  %r = sm90.rcp_approx %l : f32
  %down = sm90.shfl_sync "down" %r, 16, 31 : f32
  %big = sm90.setp "ge" %down, %r : f32 -> i1
  %rmax = sm90.selp %big, %down, %r : i1, f32
  %lane0 = sm90.setp "eq" %lane, %c0 : index -> i1
  %lane_i = arith.index_cast %lane : index to i32
  %up = sm90.shfl_sync "up" %lane_i, 1, 0 : i32
  %src = sm90.shfl_sync "idx" %up, 0, 7199 : i32
  // P as f16 pairs: to shared memory for the async proxy, back to registers as the A operand of O = P V (RS)
  %pf = vector.shuffle %s1, %s1 [0, 1, 2, 3, 4, 5, 6, 7] : vector<64xf32>, vector<64xf32>
  %pk = sm90.cvt_pack %pf type "f16" : vector<8xf32> -> vector<4xi32>
  %pbase = vector.broadcast %sp : i32 to vector<4xi32>
  %pstep = arith.constant dense<[0, 4, 8, 12]> : vector<4xi32>
  %paddr = arith.addi %pbase, %pstep : vector<4xi32>
  sm90.st_shared %paddr, %pk : vector<4xi32>, vector<4xi32>
  sm90.st_shared %sp, %r : i32, f32
  sm90.fence_proxy_async
  sm90.bar_sync 1, 128
  %pa = sm90.ld_shared %paddr : vector<4xi32> -> vector<4xi32>
  %pl = sm90.ld_shared %sp : i32 -> f32
  %pr = sm90.ld_shared %sp {column_bytes = array<i32: 0, 4>, aligned = 8 : i64} : i32 -> vector<2xf32>
  %dv = sm90.make_descriptor %sv lbo 128 sbo 512 swizzle 64 : i64
  %o0 = arith.constant dense<0.000000e+00> : vector<8xf32>
  sm90.wgmma_fence
  %o1 = sm90.wgmma_mma_async %o0, %pa, %dv scale_d %false n 16 type "f16" trans 0, 1 : vector<8xf32>, vector<4xi32>
  %o2 = sm90.wgmma_mma_async %o1, %pa, %dv n 16 type "f16" trans 0, 0 : vector<8xf32>, vector<4xi32>
  sm90.wgmma_commit_group
  sm90.wgmma_wait_group 1
  // bf16 output: 4 packed registers per thread, stored at 4-byte steps where the row is in bounds
  %ob = sm90.cvt_pack %o2 type "bf16" : vector<8xf32> -> vector<4xi32>
  %tid64 = arith.index_cast %tid : index to i64
  %obase = vector.broadcast %tid64 : i64 to vector<4xi64>
  %ostep = arith.constant dense<[0, 4, 8, 12]> : vector<4xi64>
  %offs = arith.addi %obase, %ostep : vector<4xi64>
  %limit = vector.broadcast %nbytes : i64 to vector<4xi64>
  %mask = sm90.setp "lt" %offs, %limit : vector<4xi64> -> vector<4xi1>
  sm90.st_global %out[%offs], %ob, %mask : vector<4xi64>, vector<4xi32>, vector<4xi1>
  %back = sm90.ld_global %out[%offs], %mask {column_bytes = array<i32: 0, 4, 32, 36>} : vector<4xi64>, vector<4xi1> -> vector<4xf32>
  %zf = arith.constant dense<0.000000e+00> : vector<4xf32>
  %kept = sm90.selp %mask, %back, %zf : vector<4xi1>, vector<4xf32>
  // hand the buffers back
  sm90.bar_arrive 2, 256
  sm90.mbarrier_arrive %done
  sm90.setmaxnreg "dec" 24
  sm90.mbarrier_inval %full
  sm90.mbarrier_inval %done
  func.return
}

// The custom form prints back as written (names, attributes, types, nesting) and re-parses to the same module.
// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @attention_tile(%map_q: !sm90.tensormap, %map_k: !sm90.tensormap, %out: i64, %nbytes: i64) {
// CHECK-NEXT:     %tid = sm90.special "tid.x" : index
// CHECK-NEXT:     %tidy = sm90.special "tid.y" : index
// CHECK-NEXT:     %tidz = sm90.special "tid.z" : index
// CHECK-NEXT:     %ntid = sm90.special "ntid.x" : index
// CHECK-NEXT:     %ntidy = sm90.special "ntid.y" : index
// CHECK-NEXT:     %ntidz = sm90.special "ntid.z" : index
// CHECK-NEXT:     %bx = sm90.special "ctaid.x" : index
// CHECK-NEXT:     %by = sm90.special "ctaid.y" : index
// CHECK-NEXT:     %bz = sm90.special "ctaid.z" : index
// CHECK-NEXT:     %nbx = sm90.special "nctaid.x" : index
// CHECK-NEXT:     %nby = sm90.special "nctaid.y" : index
// CHECK-NEXT:     %nbz = sm90.special "nctaid.z" : index
// CHECK-NEXT:     %lane = sm90.special "laneid" {note = "attr-dict"} : index
// CHECK-NEXT:     %sq = sm90.shared_buffer "q" offset 0 size 16384 align 1024 swizzle 128 : i32
// CHECK-NEXT:     %sk = sm90.shared_buffer "k" offset 16384 size 16384 align 1024 swizzle 128 : i32
// CHECK-NEXT:     %sv = sm90.shared_buffer "v" offset 32768 size 2048 align 512 swizzle 64 : i32
// CHECK-NEXT:     %sp = sm90.shared_buffer "p" offset 34816 size 1024 align 256 swizzle 32 : i32
// CHECK-NEXT:     %full = sm90.shared_buffer "full" offset 35840 size 8 align 8 swizzle 0 : i32
// CHECK-NEXT:     %done = sm90.shared_buffer "done" offset 35848 size 8 align 8 swizzle 0 : i32
// CHECK-NEXT:     %c0 = arith.constant 0 : index
// CHECK-NEXT:     %first = arith.cmpi eq, %tid, %c0 : index
// CHECK-NEXT:     scf.if %first {
// CHECK-NEXT:       sm90.mbarrier_init %full, 1
// CHECK-NEXT:       sm90.mbarrier_init %done, 128
// CHECK-NEXT:       sm90.fence_mbarrier_init
// CHECK-NEXT:     }
// CHECK-NEXT:     sm90.bar_sync 0, 128
// CHECK-NEXT:     sm90.setmaxnreg "inc" 240
// CHECK-NEXT:     %c32 = arith.constant 32 : index
// CHECK-NEXT:     %warp0 = arith.cmpi ult, %tid, %c32 : index
// CHECK-NEXT:     scf.if %warp0 {
// CHECK-NEXT:       %leader = sm90.elect_sync
// CHECK-NEXT:       scf.if %leader {
// CHECK-NEXT:         %row = arith.index_cast %bx : index to i32
// CHECK-NEXT:         %k0 = arith.constant 0 : i32
// CHECK-NEXT:         sm90.mbarrier_arrive_expect_tx %full, 32768
// CHECK-NEXT:         sm90.tma_load %map_q[%k0, %row], %sq, %full : i32, i32
// CHECK-NEXT:         sm90.tma_load %map_k[%c0, %by, %bz], %sk, %full : index, index, index
// CHECK-NEXT:       }
// CHECK-NEXT:     }
// CHECK-NEXT:     %parity = arith.constant 0 : i32
// CHECK-NEXT:     %true = arith.constant true
// CHECK-NEXT:     scf.while () : () -> () {
// CHECK-NEXT:       %ready = sm90.mbarrier_try_wait_parity %full, %parity : i32
// CHECK-NEXT:       %pending = arith.xori %ready, %true : i1
// CHECK-NEXT:       scf.condition(%pending)
// CHECK-NEXT:     } do {
// CHECK-NEXT:       scf.yield
// CHECK-NEXT:     }
// CHECK-NEXT:     %dq = sm90.make_descriptor %sq lbo 16 sbo 1024 swizzle 128 : i64
// CHECK-NEXT:     %dk = sm90.make_descriptor %sk lbo 16 sbo 1024 swizzle 128 : i64
// CHECK-NEXT:     %dk1 = sm90.descriptor_advance %dk, 32 : i64
// CHECK-NEXT:     %slot_bytes = arith.constant 16384 : i32
// CHECK-NEXT:     %dk_slot1 = sm90.descriptor_offset %dk, %slot_bytes : i64
// CHECK-NEXT:     %zero = arith.constant dense<0.000000e+00> : vector<64xf32>
// CHECK-NEXT:     %false = arith.constant false
// CHECK-NEXT:     sm90.wgmma_fence
// CHECK-NEXT:     %s0 = sm90.wgmma_mma_async %zero, %dq, %dk scale_d %false n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64
// CHECK-NEXT:     %s1 = sm90.wgmma_mma_async %s0, %dq, %dk n 128 type "bf16" trans 1, 1 : vector<64xf32>, i64
// CHECK-NEXT:     sm90.wgmma_commit_group
// CHECK-NEXT:     sm90.wgmma_wait_group 0
// CHECK-NEXT:     %m = vector.shuffle %s1, %s1 [0, 2] : vector<64xf32>, vector<64xf32>
// CHECK-NEXT:     %m1 = sm90.shfl_sync "bfly" %m, 1, 31 : vector<2xf32>
// CHECK-NEXT:     %m2 = arith.maximumf %m, %m1 : vector<2xf32>
// CHECK-NEXT:     %m3 = sm90.shfl_sync "bfly" %m2, 2, 31 : vector<2xf32>
// CHECK-NEXT:     %mx = arith.maximumf %m2, %m3 : vector<2xf32>
// CHECK-NEXT:     %e = sm90.ex2_approx %mx : vector<2xf32>
// CHECK-NEXT:     %l = vector.extract %e[0] : f32 from vector<2xf32>
// CHECK-NEXT:     %r = sm90.rcp_approx %l : f32
// CHECK-NEXT:     %down = sm90.shfl_sync "down" %r, 16, 31 : f32
// CHECK-NEXT:     %big = sm90.setp "ge" %down, %r : f32 -> i1
// CHECK-NEXT:     %rmax = sm90.selp %big, %down, %r : i1, f32
// CHECK-NEXT:     %lane0 = sm90.setp "eq" %lane, %c0 : index -> i1
// CHECK-NEXT:     %lane_i = arith.index_cast %lane : index to i32
// CHECK-NEXT:     %up = sm90.shfl_sync "up" %lane_i, 1, 0 : i32
// CHECK-NEXT:     %src = sm90.shfl_sync "idx" %up, 0, 7199 : i32
// CHECK-NEXT:     %pf = vector.shuffle %s1, %s1 [0, 1, 2, 3, 4, 5, 6, 7] : vector<64xf32>, vector<64xf32>
// CHECK-NEXT:     %pk = sm90.cvt_pack %pf type "f16" : vector<8xf32> -> vector<4xi32>
// CHECK-NEXT:     %pbase = vector.broadcast %sp : i32 to vector<4xi32>
// CHECK-NEXT:     %pstep = arith.constant dense<[0, 4, 8, 12]> : vector<4xi32>
// CHECK-NEXT:     %paddr = arith.addi %pbase, %pstep : vector<4xi32>
// CHECK-NEXT:     sm90.st_shared %paddr, %pk : vector<4xi32>, vector<4xi32>
// CHECK-NEXT:     sm90.st_shared %sp, %r : i32, f32
// CHECK-NEXT:     sm90.fence_proxy_async
// CHECK-NEXT:     sm90.bar_sync 1, 128
// CHECK-NEXT:     %pa = sm90.ld_shared %paddr : vector<4xi32> -> vector<4xi32>
// CHECK-NEXT:     %pl = sm90.ld_shared %sp : i32 -> f32
// CHECK-NEXT:     %pr = sm90.ld_shared %sp {column_bytes = array<i32: 0, 4>, aligned = 8 : i64} : i32 -> vector<2xf32>
// CHECK-NEXT:     %dv = sm90.make_descriptor %sv lbo 128 sbo 512 swizzle 64 : i64
// CHECK-NEXT:     %o0 = arith.constant dense<0.000000e+00> : vector<8xf32>
// CHECK-NEXT:     sm90.wgmma_fence
// CHECK-NEXT:     %o1 = sm90.wgmma_mma_async %o0, %pa, %dv scale_d %false n 16 type "f16" trans 0, 1 : vector<8xf32>, vector<4xi32>
// CHECK-NEXT:     %o2 = sm90.wgmma_mma_async %o1, %pa, %dv n 16 type "f16" trans 0, 0 : vector<8xf32>, vector<4xi32>
// CHECK-NEXT:     sm90.wgmma_commit_group
// CHECK-NEXT:     sm90.wgmma_wait_group 1
// CHECK-NEXT:     %ob = sm90.cvt_pack %o2 type "bf16" : vector<8xf32> -> vector<4xi32>
// CHECK-NEXT:     %tid64 = arith.index_cast %tid : index to i64
// CHECK-NEXT:     %obase = vector.broadcast %tid64 : i64 to vector<4xi64>
// CHECK-NEXT:     %ostep = arith.constant dense<[0, 4, 8, 12]> : vector<4xi64>
// CHECK-NEXT:     %offs = arith.addi %obase, %ostep : vector<4xi64>
// CHECK-NEXT:     %limit = vector.broadcast %nbytes : i64 to vector<4xi64>
// CHECK-NEXT:     %mask = sm90.setp "lt" %offs, %limit : vector<4xi64> -> vector<4xi1>
// CHECK-NEXT:     sm90.st_global %out[%offs], %ob, %mask : vector<4xi64>, vector<4xi32>, vector<4xi1>
// CHECK-NEXT:     %back = sm90.ld_global %out[%offs], %mask {column_bytes = array<i32: 0, 4, 32, 36>} : vector<4xi64>, vector<4xi1> -> vector<4xf32>
// CHECK-NEXT:     %zf = arith.constant dense<0.000000e+00> : vector<4xf32>
// CHECK-NEXT:     %kept = sm90.selp %mask, %back, %zf : vector<4xi1>, vector<4xf32>
// CHECK-NEXT:     sm90.bar_arrive 2, 256
// CHECK-NEXT:     sm90.mbarrier_arrive %done
// CHECK-NEXT:     sm90.setmaxnreg "dec" 24
// CHECK-NEXT:     sm90.mbarrier_inval %full
// CHECK-NEXT:     sm90.mbarrier_inval %done
// CHECK-NEXT:     func.return
// CHECK-NEXT:   }
// CHECK-NEXT: }

// The generic form: properties (not attributes), the optional scale_d operand, the variadic coordinates.
// GENERIC:      %lane = "sm90.special"() <{register = "laneid"}> {note = "attr-dict"} : () -> index
// GENERIC:      %sq = "sm90.shared_buffer"() <{sym = "q", offset = 0 : i64, size = 16384 : i64, alignment = 1024 : i64, swizzle = 128 : i64}> : () -> i32
// GENERIC:      "sm90.mbarrier_init"(%full) <{count = 1 : i64}> : (i32) -> ()
// GENERIC:      "sm90.setmaxnreg"() <{action = "inc", count = 240 : i64}> : () -> ()
// GENERIC:      "sm90.tma_load"(%map_k, %c0, %by, %bz, %sk, %full) : (!sm90.tensormap, index, index, index, i32, i32) -> ()
// GENERIC:      %ready = "sm90.mbarrier_try_wait_parity"(%full, %parity) : (i32, i32) -> i1
// GENERIC:      %dk_slot1 = "sm90.descriptor_offset"(%dk, %slot_bytes) : (i64, i32) -> i64
// GENERIC:      %s0 = "sm90.wgmma_mma_async"(%zero, %dq, %dk, %false) <{n = 128 : i64, type = "bf16", trans_a = 0 : i64, trans_b = 1 : i64}> : (vector<64xf32>, i64, i64, i1) -> vector<64xf32>
// GENERIC-NEXT: %s1 = "sm90.wgmma_mma_async"(%s0, %dq, %dk) <{n = 128 : i64, type = "bf16", trans_a = 1 : i64, trans_b = 1 : i64}> : (vector<64xf32>, i64, i64) -> vector<64xf32>
// GENERIC:      %m1 = "sm90.shfl_sync"(%m) <{mode = "bfly", offset = 1 : i64, clamp = 31 : i64}> : (vector<2xf32>) -> vector<2xf32>
// GENERIC:      %big = "sm90.setp"(%down, %r) <{predicate = "ge"}> : (f32, f32) -> i1
// GENERIC-NEXT: %rmax = "sm90.selp"(%big, %down, %r) : (i1, f32, f32) -> f32
// GENERIC:      %pk = "sm90.cvt_pack"(%pf) <{type = "f16"}> : (vector<8xf32>) -> vector<4xi32>
// GENERIC:      %o1 = "sm90.wgmma_mma_async"(%o0, %pa, %dv, %false) <{n = 16 : i64, type = "f16", trans_a = 0 : i64, trans_b = 1 : i64}> : (vector<8xf32>, vector<4xi32>, i64, i1) -> vector<8xf32>
// GENERIC:      %mask = "sm90.setp"(%offs, %limit) <{predicate = "lt"}> : (vector<4xi64>, vector<4xi64>) -> vector<4xi1>
// GENERIC-NEXT: "sm90.st_global"(%out, %offs, %ob, %mask) : (i64, vector<4xi64>, vector<4xi32>, vector<4xi1>) -> ()
// GENERIC-NEXT: %back = "sm90.ld_global"(%out, %offs, %mask) <{column_bytes = array<i32: 0, 4, 32, 36>}> : (i64, vector<4xi64>, vector<4xi1>) -> vector<4xf32>
// GENERIC:      %kept = "sm90.selp"(%mask, %back, %zf) : (vector<4xi1>, vector<4xf32>, vector<4xf32>) -> vector<4xf32>
// GENERIC-NEXT: "sm90.bar_arrive"() <{barrier = 2 : i64, threads = 256 : i64}> : () -> ()
