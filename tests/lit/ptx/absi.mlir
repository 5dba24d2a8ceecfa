// RUN: python -m tessera.ptx %s | filecheck %s

// math.absi of i32 registers prints as abs.s32, one instruction per register (the most negative value is
// itself, as the IR's integers wrap), not max(x, 0 - x).

func.func @absi(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
  %tid = sm90.special "tid.x" : index
  %t = arith.index_cast %tid : index to i32
  %v = vector.broadcast %t : i32 to vector<2xi32>
  %lanes = arith.constant dense<[-16, 3]> : vector<2xi32>
  %d = arith.addi %v, %lanes : vector<2xi32>
  %a = math.absi %d : vector<2xi32>
  %t64 = arith.index_cast %tid : index to i64
  %c8 = arith.constant 8 : i64
  %row = arith.muli %t64, %c8 : i64
  %rows = vector.broadcast %row : i64 to vector<2xi64>
  %cols = arith.constant dense<[0, 4]> : vector<2xi64>
  %offs = arith.addi %rows, %cols : vector<2xi64>
  %all = arith.constant dense<true> : vector<2xi1>
  sm90.st_global %out[%offs], %a, %all : vector<2xi64>, vector<2xi32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry absi(
// CHECK:           abs.s32 [[A:%r[0-9]+]], {{%r[0-9]+}};
// CHECK-NEXT:      abs.s32 [[B:%r[0-9]+]], {{%r[0-9]+}};
// CHECK-NOT:       max.s32
// CHECK:           st.global.b32 [{{%rd[0-9]+}}], [[A]];
