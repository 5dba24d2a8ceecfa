// The rules of the 8-bit Target IR forms, one chunk each, with their messages: cvt_pack_fp8 packs whole
// 32-key slices (16 f32 registers) of an e4m3/e5m2 P; an 8-bit wgmma reads both operands K-major; a wgmma's
// b_type differs from its type, and mixes only e4m3 with e5m2.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%x = "test.op"() : () -> vector<8xf32>
// CHECK: 'sm90.cvt_pack_fp8' op source must be a multiple of 16 f32 registers (whole 32-key slices), got vector<8xf32>
%p = sm90.cvt_pack_fp8 %x type "e4m3" : vector<8xf32> -> vector<2xi32>

// -----

%x = "test.op"() : () -> vector<16xf32>
// CHECK: 'sm90.cvt_pack_fp8' op type must be e4m3 or e5m2, got 'bf16'
%p = sm90.cvt_pack_fp8 %x type "bf16" : vector<16xf32> -> vector<4xi32>

// -----

%x = "test.op"() : () -> vector<16xf32>
// CHECK: 'sm90.cvt_pack_fp8' op result must be vector<4xi32>, got vector<8xi32>
%p = sm90.cvt_pack_fp8 %x type "e4m3" : vector<16xf32> -> vector<8xi32>

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: 'sm90.wgmma_mma_async' op an MN-major B (imm-trans-b = 1) needs .f16 or .bf16 multiplicands, got .e4m3: other types are read K-major only
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" trans 0, 1 : vector<32xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: 'sm90.wgmma_mma_async' op an MN-major B (imm-trans-b = 1) needs .f16 or .bf16 multiplicands, got .e5m2: other types are read K-major only
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" b_type "e5m2" trans 0, 1 : vector<32xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: 'sm90.wgmma_mma_async' op b_type 'e4m3' is type's: give b_type only for a B of another type
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" b_type "e4m3" trans 0, 0 : vector<32xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: 'sm90.wgmma_mma_async' op A is .e4m3 and B is .bf16: wgmma mixes only .e4m3 with .e5m2 and .u8 with .s8, other multiplicand types must be equal
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" b_type "bf16" trans 0, 0 : vector<32xf32>, i64

// -----

%acc = "test.op"() : () -> vector<32xf32>
%d = "test.op"() : () -> i64
// CHECK: 'sm90.wgmma_mma_async' op b_type must be bf16, f16, e4m3 or e5m2, got 'tf32'
%r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" b_type "tf32" trans 0, 0 : vector<32xf32>, i64

// -----

%w = "test.op"() : () -> i32
// CHECK: 'sm90.prmt' op selector must be four 4-bit fields (0 .. 0xFFFF), got 65536
%t = sm90.prmt %w, %w selector 65536 : i32

// -----

%f = "test.op"() : () -> i64
// CHECK: 'sm90.prmt' op permutes the bytes of i32 registers, got i64
%t = sm90.prmt %f, %f selector 0 : i64
