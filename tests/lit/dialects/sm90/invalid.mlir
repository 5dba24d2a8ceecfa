// One chunk per verifier rule of the Target IR dialect sm90 (dialects/sm90.py, sm90_memory.py, sm90_sync.py,
// sm90_wgmma.py, sm90_arithmetic.py: every `_require` and every ValueError of tessera.sm90.facts that a
// verifier turns into a diagnostic), each checking the rule's message, then the IRDL-level constraints
// (operand and result types, shared type variables, property types).
// A rule with two conditions (e.g. "a power of two >= 8") gets a chunk for each; rules shared by several ops
// through a base class are tested on different ops in turn. Every message, value included, occurs once.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// ===== sm90.special

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.special' op unknown special register 'tid.w' (known: tid.x, tid.y, tid.z, ntid.x, ntid.y, ntid.z, ctaid.x, ctaid.y, ctaid.z, nctaid.x, nctaid.y, nctaid.z, laneid, cluster_ctarank, cluster_nctarank, cluster_ctaid.x, cluster_ctaid.y, cluster_ctaid.z, cluster_nctaid.x, cluster_nctaid.y, cluster_nctaid.z, clusterid.x, clusterid.y, clusterid.z, nclusterid.x, nclusterid.y, nclusterid.z)
%t = sm90.special "tid.w" : index

// ===== sm90.shared_buffer

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op swizzle must be one of (0, 32, 64, 128) bytes, got 16
%s = sm90.shared_buffer "s" offset 0 size 1024 align 1024 swizzle 16 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op alignment must be a power of two from 8 to 1024, got 4
%s = sm90.shared_buffer "s" offset 0 size 1024 align 4 swizzle 0 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op alignment must be a power of two from 8 to 1024, got 48
%s = sm90.shared_buffer "s" offset 0 size 1024 align 48 swizzle 0 : i32

// -----

// More than the 128B swizzle's period: the printed kernel would align its base (.align) and launch with that many
// bytes more.
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op alignment must be a power of two from 8 to 1024, got 4096
%s = sm90.shared_buffer "s" offset 0 size 1024 align 4096 swizzle 0 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op a 128B swizzle needs 1024-byte alignment, got 512
%s = sm90.shared_buffer "s" offset 0 size 8192 align 512 swizzle 128 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op offset 8 is not a multiple of the alignment 1024
%s = sm90.shared_buffer "s" offset 8 size 8192 align 1024 swizzle 128 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op offset -1024 is not a multiple of the alignment 1024
%s = sm90.shared_buffer "s" offset -1024 size 8192 align 1024 swizzle 128 : i32

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shared_buffer' op size must be positive, got 0
%s = sm90.shared_buffer "s" offset 0 size 0 align 8 swizzle 0 : i32

// ===== sm90.tma_load

// -----

%m = "test.op"() : () -> !sm90.tensormap
%a = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.tma_load' op a tensor copy has 1 to 5 coordinates, got 0
"sm90.tma_load"(%m, %a, %a) : (!sm90.tensormap, i32, i32) -> ()

// -----

%m = "test.op"() : () -> !sm90.tensormap
%a = "test.op"() : () -> i32
%c = "test.op"() : () -> index
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.tma_load' op a tensor copy has 1 to 5 coordinates, got 6
sm90.tma_load %m[%c, %c, %c, %c, %c, %c], %a, %a : index, index, index, index, index, index

// ===== sm90.mbarrier_init, sm90.mbarrier_arrive_expect_tx

// -----

%b = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.mbarrier_init' op expected arrival count must be in [1, 1048575], got 0
sm90.mbarrier_init %b, 0

// -----

%b = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.mbarrier_init' op expected arrival count must be in [1, 1048575], got 1048576
sm90.mbarrier_init %b, 1048576

// -----

%b = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.mbarrier_arrive_expect_tx' op transaction bytes must be in [1, 1048575], got 0
sm90.mbarrier_arrive_expect_tx %b, 0

// -----

%b = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.mbarrier_arrive_expect_tx' op transaction bytes must be in [1, 1048575], got 1048576
sm90.mbarrier_arrive_expect_tx %b, 1048576

