// tessera-run on a kernel whose only input has padded rows (64 * ceildiv(n, 64)) and whose output is sized by
// a launch size, n (the attention backward's postprocess): n is asked for, given with -d, and checked against
// the padded input; at target level it reaches the kernel as a parameter.

// RUN: not tessera-run %s 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: tessera-run: error: kernel @unpad needs sizes for n (-d n=...)

// RUN: tessera-run %s -d n=70 | filecheck %s --check-prefix=TILE
// TILE: @unpad [n=70]: grid (2, 1, 1), tile level, {{.*}} -> y[70, 16]

// RUN: tessera-run %s -d n=70 --level target | filecheck %s --check-prefix=TARGET
// TARGET: @unpad [n=70]: grid (2, 1, 1), target level ({{.*}}CTA simulator), {{.*}} -> y[70, 16]
func.func @unpad(%x: !tile.tile<?x16xf32, global> {tile.dims = #tile.dims<64 * ceildiv(n, 64), 16>},
                 %y: !tile.tile<?x16xf32, global> {tile.dims = #tile.dims<n, 16>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>, tile.launch_sizes = ["n"]} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %m = tile.program_id x : index
  %r0 = arith.muli %m, %c64 : index
  %xw = tile.view %x[%r0, %c0] in_bounds : !tile.tile<?x16xf32, global> -> !tile.tile<64x16xf32, global>
  %t = tile.load %xw : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
  %yw = tile.view %y[%r0, %c0] : !tile.tile<?x16xf32, global> -> !tile.tile<64x16xf32, global>
  tile.store_global %t, %yw : !tile.tile<64x16xf32, register>, !tile.tile<64x16xf32, global>
  func.return
}
