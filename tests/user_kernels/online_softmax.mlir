// Softmax of rows of any length N (a long vocabulary, never a multiple of the tile) with the online softmax
// written by hand: a first loop over 64-column blocks carries the running row max m and the running sum l
// (l = l exp(m_old - m_new) + sum exp(x - m_new), tile.exp_diff treating m_old = -inf as 0), a second loop
// writes Y = exp(x - m) / l. Columns past N are masked to -inf (they read as 0) with tile.iota, tile.cmp and
// tile.select. X [M, N] f32 -> Y [M, N] f32, LSE [M] = m + log(l).
builtin.module {
  func.func @online_softmax(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %LSE: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %stats:2 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %l_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %inside = tile.cmp lt %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %inside, %x, %ninf : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %bm : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %xm, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %ps = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %la = tile.mul %l, %alpha : !tile.tile<64xf32, register>
      %l_new = tile.add %la, %ps : !tile.tile<64xf32, register>
      scf.yield %m_new, %l_new : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %p = tile.exp_subtract %x, %stats#0 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %y = tile.div_rows %p, %stats#1 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    %logl = tile.log %stats#1 : !tile.tile<64xf32, register>
    %lse = tile.add %stats#0, %logl : !tile.tile<64xf32, register>
    %lw = tile.view %LSE[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %lse, %lw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