// ===== sm90.wgmma_wait_group, sm90.make_descriptor

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_wait_group' op pending group count must be in [0, 7], got 8
sm90.wgmma_wait_group 8

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_wait_group' op pending group count must be in [0, 7], got -1
sm90.wgmma_wait_group -1

// -----

%s = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.make_descriptor' op swizzle mode must be one of (0, 32, 64, 128) bytes, got 16
%d = sm90.make_descriptor %s lbo 16 sbo 1024 swizzle 16 : i64

// -----

%s = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.make_descriptor' op descriptor leading_byte_offset must be a multiple of 16 bytes, got 8
%d = sm90.make_descriptor %s lbo 8 sbo 1024 swizzle 128 : i64

// -----

%s = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.make_descriptor' op descriptor leading_byte_offset must be in [0, 262144) bytes, got 262144
%d = sm90.make_descriptor %s lbo 262144 sbo 1024 swizzle 128 : i64

// -----

%s = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.make_descriptor' op descriptor stride_byte_offset must be a multiple of 16 bytes, got 1000
%d = sm90.make_descriptor %s lbo 16 sbo 1000 swizzle 128 : i64

// -----

%s = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.make_descriptor' op descriptor stride_byte_offset must be in [0, 262144) bytes, got 262160
%d = sm90.make_descriptor %s lbo 16 sbo 262160 swizzle 0 : i64

// -----

%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.descriptor_advance' op a descriptor start offset must be a multiple of 16 in [0, 2^18), got 40
%d2 = sm90.descriptor_advance %d, 40 : i64

// -----

%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.descriptor_advance' op a descriptor start offset must be a multiple of 16 in [0, 2^18), got 262144
%d2 = sm90.descriptor_advance %d, 262144 : i64

// -----

%d = "test.op"() : () -> i64
%c24 = arith.constant 24 : i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.descriptor_offset' op a descriptor start offset must be a multiple of 16 in [0, 2^18), got 24
%d2 = sm90.descriptor_offset %d, %c24 : i64

// ===== sm90.wgmma_mma_async

// -----

%acc = "test.op"() : () -> vector<64xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op type must be bf16, f16, e4m3 or e5m2, got 'f32'
%r = sm90.wgmma_mma_async %acc, %d, %d n 128 type "f32" trans 0, 0 : vector<64xf32>, i64

// -----

%acc = "test.op"() : () -> vector<6xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op wgmma N must be one of (8, 16, 24, {{.*}}, 248, 256) for .bf16, got 12
%r = sm90.wgmma_mma_async %acc, %d, %d n 12 type "bf16" trans 0, 0 : vector<6xf32>, i64

// -----

%acc = "test.op"() : () -> vector<132xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op wgmma N must be one of (8, 16, 24, {{.*}}, 248, 256) for .f16, got 264
%r = sm90.wgmma_mma_async %acc, %d, %d n 264 type "f16" trans 0, 0 : vector<132xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op accumulator must be vector<64xf32> for n = 128, got vector<32xf32>
%r = sm90.wgmma_mma_async %acc, %d, %d n 128 type "bf16" trans 0, 0 : vector<32xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf16>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op accumulator must be vector<32xf32> for n = 64, got vector<32xf16>
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "f16" trans 0, 0 : vector<32xf16>, i64

// -----

%acc = "test.op"() : () -> vector<64xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op trans_a must be 0 or 1
%r = sm90.wgmma_mma_async %acc, %d, %d n 128 type "bf16" trans 2, 0 : vector<64xf32>, i64

// -----

%acc = "test.op"() : () -> vector<64xf32>
%a = "test.op"() : () -> vector<4xi32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op trans_b must be 0 or 1
%r = sm90.wgmma_mma_async %acc, %a, %d n 128 type "bf16" trans 0, 2 : vector<64xf32>, vector<4xi32>

// -----

%acc = "test.op"() : () -> vector<64xf32>
%a = "test.op"() : () -> vector<8xi32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op a register A operand must be vector<4xi32>, got vector<8xi32>
%r = sm90.wgmma_mma_async %acc, %a, %d n 128 type "bf16" trans 0, 1 : vector<64xf32>, vector<8xi32>

// -----

