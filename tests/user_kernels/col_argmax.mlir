// Per-column argmax of X [M, N] f32, M <= 64 (one row block): I[0, j] = the first row holding the column's maximum.
// tile.col_max, tile.cmp eq against it, tile.select of the row index (64 elsewhere), tile.col_min on i32.
builtin.module {
  func.func @col_argmax(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %I: !tile.tile<1x?xi32, global> {tile.dims = #tile.dims<1, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %xw = tile.view %X[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %row = tile.iota rows : !tile.tile<64x64xi32, register>
    %rv = tile.iota rows : !tile.tile<64xi32, register>
    %past = tile.cmp ge %rv, %mt : !tile.tile<64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %xm = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x64xf32, register>
    %mx = tile.col_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %hit = tile.cmp eq %xm, %mx : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %big = tile.fill 64 : !tile.tile<64x64xi32, register>
    %cand = tile.select %hit, %row, %big : !tile.tile<64x64xi1, register>, !tile.tile<64x64xi32, register>
    %arg = tile.col_min %cand : !tile.tile<64x64xi32, register> -> !tile.tile<1x64xi32, register>
    %iw = tile.view %I[%c0, %n0] : !tile.tile<1x?xi32, global> -> !tile.tile<1x64xi32, global>
    tile.store_global %arg, %iw : !tile.tile<1x64xi32, register>, !tile.tile<1x64xi32, global>
    func.return
  }
}
