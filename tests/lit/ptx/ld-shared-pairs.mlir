// RUN: python -m tessera.ptx %s | filecheck %s

// sm90.ld_shared of one address with column immediates: under `aligned` 8 (or more), two consecutive registers
// whose columns are c and c + 4, c a multiple of 8, load as one ld.shared.v2.b32 (the backward's LSE2 / dPsum
// columns 2t, 2t + 1, 2t + 8, ...); a column alone, or a pair starting off 8 bytes, stays ld.shared.b32; without
// the promise (or with 4) every register loads alone.

func.func @pairs(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<128, 8>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 1024 : i64}} {
  %tid = sm90.special "tid.x" : index
  %buf = sm90.shared_buffer "buf" offset 0 size 1024 align 1024 swizzle 0 : i32
  %t = arith.index_cast %tid : index to i32
  %c8 = arith.constant 8 : i32
  %off = arith.muli %t, %c8 : i32
  %addr = arith.addi %buf, %off : i32
  %a = sm90.ld_shared %addr {column_bytes = array<i32: 0, 4, 32, 36, 8, 20, 24, 44, 48, 52>, aligned = 8 : i64} : i32 -> vector<10xf32>
  %b = sm90.ld_shared %addr {column_bytes = array<i32: 0, 4>, aligned = 4 : i64} : i32 -> vector<2xf32>
  %c = sm90.ld_shared %addr {column_bytes = array<i32: 0, 4>} : i32 -> vector<2xf32>
  %t64 = arith.index_cast %tid : index to i64
  %c64 = arith.constant 64 : i64
  %base = arith.muli %t64, %c64 : i64
  %bv = vector.broadcast %base : i64 to vector<10xi64>
  %all = arith.constant dense<true> : vector<10xi1>
  %all2 = arith.constant dense<true> : vector<2xi1>
  %bv2 = vector.broadcast %base : i64 to vector<2xi64>
  sm90.st_global %out[%bv], %a, %all {column_bytes = array<i32: 0, 4, 8, 12, 16, 20, 24, 28, 32, 36>} : vector<10xi64>, vector<10xf32>, vector<10xi1>
  sm90.st_global %out[%bv2], %b, %all2 {column_bytes = array<i32: 40, 44>} : vector<2xi64>, vector<2xf32>, vector<2xi1>
  sm90.st_global %out[%bv2], %c, %all2 {column_bytes = array<i32: 48, 52>} : vector<2xi64>, vector<2xf32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry pairs(
// CHECK:           add.s32 [[ADDR:%r[0-9]+]],
// CHECK:           // %a = sm90.ld_shared
// CHECK-NEXT:      ld.shared.v2.b32 {%f{{[0-9]+}}, %f{{[0-9]+}}}, {{\[}}[[ADDR]]];
// CHECK-NEXT:      ld.shared.v2.b32 {%f{{[0-9]+}}, %f{{[0-9]+}}}, {{\[}}[[ADDR]]+32];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+8];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+20];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+24];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+44];
// CHECK-NEXT:      ld.shared.v2.b32 {%f{{[0-9]+}}, %f{{[0-9]+}}}, {{\[}}[[ADDR]]+48];
// CHECK:           // %b = sm90.ld_shared
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+4];
// CHECK:           // %c = sm90.ld_shared
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]];
// CHECK-NEXT:      ld.shared.b32 %f{{[0-9]+}}, {{\[}}[[ADDR]]+4];
