// Row max and first argmax of X [M, N] (N <= 128, any): V [M] f32 the max, I [M] i32 its first column.
builtin.module {
  func.func @row_argmax(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %V: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %I: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %col = tile.iota cols : !tile.tile<1x128xi32, register>
    %nt = tile.splat %n : index -> !tile.tile<1x128xi32, register>
    %outside = tile.cmp ge %col, %nt : !tile.tile<1x128xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x128xf32, register>
    %xm = tile.select %outside, %ninf, %x : !tile.tile<1x128xi1, register>, !tile.tile<64x128xf32, register>
    %m = tile.row_max %xm : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %hit = tile.cmp eq %xm, %m : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %colf = tile.cast %col : !tile.tile<1x128xi32, register> -> !tile.tile<1x128xf32, register>
    %negc = tile.neg %colf : !tile.tile<1x128xf32, register>
    %miss = tile.fill -1.0e+09 : !tile.tile<64x128xf32, register>
    %cand = tile.select %hit, %negc, %miss : !tile.tile<64x128xi1, register>, !tile.tile<1x128xf32, register>, !tile.tile<64x128xf32, register>
    %best = tile.row_max %cand : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %idxf = tile.neg %best : !tile.tile<64xf32, register>
    %idx = tile.cast %idxf : !tile.tile<64xf32, register> -> !tile.tile<64xi32, register>
    %vw = tile.view %V[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %m, %vw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %iw = tile.view %I[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %idx, %iw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    func.return
  }
}
