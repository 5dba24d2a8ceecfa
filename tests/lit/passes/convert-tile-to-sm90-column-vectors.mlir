// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// Column vectors [1, N] are held as each thread's N/4 distinct columns: a gather indexed by the key column
// (document masking's doc_ids[kv_idx]) loads 16 registers for a 64-column tile, not 32, and meets the [BM]
// row vector of the query rows' documents through shuffles (no instruction): one setp per register of the
// [64, 64] result. A column iota that meets an [BM, N] operand directly (kv_idx - q_idx) is laid out there as
// a whole [BM, N] tile, which the subtraction takes in place.

func.func @documents(%docs: !tile.tile<?xi32, global> {tile.dims = #tile.dims<n>},
                     %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                     %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"},
                     %D: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %kv = tile.iota cols : !tile.tile<1x64xi32, register>
  %q = tile.iota rows : !tile.tile<64xi32, register>
  %kd = tile.gather %docs[%kv] : !tile.tile<?xi32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xi32, register>
  %qd = tile.gather %docs[%q] : !tile.tile<?xi32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xi32, register>
  %same = tile.cmp eq %qd, %kd : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
  %inf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
  %y = tile.select %same, %x, %inf : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  %kv2 = tile.iota cols : !tile.tile<1x64xi32, register>
  %i = tile.iota rows : !tile.tile<64x64xi32, register>
  %d = tile.sub %kv2, %i : !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>
  %df = tile.cast %d : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
  %dw = tile.view %D[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %df, %dw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @documents(
// CHECK:      %[[CB:.*]] = vector.broadcast %{{.*}} : i32 to vector<16xi32>
// CHECK-NEXT: %[[COLS:.*]] = arith.constant dense<[0, 1, 8, 9, 16, 17, 24, 25, 32, 33, 40, 41, 48, 49, 56, 57]> : vector<16xi32>
// CHECK-NEXT: %kv = arith.addi %[[CB]], %[[COLS]] : vector<16xi32>
// CHECK:      %kd = sm90.ld_global %{{.*}}[%{{.*}}], %{{.*}} : vector<16xi32>, vector<16xi1> -> vector<16xi32>
// CHECK:      %qd = sm90.ld_global %{{.*}}[%{{.*}}], %{{.*}} : vector<2xi32>, vector<2xi1> -> vector<2xi32>
// CHECK-DAG:  %[[KD:.*]] = vector.shuffle %kd, %kd [0, 1, 0, 1, 2, 3, 2, 3, {{.*}}] : vector<16xi32>, vector<16xi32>
// CHECK-DAG:  %[[QD:.*]] = vector.shuffle %qd, %qd [0, 0, 1, 1, 0, 0, 1, 1, {{.*}}] : vector<2xi32>, vector<2xi32>
// CHECK:      %same = sm90.setp "eq" %[[QD]], %[[KD]] : vector<32xi32> -> vector<32xi1>
// CHECK:      %[[FULL:.*]] = arith.constant dense<[0, 1, 0, 1, 8, 9, 8, 9, {{.*}}]> : vector<32xi32>
// CHECK-NEXT: %kv2 = arith.addi %{{.*}}, %[[FULL]] : vector<32xi32>
// CHECK:      %d = arith.subi %kv2, %i : vector<32xi32>
