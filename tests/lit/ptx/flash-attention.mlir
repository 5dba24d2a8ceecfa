// RUN: tessera-opt %S/../../../examples/flash_attention.mlir -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | python -m tessera.ptx | filecheck %s

// The flash attention example (head_dim 128, bf16) as PTX: tensor maps as 64-byte aligned .param arrays used
// through their generic address; the dynamic shared memory base rounded up to 1024; thread 0 issues the
// 4-d TMA copies of two 64-column boxes; every thread spins on mbarrier.try_wait.parity; S = Q K^T is an SS
// wgmma chain whose first wgmma has scale-d 0 (D = A B: the zero fill is never written) and the others
// accumulate in place; row max/sum reduce across the quad
// with shfl.bfly 1, 2; P = ex2(...) is packed to bf16 pairs (odd element first: it goes to the high half)
// and fed to the RS wgmma with trans-b 1; the loop latch moves the carried values and branches back. The
// wgmma flags are scale-d (1: D += A B), imm-scale-a, imm-scale-b (1, 1), then imm-trans-a (SS only) and
// imm-trans-b.

// CHECK:      .version 8.0
// CHECK-NEXT: .target sm_90a
// CHECK-NEXT: .address_size 64
// CHECK:      .extern .shared .align 1024 .b8 smem[];

// CHECK-LABEL: .visible .entry flash_attention_d128_bf16(
// CHECK-NEXT:      .param .align 64 .b8 param_Q_map128[128],
// CHECK-NEXT:      .param .align 64 .b8 param_K_map128[128],
// CHECK-NEXT:      .param .align 64 .b8 param_V_map128[128],
// CHECK-NEXT:      .param .u64 param_O_ptr,
// CHECK-NEXT:      .param .u32 param_batch,
// CHECK-NEXT:      .param .u32 param_heads,
// CHECK-NEXT:      .param .u32 param_seq_q,
// CHECK-NEXT:      .param .u32 param_seq_k)
// CHECK-NEXT:  .reqntid 256, 1, 1
// CHECK-NEXT:  .minnctapersm 1
// CHECK-NEXT:  {
// CHECK-NEXT:      .reg .pred %p<{{[0-9]+}}>;
// CHECK-NEXT:      .reg .b32 %r<{{[0-9]+}}>;
// CHECK-NEXT:      .reg .b64 %rd<{{[0-9]+}}>;
// CHECK-NEXT:      .reg .f32 %f<{{[0-9]+}}>;

// CHECK:           mov.b64 [[QMAP:%rd[0-9]+]], param_Q_map128;
// CHECK-NEXT:      cvta.param.u64 [[QMAP]], [[QMAP]];
// CHECK:           ld.param.u64 [[OPTR:%rd[0-9]+]], [param_O_ptr];
// CHECK-NEXT:      cvta.to.global.u64 [[OPTR]], [[OPTR]];
// CHECK:           mov.u32 [[SMEM:%r[0-9]+]], smem;
// CHECK-NEXT:      add.u32 [[SMEM]], [[SMEM]], 1023;
// CHECK-NEXT:      and.b32 [[SMEM]], [[SMEM]], -1024;

// CHECK:           mbarrier.init.shared::cta.b64 [%r{{[0-9]+}}], 1;
// CHECK:           fence.mbarrier_init.release.cluster;
// CHECK:           bar.sync 0, 256;

// CHECK:           @!%p{{[0-9]+}} bra [[SKIP:\$L__if_end[0-9]+]];
// CHECK:           cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r{{[0-9]+}}], {{\[}}[[QMAP]], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [%r{{[0-9]+}}];
// CHECK:           cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-NEXT:  [[SKIP]]:
// CHECK:           mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}], 32768;

// CHECK:       [[LOOP:\$L__for[0-9]+]]:
// CHECK:           mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}], 65536;
// CHECK:       [[WAIT:\$L__while[0-9]+]]:
// CHECK-NEXT:      // %{{.*}} = sm90.mbarrier_try_wait_parity
// CHECK-NEXT:      mbarrier.try_wait.parity.shared::cta.b64 [[DONE:%p[0-9]+]], [%r{{[0-9]+}}], %r{{[0-9]+}};
// CHECK:           @![[DONE]] bra [[WAIT]];

// CHECK:           // sm90.wgmma_fence
// CHECK-NEXT:      // %{{.*}} (constant) is not read: scale-d = 0
// CHECK-NEXT:      wgmma.fence.sync.aligned;
// CHECK:           // %{{.*}} = sm90.wgmma_mma_async %{{.*}} scale_d
// CHECK-NEXT:      wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[[S0:%f[0-9]+]], {{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, 0, 1, 1, 0, 0;
// CHECK-NEXT:      // %{{.*}}
// CHECK:           wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[[S0]], {{.*}}}, %rd{{[0-9]+}}, %rd{{[0-9]+}}, 1, 1, 1, 0, 0;
// CHECK:           wgmma.commit_group.sync.aligned;
// CHECK-NEXT:      // sm90.wgmma_wait_group 0
// CHECK-NEXT:      wgmma.wait_group.sync.aligned 0;

// CHECK:           shfl.sync.bfly.b32 %f{{[0-9]+}}, %f{{[0-9]+}}, 1, 0x1f, 0xffffffff;
// CHECK:           shfl.sync.bfly.b32 %f{{[0-9]+}}, %f{{[0-9]+}}, 2, 0x1f, 0xffffffff;
// CHECK:           ex2.approx.ftz.f32 %f{{[0-9]+}}, %f{{[0-9]+}};

// CHECK:           // %{{[0-9]+}} = sm90.cvt_pack %{{[0-9]+}} type "bf16" : vector<8xf32> -> vector<4xi32>
// CHECK-NEXT:      cvt.rn.bf16x2.f32 [[A0:%r[0-9]+]], %f{{[0-9]+}}, %f{{[0-9]+}};
// CHECK:           wgmma.fence.sync.aligned;
// CHECK:           wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{.*}}}, {[[A0]], %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, 1, 1, 1, 1;
// CHECK:           wgmma.wait_group.sync.aligned 0;

// CHECK:           // latch of %j
// CHECK:           add.s32 [[J:%r[0-9]+]], [[J]], %r{{[0-9]+}};
// CHECK-NEXT:      setp.lt.s32 [[AGAIN:%p[0-9]+]], [[J]], %r{{[0-9]+}};
// CHECK-NEXT:      @[[AGAIN]] bra [[LOOP]];

// CHECK:           rcp.approx.ftz.f32
// CHECK:           cvt.rn.bf16x2.f32
// CHECK:           @%p{{[0-9]+}} st.global.b32 [%rd{{[0-9]+}}], %r{{[0-9]+}};
// CHECK:           ret;
// CHECK-NEXT:  }
