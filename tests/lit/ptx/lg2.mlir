// RUN: python -m tessera.ptx %s | filecheck %s

// sm90.lg2_approx prints as lg2.approx.ftz.f32, one instruction per register.

func.func @lg2(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
  %tid = sm90.special "tid.x" : index
  %t = arith.index_cast %tid : index to i32
  %x = arith.sitofp %t : i32 to f32
  %v = vector.broadcast %x : f32 to vector<2xf32>
  %l = sm90.lg2_approx %v : vector<2xf32>
  %t64 = arith.index_cast %tid : index to i64
  %c8 = arith.constant 8 : i64
  %row = arith.muli %t64, %c8 : i64
  %rows = vector.broadcast %row : i64 to vector<2xi64>
  %cols = arith.constant dense<[0, 4]> : vector<2xi64>
  %offs = arith.addi %rows, %cols : vector<2xi64>
  %all = arith.constant dense<true> : vector<2xi1>
  sm90.st_global %out[%offs], %l, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry lg2(
// CHECK:           lg2.approx.ftz.f32 [[A:%f[0-9]+]], [[X:%f[0-9]+]];
// CHECK-NEXT:      lg2.approx.ftz.f32 [[B:%f[0-9]+]], [[X]];
// CHECK:           st.global.b32 [{{%rd[0-9]+}}], [[A]];