%acc = "test.op"() : () -> vector<64xf32>
%a = "test.op"() : () -> vector<4xf32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op a register A operand must be vector<4xi32>, got vector<4xf32>
%r = sm90.wgmma_mma_async %acc, %a, %d n 128 type "bf16" trans 0, 1 : vector<64xf32>, vector<4xf32>

// -----

%acc = "test.op"() : () -> vector<64xf32>
%a = "test.op"() : () -> vector<4xi32>
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op trans_a applies only to an A descriptor
%r = sm90.wgmma_mma_async %acc, %a, %d n 128 type "bf16" trans 1, 1 : vector<64xf32>, vector<4xi32>

// -----

%acc = "test.op"() : () -> vector<64xf32>
%a = "test.op"() : () -> i32
%d = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.wgmma_mma_async' op a descriptor A operand must be i64, got i32
%r = sm90.wgmma_mma_async %acc, %a, %d n 128 type "bf16" trans 0, 1 : vector<64xf32>, i32

// ===== sm90.shfl_sync

// -----

%x = "test.op"() : () -> f32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op mode must be one of up, down, bfly, idx, got 'rotate'
%r = sm90.shfl_sync "rotate" %x, 1, 31 : f32

// -----

%x = "test.op"() : () -> f32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op lane offset must be in [0, 32), got 32
%r = sm90.shfl_sync "bfly" %x, 32, 31 : f32

// -----

%x = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op lane offset must be in [0, 32), got -1
%r = sm90.shfl_sync "down" %x, -1, 31 : i32

// -----

%x = "test.op"() : () -> vector<2xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op clamp/segment mask must fit 13 bits, got 8192
%r = sm90.shfl_sync "idx" %x, 0, 8192 : vector<2xf32>

// -----

%x = "test.op"() : () -> vector<2xf16>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op shuffles move 32-bit registers, got f16
%r = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf16>

// -----

%x = "test.op"() : () -> i64
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.shfl_sync' op shuffles move 32-bit registers, got i64
%r = sm90.shfl_sync "up" %x, 1, 0 : i64

// ===== sm90.bar_sync, sm90.bar_arrive (_NamedBarrierOp)

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bar_sync' op barrier id must be in [0, 16), got 16
sm90.bar_sync 16, 128

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bar_arrive' op thread count must be a positive multiple of 32 up to a block's 1024 threads, got 48
sm90.bar_arrive 1, 48

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bar_sync' op thread count must be a positive multiple of 32 up to a block's 1024 threads, got 0
sm90.bar_sync 0, 0

// -----

// More threads than a block has: the barrier never completes (and ptxas takes no such count).
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.bar_sync' op thread count must be a positive multiple of 32 up to a block's 1024 threads, got 2048
sm90.bar_sync 1, 2048

// ===== sm90.setmaxnreg

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setmaxnreg' op action must be inc or dec, got 'set'
sm90.setmaxnreg "set" 240

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setmaxnreg' op setmaxnreg count must be a multiple of 8 in [24, 256], got 16
sm90.setmaxnreg "dec" 16

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setmaxnreg' op setmaxnreg count must be a multiple of 8 in [24, 256], got 264
sm90.setmaxnreg "inc" 264

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setmaxnreg' op setmaxnreg count must be a multiple of 8 in [24, 256], got 100
sm90.setmaxnreg "inc" 100

// ===== sm90.ex2_approx, sm90.rcp_approx (_ApproxUnaryOp)

// -----

%x = "test.op"() : () -> vector<2xf16>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ex2_approx' op operates on f32 registers, got vector<2xf16>
%r = sm90.ex2_approx %x : vector<2xf16>

// -----

%x = "test.op"() : () -> vector<4xbf16>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.rcp_approx' op operates on f32 registers, got vector<4xbf16>
%r = sm90.rcp_approx %x : vector<4xbf16>

// ===== sm90.cvt_pack

// -----

%x = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_pack' op type must be bf16, f16, e4m3 or e5m2, got 'f32'
%p = sm90.cvt_pack %x type "f32" : vector<4xf32> -> vector<2xi32>

// -----

%x = "test.op"() : () -> vector<3xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_pack' op source must be an even number of f32 registers, got vector<3xf32>
%p = sm90.cvt_pack %x type "bf16" : vector<3xf32> -> vector<1xi32>

// -----

