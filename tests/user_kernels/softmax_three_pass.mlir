// Softmax over rows as long as a vocabulary (1,000 or GPT-2's 50,257 columns) in three passes over 64-column
// blocks: X [M, N] bf16, Y [M, N] f32, any M, N. Pass one takes each row's max, pass two sums exp(x - max) (columns
// past N masked to -inf, whose exp is 0), pass three writes exp(x - max) / sum. A row is read three times and
// nothing is carried but two row vectors, the straightforward form a user writes before the online one.
builtin.module {
  func.func @softmax_three_pass(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %s_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %mx = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%m = %m_init) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bmax = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m2 = tile.element_max %m, %bmax : !tile.tile<64xf32, register>
      scf.yield %m2 : !tile.tile<64xf32, register>
    }
    %sum = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%s = %s_init) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %d = tile.sub %xm, %mx : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %e = tile.exp %d : !tile.tile<64x64xf32, register>
      %be = tile.row_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %s2 = tile.add %s, %be : !tile.tile<64xf32, register>
      scf.yield %s2 : !tile.tile<64xf32, register>
    }
    scf.for %j = %c0 to %n_blocks step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %d = tile.sub %x, %mx : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %e = tile.exp %d : !tile.tile<64x64xf32, register>
      %y = tile.div %e, %sum : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    func.return
  }
}
