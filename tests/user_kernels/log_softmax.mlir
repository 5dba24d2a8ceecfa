// Log-softmax along rows of any length: Y = X - max_j X - log(sum_j exp(X - max_j X)), X and Y [M, N] f32, any
// M, N. One block per 64 rows makes two passes over blocks of 64 columns: the first carries the running max and
// the running sum of exponentials (rescaled by exp(old max - new max) when the max grows) as scf.for iter_args,
// columns past N masked to -inf; the second writes X - (max + log sum).
builtin.module {
  func.func @log_softmax(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %s_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %mx, %sum = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%m = %m_init, %s = %s_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bmax = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m2 = tile.element_max %m, %bmax : !tile.tile<64xf32, register>
      %d = tile.sub %xm, %m2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %e = tile.exp %d : !tile.tile<64x64xf32, register>
      %be = tile.row_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %dm = tile.sub %m, %m2 : !tile.tile<64xf32, register>
      %alpha = tile.exp %dm : !tile.tile<64xf32, register>
      %s2 = tile.fma %s, %alpha, %be : !tile.tile<64xf32, register>
      scf.yield %m2, %s2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %ls = tile.log %sum : !tile.tile<64xf32, register>
    %lse = tile.add %mx, %ls : !tile.tile<64xf32, register>
    scf.for %j = %c0 to %n_blocks step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %y = tile.sub %x, %lse : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    func.return
  }
}
