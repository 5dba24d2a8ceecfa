// RUN: python -m tessera.ptx %s | filecheck %s

// The sm90 ops the attention and GEMM kernels do not use yet, each as its docstring says it prints:
// elect.sync, setmaxnreg, bar.arrive, shuffles of i32 registers (up/down/idx), st.shared/ld.shared with
// 32-bit shared addresses, fence.proxy.async, mbarrier.arrive and mbarrier.inval.

func.func @machine_ops(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<128, 2>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 1032 : i64}} {
  %tid = sm90.special "tid.x" : index
  %lane = sm90.special "laneid" : index
  %bar = sm90.shared_buffer "bar" offset 0 size 8 align 8 swizzle 0 : i32
  %buf = sm90.shared_buffer "buf" offset 512 size 512 align 512 swizzle 0 : i32
  sm90.setmaxnreg "dec" 120
  %leader = sm90.elect_sync
  scf.if %leader {
    sm90.mbarrier_init %bar, 4
  }
  sm90.bar_sync 0, 128
  scf.if %leader {
    sm90.mbarrier_arrive %bar
  }
  %t = arith.index_cast %tid : index to i32
  %up = sm90.shfl_sync "up" %t, 1, 0 : i32
  %down = sm90.shfl_sync "down" %up, 2, 31 : i32
  %idx = sm90.shfl_sync "idx" %down, 0, 31 : i32
  %c4 = arith.constant 4 : i32
  %off = arith.muli %t, %c4 : i32
  %addr = arith.addi %buf, %off : i32
  sm90.st_shared %addr, %idx : i32, i32
  sm90.fence_proxy_async
  sm90.bar_arrive 1, 128
  sm90.bar_sync 1, 128
  %back = sm90.ld_shared %addr : i32 -> i32
  %c0 = arith.constant 0 : index
  %done = sm90.mbarrier_try_wait_parity %bar, %c0 : index
  sm90.bar_sync 0, 128
  scf.if %leader {
    sm90.mbarrier_inval %bar
  }
  %a = vector.broadcast %back : i32 to vector<2xi32>
  %d = arith.extui %done : i1 to i32
  %b = vector.broadcast %d : i32 to vector<1xi32>
  %vals = vector.shuffle %a, %b [0, 2] : vector<2xi32>, vector<1xi32>
  %t64 = arith.index_cast %tid : index to i64
  %c8 = arith.constant 8 : i64
  %base = arith.muli %t64, %c8 : i64
  %bv = vector.broadcast %base : i64 to vector<2xi64>
  %lanes = arith.constant dense<[0, 4]> : vector<2xi64>
  %offs = arith.addi %bv, %lanes : vector<2xi64>
  %all = arith.constant dense<true> : vector<2xi1>
  sm90.st_global %out[%offs], %vals, %all : vector<2xi64>, vector<2xi32>, vector<2xi1>
  // column_bytes: the constant part of each address is its immediate
  sm90.st_global %out[%offs], %vals, %all {column_bytes = array<i32: 16, 20>} : vector<2xi64>, vector<2xi32>, vector<2xi1>
  // 16-bit stores: each register's low half, at 2-byte granules
  sm90.st_global_b16 %out[%offs], %vals, %all {column_bytes = array<i32: 26, 30>} : vector<2xi64>, vector<2xi32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry machine_ops(
// CHECK:           mov.u32 [[SMEM:%r[0-9]+]], smem;
// CHECK:           mov.u32 %r{{[0-9]+}}, %laneid;
// CHECK:           // %buf = sm90.shared_buffer "buf" offset 512
// CHECK-NEXT:      add.u32 [[BUF:%r[0-9]+]], [[SMEM]], 512;
// CHECK:           setmaxnreg.dec.sync.aligned.u32 120;
// CHECK:           elect.sync _|[[LEADER:%p[0-9]+]], 0xffffffff;
// CHECK:           @![[LEADER]] bra
// CHECK-NEXT:      // sm90.mbarrier_init %bar, 4
// CHECK-NEXT:      mbarrier.init.shared::cta.b64 {{\[}}[[SMEM]]], 4;
// CHECK:           mbarrier.arrive.shared::cta.b64 _, {{\[}}[[SMEM]]];
// CHECK:           shfl.sync.up.b32 [[UP:%r[0-9]+]], %r{{[0-9]+}}, 1, 0x0, 0xffffffff;
// CHECK:           shfl.sync.down.b32 [[DOWN:%r[0-9]+]], [[UP]], 2, 0x1f, 0xffffffff;
// CHECK:           shfl.sync.idx.b32 [[IDX:%r[0-9]+]], [[DOWN]], 0, 0x1f, 0xffffffff;
// CHECK:           add.s32 [[ADDR:%r[0-9]+]], [[BUF]], %r{{[0-9]+}};
// CHECK:           st.shared.b32 {{\[}}[[ADDR]]], [[IDX]];
// CHECK:           fence.proxy.async.shared::cta;
// CHECK:           bar.arrive 1, 128;
// CHECK:           bar.sync 1, 128;
// CHECK:           ld.shared.b32 %r{{[0-9]+}}, {{\[}}[[ADDR]]];
// CHECK:           mbarrier.try_wait.parity.shared::cta.b64 [[DONE:%p[0-9]+]], {{\[}}[[SMEM]]], %r{{[0-9]+}};
// CHECK:           mbarrier.inval.shared::cta.b64 {{\[}}[[SMEM]]];
// CHECK:           selp.b32 %r{{[0-9]+}}, 1, 0, [[DONE]];
// CHECK:           st.global.b32 {{\[}}%rd{{[0-9]+}}],
// CHECK:           st.global.b32 {{\[}}%rd{{[0-9]+}}],
// CHECK:           st.global.b32 {{\[}}%rd{{[0-9]+}}+16],
// CHECK:           st.global.b32 {{\[}}%rd{{[0-9]+}}+20],
// CHECK:           st.global.b16 {{\[}}%rd{{[0-9]+}}+26],
// CHECK:           st.global.b16 {{\[}}%rd{{[0-9]+}}+30],
