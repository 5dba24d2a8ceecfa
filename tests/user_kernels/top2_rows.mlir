// Top-2 of each row of X [M, N] (N <= 64, one column block; M any), as a MoE router picks two experts: the first
// index of the row maximum (NumPy's argmax tie-break), then that column masked to -inf and the argmax again (a tie
// of the maximum gives the next column holding it). Columns at or past N count as -inf; a row of -inf gives
// index 0 twice (the masked column is -inf too), as NumPy's argmax does.
builtin.module {
  func.func @top2_rows(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %I1: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %V1: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %I2: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %V2: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ni = arith.index_cast %n : index to i32
    %nt = tile.splat %ni : i32 -> !tile.tile<1x1xi32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %xr = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %cols = tile.iota cols : !tile.tile<1x64xi32, register>
    %past = tile.cmp ge %cols, %nt : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<1x1xf32, register>
    %far = tile.fill 64 : !tile.tile<1x1xi32, register>
    %x = tile.select %past, %ninf, %xr : !tile.tile<1x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
    %m1 = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %at1 = tile.cmp eq %x, %m1 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %c1 = tile.select %at1, %cols, %far : !tile.tile<64x64xi1, register>, !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %i1 = tile.row_min %c1 : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %hit = tile.cmp eq %cols, %i1 : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
    %x2 = tile.select %hit, %ninf, %x : !tile.tile<64x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
    %m2 = tile.row_max %x2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %at2 = tile.cmp eq %x2, %m2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %c2 = tile.select %at2, %cols, %far : !tile.tile<64x64xi1, register>, !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %i2 = tile.row_min %c2 : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %w1 = tile.view %I1[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %i1, %w1 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %w2 = tile.view %V1[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %m1, %w2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %w3 = tile.view %I2[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %i2, %w3 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %w4 = tile.view %V2[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %m2, %w4 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
