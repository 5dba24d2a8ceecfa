// RUN: tessera-opt %S/../../../examples/gemm.mlir -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | python -m tessera.ptx | filecheck %s

// The GEMM example as PTX: 2-d TMA copies, wgmma descriptors as enc(address) = (address & 0x3FFFF) >> 4 or'ed
// with the constant fields of facts.encode_descriptor (A: K-major, LBO 16, SBO 1024, 128B swizzle; B:
// MN-major, LBO 8192) built once per chain and stepped along K by one 64-bit add (as CUTLASS does), SS wgmma with trans-b 1 accumulating in the loop-carried registers themselves (the
// latch moves nothing), and one predicated st.global.b32 per accumulator register.

// CHECK-LABEL: .visible .entry gemm_bf16(
// CHECK:           .reqntid 256, 1, 1
// CHECK:       [[LOOP:\$L__for[0-9]+]]:
// CHECK:           cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r{{[0-9]+}}], [%rd{{[0-9]+}}, {%r{{[0-9]+}}, %r{{[0-9]+}}}], [%r{{[0-9]+}}];
// CHECK:           mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}], 32768;
// CHECK:           mbarrier.try_wait.parity.shared::cta.b64
// CHECK:           and.b32 [[ENC:%r[0-9]+]], %r{{[0-9]+}}, 0x3ffff;
// CHECK-NEXT:      shr.u32 [[ENC]], [[ENC]], 4;
// CHECK-NEXT:      cvt.u64.u32 [[WIDE:%rd[0-9]+]], [[ENC]];
// CHECK-NEXT:      or.b64 [[DESC_A:%rd[0-9]+]], [[WIDE]], 0x4000004000010000;
// CHECK:           or.b64 [[DESC_B:%rd[0-9]+]], %rd{{[0-9]+}}, 0x4000004002000000;
// CHECK:           wgmma.fence.sync.aligned;
// CHECK:           wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[[ACC:%f[0-9]+]], {{.*}}}, [[DESC_A]], [[DESC_B]], 1, 1, 1, 0, 1;
// CHECK:           add.s64 [[NEXT_A:%rd[0-9]+]], [[DESC_A]], 2;
// CHECK:           add.s64 %rd{{[0-9]+}}, [[DESC_B]], 128;
// CHECK:           wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[[ACC]], {{.*}}}, [[NEXT_A]], %rd{{[0-9]+}}, 1, 1, 1, 0, 1;
// CHECK-COUNT-2:   wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[[ACC]], {{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, 1, 1, 1, 0, 1;
// CHECK:           wgmma.commit_group.sync.aligned;
// CHECK-NEXT:      // sm90.wgmma_wait_group 0
// CHECK-NEXT:      wgmma.wait_group.sync.aligned 0;
// CHECK-NEXT:      // sm90.bar_sync 0, 256
// CHECK-NEXT:      bar.sync 0, 256;
// CHECK-NEXT:      // latch of %j
// CHECK-NEXT:      add.s32
// CHECK-NEXT:      setp.lt.s32
// CHECK-NEXT:      @%p{{[0-9]+}} bra [[LOOP]];

// CHECK:           @%p{{[0-9]+}} st.global.b32 [%rd{{[0-9]+}}], [[ACC]];
// CHECK:           ret;
