// A 1 x 1 grid: one thread block walks every 64-row chunk of X [M, N] f32 (any M, N <= 64) in its own loop and
// folds the chunks into 64 rows: SUM[r, j] = sum_c X[64 c + r, j] and MAX[r, j] = max_c X[64 c + r, j], rows past
// M masked to -inf for the maximum (-inf where no row of X folds into r, M < 64).
builtin.module {
  func.func @one_block_fold(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %SUM: !tile.tile<64x?xf32, global> {tile.dims = #tile.dims<64, N>, tile.role = "out"},
      %MAX: !tile.tile<64x?xf32, global> {tile.dims = #tile.dims<64, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1, 1>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %chunks = arith.ceildivui %m, %c64 : index
    %mt = tile.splat %m : index -> !tile.tile<64x1xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %r:2 = scf.for %c = %c0 to %chunks step %c1 iter_args(%s = %zero, %mx = %ninf) -> (!tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>) {
      %r0 = arith.muli %c, %c64 : index
      %xw = tile.view %X[%r0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %s_new = tile.add %s, %x : !tile.tile<64x64xf32, register>
      %row = tile.iota rows offset %r0 : !tile.tile<64x1xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<64x1xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<64x1xi1, register>, !tile.tile<64x64xf32, register>
      %mx_new = tile.element_max %mx, %xm : !tile.tile<64x64xf32, register>
      scf.yield %s_new, %mx_new : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    }
    %sw = tile.view %SUM[%c0, %c0] : !tile.tile<64x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %r#0, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %mw = tile.view %MAX[%c0, %c0] : !tile.tile<64x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %r#1, %mw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
