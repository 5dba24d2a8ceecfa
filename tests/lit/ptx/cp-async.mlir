// RUN: python -m tessera.ptx %s | filecheck %s

// The cp.async ops (dialects/sm90_cp_async.py) as their docstrings say they print: the 16-byte copy with its
// src-size register, the commit and wait of its group, and the noinc arrive on an mbarrier.

func.func @gather(%src: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 1024 : i64}} {
  %tid = sm90.special "tid.x" : index
  %bar = sm90.shared_buffer "bar" offset 0 size 8 align 8 swizzle 0 : i32
  %buf = sm90.shared_buffer "buf" offset 512 size 512 align 512 swizzle 0 : i32
  %t = arith.index_cast %tid : index to i32
  %c16 = arith.constant 16 : i32
  %off = arith.muli %t, %c16 : i32
  %dst = arith.addi %buf, %off : i32
  %size = arith.constant 16 : i32
  sm90.cp_async %dst, %src, %size, 16
  sm90.cp_async_commit_group
  sm90.cp_async_wait_group 0
  sm90.cp_async_mbarrier_arrive_noinc %bar
  func.return
}

// CHECK-LABEL: .visible .entry gather(
// CHECK:           cp.async.cg.shared.global [%r{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r{{[0-9]+}};
// CHECK-NEXT:      // sm90.cp_async_commit_group
// CHECK-NEXT:      cp.async.commit_group;
// CHECK-NEXT:      // sm90.cp_async_wait_group 0
// CHECK-NEXT:      cp.async.wait_group 0;
// CHECK-NEXT:      // sm90.cp_async_mbarrier_arrive_noinc %bar
// CHECK-NEXT:      cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r{{[0-9]+}}];