%x = "test.op"() : () -> vector<4xf16>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_pack' op source must be an even number of f32 registers, got vector<4xf16>
%p = sm90.cvt_pack %x type "f16" : vector<4xf16> -> vector<2xi32>

// -----

%x = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_pack' op result must be vector<2xi32>, got vector<4xi32>
%p = sm90.cvt_pack %x type "bf16" : vector<4xf32> -> vector<4xi32>

// -----

%x = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.cvt_pack' op result must be vector<2xi32>, got vector<2xf32>
%p = sm90.cvt_pack %x type "f16" : vector<4xf32> -> vector<2xf32>

// ===== sm90.setp, sm90.selp

// -----

%x = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setp' op predicate must be one of eq, ne, lt, le, gt, ge, got 'ult'
%p = sm90.setp "ult" %x, %x : i32 -> i1

// -----

%x = "test.op"() : () -> vector<4xi64>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setp' op result must be vector<4xi1>, got vector<8xi1>
%p = sm90.setp "lt" %x, %x : vector<4xi64> -> vector<8xi1>

// -----

%x = "test.op"() : () -> f32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.setp' op result must be i1, got vector<1xi1>
%p = sm90.setp "gt" %x, %x : f32 -> vector<1xi1>

// -----

%c = "test.op"() : () -> i1
%x = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.selp' op condition must be vector<4xi1>, got i1
%r = sm90.selp %c, %x, %x : i1, vector<4xf32>

// -----

%c = "test.op"() : () -> vector<2xi1>
%x = "test.op"() : () -> index
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.selp' op condition must be i1, got vector<2xi1>
%r = sm90.selp %c, %x, %x : vector<2xi1>, index

// ===== sm90.st_global, sm90.ld_global

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xi64>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_global' op stores 32-bit registers, got vector<4xi64>
sm90.st_global %g[%o], %v, %m : vector<4xi64>, vector<4xi64>, vector<4xi1>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi16>
%v = "test.op"() : () -> vector<4xf32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_global' op offsets must be vector<4xi64> or vector<4xi32> (sign-extended), got vector<4xi16>
sm90.st_global %g[%o], %v, %m : vector<4xi16>, vector<4xf32>, vector<4xi1>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<8xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_global' op mask must be vector<4xi1>, got vector<8xi1>
sm90.st_global %g[%o], %v, %m : vector<4xi64>, vector<4xi32>, vector<8xi1>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi64>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_global' op loads 32-bit registers, got vector<4xf16>
%v = sm90.ld_global %g[%o], %m : vector<4xi64>, vector<4xi1> -> vector<4xf16>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi32>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_global' op column_bytes must be 4 i32 values (one per register), got array<i32: 0, 4>
%v = sm90.ld_global %g[%o], %m {column_bytes = array<i32: 0, 4>} : vector<4xi32>, vector<4xi1> -> vector<4xf32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<2xi64>
%m = "test.op"() : () -> vector<4xi1>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_global' op offsets must be vector<4xi64> or vector<4xi32> (sign-extended), got vector<2xi64>
%v = sm90.ld_global %g[%o], %m : vector<2xi64>, vector<4xi1> -> vector<4xf32>

// -----

%g = "test.op"() : () -> i64
%o = "test.op"() : () -> vector<4xi64>
%m = "test.op"() : () -> vector<4xi8>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_global' op mask must be vector<4xi1>, got vector<4xi8>
%v = sm90.ld_global %g[%o], %m : vector<4xi64>, vector<4xi8> -> vector<4xi32>

// ===== sm90.st_shared, sm90.ld_shared

// -----

%a = "test.op"() : () -> i32
%v = "test.op"() : () -> i16
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_shared' op stores 32-bit registers, got i16
sm90.st_shared %a, %v : i32, i16

// -----

%a = "test.op"() : () -> vector<2xi32>
%v = "test.op"() : () -> vector<4xf32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_shared' op one i32 shared address per register (4), got vector<2xi32>
sm90.st_shared %a, %v : vector<2xi32>, vector<4xf32>

// -----

%a = "test.op"() : () -> vector<4xi64>
%v = "test.op"() : () -> vector<4xi32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.st_shared' op one i32 shared address per register (4), got vector<4xi64>
sm90.st_shared %a, %v : vector<4xi64>, vector<4xi32>

// -----

