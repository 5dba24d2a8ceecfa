// Softmax over rows of any length, X [M, N] f32 (N = 1000 or 1: any N), and each row's log-sum-exp LSE [M].
// Pass 1 loops over column blocks of 64 keeping a running max m and sum l (the online softmax:
// l = l exp(m_old - m_new) + sum exp(x - m_new)); pass 2 loops again and writes exp(x - m) / l.
// Columns past N read as 0 (a window past the tensor), so pass 1 masks them to -inf with tile.iota cols
// (offset by the block's first column), tile.cmp against N (tile.splat of tile.dim) and tile.select;
// pass 2 needs no mask, since its stores past N are dropped. One block per 64 rows.
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
    %ml:2 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %l_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %out = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %out, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %mn = tile.element_max %m, %bm : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %mn : !tile.tile<64xf32, register>
      %e = tile.exp_subtract %xm, %mn : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %es = tile.row_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %la = tile.mul %l, %alpha : !tile.tile<64xf32, register>
      %ln = tile.add %la, %es : !tile.tile<64xf32, register>
      scf.yield %mn, %ln : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %d = tile.sub %x, %ml#0 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %e = tile.exp %d : !tile.tile<64x64xf32, register>
      %y = tile.div %e, %ml#1 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    %lg = tile.log %ml#1 : !tile.tile<64xf32, register>
    %lse = tile.add %ml#0, %lg : !tile.tile<64xf32, register>
    %lw = tile.view %LSE[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %lse, %lw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
