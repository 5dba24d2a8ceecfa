// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// Instruction selection of the elementwise ops on a thread's 32 registers of a [64, 64] f32 tile: tanh, rsqrt
// and sqrt one instruction per register; a row vector [64] (2 registers) shuffled onto the registers of each
// row before the IEEE division; iota from the thread's base row/column (the accumulator layout) plus each
// register's constant offset; a column vector [1, 64] meets the [64, 64] tile as it is; cmp/select are
// setp/selp per register.

func.func @epilogue(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                    %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %t = tile.tanh %x : !tile.tile<64x64xf32, register>
  %r = tile.rsqrt %t : !tile.tile<64x64xf32, register>
  %s = tile.sqrt %r : !tile.tile<64x64xf32, register>
  %m = tile.row_max %s : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
  %d = tile.div %s, %m : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %i = tile.iota rows : !tile.tile<64x64xi32, register>
  %j = tile.iota cols : !tile.tile<1x64xi32, register>
  %p = tile.cmp lt %j, %i : !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>
  %y = tile.select %p, %d, %x : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %t = sm90.tanh_approx %x : vector<32xf32>
// CHECK-NEXT: %r = sm90.rsqrt_approx %t : vector<32xf32>
// CHECK-NEXT: %s = math.sqrt %r : vector<32xf32>
// CHECK:      %[[ROWS:.*]] = vector.shuffle %m, %m [0, 0, 1, 1, 0, 0, 1, 1, {{.*}}] : vector<2xf32>, vector<2xf32>
// CHECK-NEXT: %d = arith.divf %s, %[[ROWS]] : vector<32xf32>
// CHECK-NEXT: %[[R0:.*]] = arith.index_cast %row_base : index to i32
// CHECK-NEXT: %[[RB:.*]] = vector.broadcast %[[R0]] : i32 to vector<32xi32>
// CHECK-NEXT: %[[ROFF:.*]] = arith.constant dense<[0, 0, 8, 8, 0, 0, 8, 8, {{.*}}]> : vector<32xi32>
// CHECK-NEXT: %i = arith.addi %[[RB]], %[[ROFF]] : vector<32xi32>
// CHECK-NEXT: %[[C0:.*]] = arith.index_cast %col_base : index to i32
// CHECK-NEXT: %[[CB:.*]] = vector.broadcast %[[C0]] : i32 to vector<32xi32>
// CHECK-NEXT: %[[COFF:.*]] = arith.constant dense<[0, 1, 0, 1, 8, 9, 8, 9, {{.*}}]> : vector<32xi32>
// CHECK-NEXT: %j = arith.addi %[[CB]], %[[COFF]] : vector<32xi32>
// CHECK-NEXT: %p = sm90.setp "lt" %j, %i : vector<32xi32> -> vector<32xi1>
// CHECK-NEXT: %y = sm90.selp %p, %d, %x : vector<32xi1>, vector<32xf32>

// PTX-COUNT-32: tanh.approx.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: rsqrt.approx.ftz.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: sqrt.rn.f32 %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: div.rn.f32 %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}};
// PTX-COUNT-32: setp.lt.s32 %p{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}};
// PTX-COUNT-32: selp.f32 %f{{[0-9]+}}, %f{{[0-9]+}}, %f{{[0-9]+}}, %p{{[0-9]+}};
