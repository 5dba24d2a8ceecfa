// RUN: python -m tessera.ptx %s | filecheck %s

// The backward's sm90 ops (dialects/sm90_reductions.py) as their docstrings say they print: red and atom
// per register under the mask (the column bytes as address immediates; red and st.global under a constant
// all-true mask, an access through a `tile.view ... in_bounds`, with no predicate and the constant not
// printed), the bulk reduction with its group, and stmatrix .x4 / .x2.trans.

func.func @reductions(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 512 : i64}} {
  %tid = sm90.special "tid.x" : index
  %buf = sm90.shared_buffer "buf" offset 0 size 512 align 128 swizzle 0 : i32
  %t64 = arith.index_cast %tid : index to i64
  %c8 = arith.constant 8 : i64
  %row = arith.muli %t64, %c8 : i64
  %rows = vector.broadcast %row : i64 to vector<2xi64>
  %c16 = arith.constant 16 : index
  %low = arith.cmpi ult, %tid, %c16 : index
  %all = vector.broadcast %low : i1 to vector<2xi1>
  %one = arith.constant dense<1.0> : vector<2xf32>
  sm90.red_global_add %out[%rows], %one, %all {column_bytes = array<i32: 0, 4>} : vector<2xi64>, vector<2xf32>, vector<2xi1>
  %old = sm90.atom_global_add %out[%rows], %one, %all : vector<2xi64>, vector<2xf32>, vector<2xi1> -> vector<2xf32>
  %inside = arith.constant dense<true> : vector<2xi1>
  sm90.red_global_add %out[%rows], %one, %inside {column_bytes = array<i32: 0, 4>} : vector<2xi64>, vector<2xf32>, vector<2xi1>
  sm90.bulk_reduce_add %out, %buf, 256 : i64
  sm90.bulk_commit_group
  sm90.bulk_wait_group 0 read
  sm90.bulk_wait_group 0
  %words = arith.constant dense<[1, 2, 3, 4]> : vector<4xi32>
  sm90.stmatrix %buf, %words : i32, vector<4xi32>
  %pair = vector.shuffle %words, %words [0, 1] : vector<4xi32>, vector<4xi32>
  sm90.stmatrix %buf, %pair trans : i32, vector<2xi32>
  %bf = sm90.cvt_unpack %pair type "bf16" : vector<2xi32> -> vector<4xf32>
  %h = sm90.cvt_unpack %pair type "f16" : vector<2xi32> -> vector<4xf32>
  %sum = arith.addf %bf, %h : vector<4xf32>
  %s2 = vector.shuffle %sum, %sum [0, 3] : vector<4xf32>, vector<4xf32>
  sm90.st_global %out[%rows], %s2, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>
  sm90.st_global %out[%rows], %s2, %inside : vector<2xi64>, vector<2xf32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry reductions(
// CHECK:           @[[P:%p[0-9]+]] red.global.add.f32 [%rd{{[0-9]+}}], [[ONE:%f[0-9]+]];
// CHECK:           @[[P]] red.global.add.f32 [%rd{{[0-9]+}}+4], [[ONE2:%f[0-9]+]];
// CHECK:           mov.f32 [[OLD:%f[0-9]+]], 0f00000000;
// CHECK-NEXT:      @[[P]] atom.global.add.f32 [[OLD]], [%rd{{[0-9]+}}], {{%f[0-9]+}};
// CHECK-NOT:       mov.pred
// CHECK:           {{^ *}}red.global.add.f32 [%rd{{[0-9]+}}], {{%f[0-9]+}};
// CHECK:           {{^ *}}red.global.add.f32 [%rd{{[0-9]+}}+4], {{%f[0-9]+}};
// CHECK:           cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd0], [[[BUF:%r[0-9]+]]], 256;
// CHECK-NEXT:      // sm90.bulk_commit_group
// CHECK-NEXT:      cp.async.bulk.commit_group;
// CHECK-NEXT:      // sm90.bulk_wait_group 0 read
// CHECK-NEXT:      cp.async.bulk.wait_group.read 0;
// CHECK-NEXT:      // sm90.bulk_wait_group 0
// CHECK-NEXT:      cp.async.bulk.wait_group 0;
// CHECK:           stmatrix.sync.aligned.m8n8.x4.shared.b16 [[[BUF]]], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}};
// CHECK:           stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [[[BUF]]], {[[W0:%r[0-9]+]], [[W1:%r[0-9]+]]};
// CHECK:           shl.b32 %f{{[0-9]+}}, [[W0]], 16;
// CHECK-NEXT:      and.b32 %f{{[0-9]+}}, [[W0]], 0xffff0000;
// CHECK:           cvt.f32.f16 %f{{[0-9]+}}, [[W0]];
// CHECK-NEXT:      shr.b32 [[T:%r[0-9]+]], [[W0]], 16;
// CHECK-NEXT:      cvt.f32.f16 %f{{[0-9]+}}, [[T]];
// CHECK:           @[[P]] st.global.b32 [%rd{{[0-9]+}}], {{%f[0-9]+}};
// CHECK:           {{^ *}}st.global.b32 [%rd{{[0-9]+}}], {{%f[0-9]+}};
