// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// A per-head window, q_idx - kv_idx < widths[h], on a [64, 64] tile: the bound is the same for every element
// (a gather at the splat head), so the compare is the thread's scalar less the bound, clamped to +-2^30, against
// one immediate a register (the difference's 18 distinct registers are not made); the same with the bound on
// the left. A bound that varies along the rows (widths[q_idx]) keeps the difference.
func.func @head_window(%widths: !tile.tile<4xi32, global> {tile.dims = #tile.dims<4>},
                       %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                       %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<4>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %pid = tile.program_id x : index
  %h = tile.splat %pid : index -> !tile.tile<64xi32, register>
  %kv = tile.iota cols : !tile.tile<1x64xi32, register>
  %q = tile.iota rows : !tile.tile<64xi32, register>
  %d = tile.sub %q, %kv : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
  %width = tile.gather %widths[%h] : !tile.tile<4xi32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xi32, register>
  %inside = tile.cmp lt %d, %width : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %behind = tile.cmp gt %width, %d : !tile.tile<64xi32, register>, !tile.tile<64x64xi32, register>
  %by_row = tile.gather %widths[%q] : !tile.tile<4xi32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xi32, register>
  %ragged = tile.cmp lt %d, %by_row : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
  %minus_inf = tile.fill -inf : !tile.tile<64xf32, register>
  %y0 = tile.select %inside, %x, %minus_inf : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %y1 = tile.select %behind, %y0, %minus_inf : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %y = tile.select %ragged, %y1, %minus_inf : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @head_window(
// CHECK:      %d = arith.addi %{{.*}}, %{{.*}} {sm90.distinct_lanes} : vector<18xi32>
// CHECK:      %[[W:.*]] = vector.extract %width[0] : i32 from vector<2xi32>
// CHECK-NEXT: %[[LO:.*]] = arith.constant -1073741824 : i32
// CHECK-NEXT: %[[UP:.*]] = arith.maxsi %[[W]], %[[LO]] : i32
// CHECK-NEXT: %[[HI:.*]] = arith.constant 1073741824 : i32
// CHECK-NEXT: %[[CLAMPED:.*]] = arith.minsi %[[UP]], %[[HI]] : i32
// CHECK-NEXT: %[[S:.*]] = arith.subi %{{.*}}, %[[CLAMPED]] : i32
// CHECK-NEXT: %[[SS:.*]] = vector.broadcast %[[S]] {sm90.distinct_lanes} : i32 to vector<32xi32>
// CHECK-NEXT: %[[IMM:.*]] = arith.constant dense<[0, 1, -8, -7, 8, 9, 0, 1, 16, 17, {{.*}}]> : vector<32xi32>
// CHECK-NEXT: %inside = sm90.setp "lt" %[[SS]], %[[IMM]] : vector<32xi32> -> vector<32xi1>
// CHECK:      %ragged = sm90.setp "lt" %d_1, %{{.*}} : vector<32xi32> -> vector<32xi1>
// CHECK:      %y0 = sm90.selp %inside, %x, %{{.*}} : vector<32xi1>, vector<32xf32>
// CHECK-NEXT: %y1 = sm90.selp %inside, %y0, %{{.*}} : vector<32xi1>, vector<32xf32>
