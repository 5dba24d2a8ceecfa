// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,compute-distinct-lanes,cse | filecheck %s

// ALiBi's slopes[h] * f32(kv_idx - q_idx) multiplying a [64, 64] tile. convert-tile-to-sm90 lowers the difference
// of a column iota and a row iota as the thread's 18 distinct (column - row) offsets (16 columns, the second
// row's two new ones) and a view of them; compute-distinct-lanes then makes the gather at the splat head one
// load, and the product 18 registers: the only [64, 64] op left (32 registers a thread) is the product with the
// tile. (Added to a tile, the product is computed 8 registers at a time instead, each register's offset rebuilt
// from the thread's scalar: convert-tile-to-sm90-scaled-diagonal.mlir.)
func.func @alibi(%slopes: !tile.tile<4xf32, global> {tile.dims = #tile.dims<4>},
                 %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                 %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<4>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %pid = tile.program_id x : index
  %h = tile.splat %pid : index -> !tile.tile<64xi32, register>
  %kv = tile.iota cols : !tile.tile<1x64xi32, register>
  %kvf = tile.cast %kv : !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
  %q = tile.iota rows : !tile.tile<64xi32, register>
  %qf = tile.cast %q : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
  %d = tile.sub %kvf, %qf : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, register>
  %slope = tile.gather %slopes[%h] : !tile.tile<4xf32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
  %bias = tile.mul %slope, %d : !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>
  %y = tile.mul %x, %bias : !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @alibi(
// CHECK-NOT:  arith.subf
// CHECK:      %[[DIAG:.*]] = arith.constant dense<[-8, -7, 0, 1, 8, 9, 16, 17, 24, 25, 32, 33, 40, 41, 48, 49, 56, 57]> : vector<18xi32>
// CHECK-NEXT: %[[I:.*]] = arith.addi %{{.*}}, %[[DIAG]] : vector<18xi32>
// CHECK-NEXT: %d = sm90.cvt %[[I]] {sm90.distinct_lanes} : vector<18xi32> -> vector<18xf32>
// CHECK-NEXT: %d_1 = vector.shuffle %d, %d [2, 3, 0, 1, 4, 5, 2, 3, {{.*}}] : vector<18xf32>, vector<18xf32>
// CHECK:      sm90.setp "ge" %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<1xi32> -> vector<1xi1>
// CHECK:      %slope = sm90.ld_global %slopes_ptr[%{{.*}}], %{{.*}} {sm90.invariant, sm90.distinct_lanes} : vector<1xi32>, vector<1xi1> -> vector<1xf32>
// CHECK:      %bias = arith.mulf %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<18xf32>
// CHECK-NEXT: %[[BIAS:.*]] = vector.shuffle %bias, %bias [0, 1, 2, 3, 4, 5, 0, 1, 6, 7, {{.*}}] : vector<18xf32>, vector<18xf32>
// CHECK-NEXT: %y = arith.mulf %x, %[[BIAS]] : vector<32xf32>


// Only what reads a marked value (a tile.splat's broadcast, an index diagonal) or a value this pass computed
// is computed on distinct registers: a kernel's own row-vector arithmetic (a constant over a row vector's
// view, as the dense kernels' bounds tests and scales) keeps its lowering.
func.func @unmarked(%s: vector<16xf32>, %row: vector<2xf32>, %n: i32, %p: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 128 : i64, smem_bytes = 0 : i64}} {
  %q = vector.shuffle %row, %row [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1] : vector<2xf32>, vector<2xf32>
  %two = arith.constant dense<2.0> : vector<16xf32>
  %e = arith.mulf %q, %two : vector<16xf32>
  %b = vector.broadcast %n {sm90.distinct_lanes} : i32 to vector<16xi32>
  %off = arith.constant dense<[0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28]> : vector<16xi32>
  %a = arith.addi %b, %off : vector<16xi32>
  %f = arith.addf %s, %e : vector<16xf32>
  %mask = arith.constant dense<true> : vector<16xi1>
  sm90.st_global %p[%a], %f, %mask : vector<16xi32>, vector<16xf32>, vector<16xi1>
  func.return
}

// CHECK-LABEL: func.func @unmarked(
// CHECK:      %e = arith.mulf %q, %two : vector<16xf32>
// CHECK:      %a = arith.addi %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<8xi32>
// CHECK-NEXT: %{{.*}} = vector.shuffle %a, %a [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7] : vector<8xi32>, vector<8xi32>
// CHECK:      %f = arith.addf %s, %e : vector<16xf32>
