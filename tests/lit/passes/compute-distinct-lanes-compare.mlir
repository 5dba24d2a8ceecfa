// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,compute-distinct-lanes,cse | filecheck %s

// A compare of kv_idx - q_idx with a constant is one setp a register of the thread's scalar against an
// immediate (convert-tile-to-sm90-uniform-bound.mlir). Where its users compute on the thread's distinct offsets
// (T5's `(kv_idx - q_idx > 0) * 16` added to a bucket made of the difference, then a gather at it), the setp is
// computed on the 18 distinct immediates too (64 keys), and so are the select, the bucket and the gather: 18
// loads, not 32. Where it masks a tile (a select on x), it stays a setp a register: a predicate per distinct
// offset would outlive the seven a thread has.
func.func @bucket(%table: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
                  %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                  %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %kv = tile.iota cols : !tile.tile<1x64xi32, register>
  %q = tile.iota rows : !tile.tile<64xi32, register>
  %d = tile.sub %kv, %q : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
  %zero = tile.splat %c0 : index -> !tile.tile<64xi32, register>
  %one = tile.splat %c1 : index -> !tile.tile<64xi32, register>
  %sixteen = tile.splat %c16 : index -> !tile.tile<64xi32, register>
  %after = tile.cmp gt %d, %zero : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %half = tile.select %after, %one, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>
  %offset = tile.mul %half, %sixteen : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %bucket = tile.add %offset, %d : !tile.tile<64x64xi32, register>
  %bias = tile.gather %table[%bucket] : !tile.tile<64xf32, global>, !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
  %y = tile.add %x, %bias : !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @bucket(
// CHECK:      %after = sm90.setp "gt" %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<18xi32> -> vector<18xi1>
// CHECK:      %half = sm90.selp %{{.*}}, %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<18xi1>, vector<18xi32>
// CHECK:      %bias = sm90.ld_global %table_ptr[%{{.*}}], %{{.*}} {sm90.invariant, sm90.distinct_lanes} : vector<18xi32>, vector<18xi1> -> vector<18xf32>

func.func @mask(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %kv = tile.iota cols : !tile.tile<1x64xi32, register>
  %q = tile.iota rows : !tile.tile<64xi32, register>
  %d = tile.sub %kv, %q : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
  %zero = tile.splat %c0 : index -> !tile.tile<64xi32, register>
  %after = tile.cmp gt %d, %zero : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %hidden = tile.fill -1.0 : !tile.tile<64xf32, register>
  %y = tile.select %after, %hidden, %x : !tile.tile<64x64xi1, register>, !tile.tile<64xf32, register>, !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @mask(
// CHECK:      %after = sm90.setp "gt" %{{.*}}, %{{.*}} : vector<32xi32> -> vector<32xi1>
// CHECK:      %y = sm90.selp %after, %{{.*}}, %x : vector<32xi1>, vector<32xf32>
