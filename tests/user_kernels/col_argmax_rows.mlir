// Column argmax of X [M, N] f32 over rows of any length: I[j] = the first row holding the column's maximum,
// V[j] = that maximum (1-D outputs). One block per 32 columns loops over row blocks of 64: tile.col_max of the
// block (rows past M -inf), the first row reaching it (tile.cmp eq, tile.select of tile.iota rows, an i32
// tile.col_min), kept where the block's max beats the running one (ties keep the earlier row).
builtin.module {
  func.func @col_argmax(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %I: !tile.tile<?xi32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %V: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 32)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 32 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %cbn : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %mb = arith.ceildivui %m, %cbm : index
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x32xf32, register>
    %big = tile.splat %m : index -> !tile.tile<64x32xi32, register>
    %v0 = tile.fill 0xFF800000 : !tile.tile<1x32xf32, register>
    %i0 = tile.fill 0 : !tile.tile<1x32xi32, register>
    %res:2 = scf.for %i = %c0 to %mb step %c1 iter_args(%bv = %v0, %bi = %i0) -> (!tile.tile<1x32xf32, register>, !tile.tile<1x32xi32, register>) {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %rv = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
      %past = tile.cmp ge %rv, %mt : !tile.tile<64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x32xf32, register>
      %mx = tile.col_max %xm : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %hit = tile.cmp eq %xm, %mx : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
      %row = tile.iota rows offset %m0 : !tile.tile<64x32xi32, register>
      %cand = tile.select %hit, %row, %big : !tile.tile<64x32xi1, register>, !tile.tile<64x32xi32, register>
      %arg = tile.col_min %cand : !tile.tile<64x32xi32, register> -> !tile.tile<1x32xi32, register>
      %better = tile.cmp gt %mx, %bv : !tile.tile<1x32xf32, register>
      %nv = tile.select %better, %mx, %bv : !tile.tile<1x32xi1, register>, !tile.tile<1x32xf32, register>
      %ni = tile.select %better, %arg, %bi : !tile.tile<1x32xi1, register>, !tile.tile<1x32xi32, register>
      scf.yield %nv, %ni : !tile.tile<1x32xf32, register>, !tile.tile<1x32xi32, register>
    }
    %iw = tile.view %I[%n0] : !tile.tile<?xi32, global> -> !tile.tile<32xi32, global>
    tile.store_global %res#1, %iw : !tile.tile<1x32xi32, register>, !tile.tile<32xi32, global>
    %vw = tile.view %V[%n0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %res#0, %vw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    func.return
  }
}