%a = "test.op"() : () -> vector<2xi32>
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_shared' op loads 32-bit registers, got vector<2xi64>
%v = sm90.ld_shared %a : vector<2xi32> -> vector<2xi64>

// -----

%a = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_shared' op one i32 shared address per register (2), or one with column_bytes, got i32
%v = sm90.ld_shared %a : i32 -> vector<2xf32>

// -----

%a = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_shared' op aligned must be a power of two of at least 4 bytes, got 12
%v = sm90.ld_shared %a {column_bytes = array<i32: 0, 4>, aligned = 12 : i64} : i32 -> vector<2xf32>

// -----

%a = "test.op"() : () -> i32
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: }}'sm90.ld_shared' op aligned must be a power of two of at least 4 bytes, got 2
%v = sm90.ld_shared %a {column_bytes = array<i32: 0, 4>, aligned = 2 : i64} : i32 -> vector<2xf32>

// ===== IRDL-level constraints (generic form, so that the message names the operand or result)

// -----

%m = "test.op"() : () -> !sm90.tensormap
%a = "test.op"() : () -> i32
%x = "test.op"() : () -> i64
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'coords' at positions 1 to 2 does not verify:
// CHECK-NEXT: Expected attribute i32 but got i64
"sm90.tma_load"(%m, %a, %x, %a, %a) : (!sm90.tensormap, i32, i64, i32, i32) -> ()

// -----

%b = "test.op"() : () -> i32
%p = "test.op"() : () -> i1
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'parity' at position 1 does not verify:
// CHECK-NEXT: Expected attribute i32 but got i1
%d = "sm90.mbarrier_try_wait_parity"(%b, %p) : (i32, i1) -> i1

// -----

%x = "test.op"() : () -> i64
%a = "test.op"() : () -> i32
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'tensor_map' at position 0 does not verify:
// CHECK-NEXT: i64 should be of base attribute sm90.tensormap
"sm90.tma_load"(%x, %a, %a, %a) : (i64, i32, i32, i32) -> ()

// -----

%acc = "test.op"() : () -> vector<4xf32>
%d = "test.op"() : () -> i64
%b = "test.op"() : () -> i32
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'b' at position 2 does not verify:
// CHECK-NEXT: Expected attribute i64 but got i32
%r = "sm90.wgmma_mma_async"(%acc, %d, %b) <{n = 8 : i64, type = "bf16", trans_a = 0 : i64, trans_b = 0 : i64}> : (vector<4xf32>, i64, i32) -> vector<4xf32>

// -----

%acc = "test.op"() : () -> vector<4xf32>
%d = "test.op"() : () -> i64
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute vector<4xf32> expected from variable 'T', but got vector<8xf32>
%r = "sm90.wgmma_mma_async"(%acc, %d, %d) <{n = 8 : i64, type = "bf16", trans_a = 0 : i64, trans_b = 0 : i64}> : (vector<4xf32>, i64, i64) -> vector<8xf32>

// -----

%a = "test.op"() : () -> i32
%b = "test.op"() : () -> i64
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'rhs' at position 1 does not verify:
// CHECK-NEXT: attribute i32 expected from variable 'T', but got i64
%p = "sm90.setp"(%a, %b) <{predicate = "eq"}> : (i32, i64) -> i1

// -----

%x = "test.op"() : () -> f16
// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}operand 'source' at position 0 does not verify:
// CHECK-NEXT: Unexpected attribute f16
%r = "sm90.ex2_approx"(%x) : (f16) -> f16

// -----

// CHECK:      {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}result 'result' at position 0 does not verify:
// CHECK-NEXT: i32 should be of base attribute index
%t = "sm90.special"() <{register = "tid.x"}> : () -> i32

// -----

// The integer properties are i64 (an unsuffixed `2`); an index property is refused.
// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}Expected attribute i64 but got index
"sm90.wgmma_wait_group"() <{pending = 2 : index}> : () -> ()

// -----

// CHECK: {{^.*invalid.mlir:[0-9]+:[0-9]+: op 'sm90\.[a-z0-9_]+': }}property 'count' expected in operation 'sm90.mbarrier_init'
%b = "test.op"() : () -> i32
"sm90.mbarrier_init"(%b) : (i32) -> ()
