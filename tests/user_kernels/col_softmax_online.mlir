// Column softmax of X [M, N] f32 over rows of any length: Y[:, j] = softmax(X[:, j]). One block per 32 columns,
// two passes over the row blocks of 64: the first carries a running column max and a running sum rescaled by
// exp(old max - new max) ([1x32] iter_args from tile.col_max and tile.col_sum; rows past M selected to -inf),
// the second writes exp(x - max) / sum.
builtin.module {
  func.func @col_softmax(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
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
    %m_init = tile.fill 0xFF800000 : !tile.tile<1x32xf32, register>
    %s_init = tile.fill 0.0 : !tile.tile<1x32xf32, register>
    %st:2 = scf.for %i = %c0 to %mb step %c1 iter_args(%mx = %m_init, %s = %s_init) -> (!tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, register>) {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %row = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x32xf32, register>
      %bmx = tile.col_max %xm : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %mnew = tile.element_max %mx, %bmx : !tile.tile<1x32xf32, register>
      %dm = tile.sub %mx, %mnew : !tile.tile<1x32xf32, register>
      %alpha = tile.exp %dm : !tile.tile<1x32xf32, register>
      %d = tile.sub %xm, %mnew : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
      %e = tile.exp %d : !tile.tile<64x32xf32, register>
      %bs = tile.col_sum %e : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
      %sa = tile.mul %s, %alpha : !tile.tile<1x32xf32, register>
      %snew = tile.add %sa, %bs : !tile.tile<1x32xf32, register>
      scf.yield %mnew, %snew : !tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, register>
    }
    scf.for %i = %c0 to %mb step %c1 {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
      %d = tile.sub %x, %st#0 : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
      %e = tile.exp %d : !tile.tile<64x32xf32, register>
      %y = tile.div %e, %st#1 : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>
    }
    func.return
  }
}
