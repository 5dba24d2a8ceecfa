// Cross-entropy of rows of logits X [M, V] f32 (any V) with integer labels L [M]: loss[m] = logsumexp(X[m, :]) -
// X[m, L[m]], and 0 where L[m] < 0 (PyTorch's ignore_index -100). One loop over column blocks of 64 keeps the
// online log-sum-exp (a running max and a rescaled sum, as online_softmax.mlir) and picks the label's logit on the
// way: tile.cmp eq of the block's column indices ([1x64], tile.iota cols) against the labels ([64] i32) gives a
// [64x64] mask, and tile.select + tile.row_sum take that one column. Columns past V read as 0 and are masked to
// -inf for the sum; no label points there. One block per 64 rows.
builtin.module {
  func.func @cross_entropy(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, V>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %LOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %lw = tile.view %L[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %lab = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %p_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %r:3 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %l_init, %p = %p_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
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
      %hit = tile.cmp eq %col, %lab : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
      %xs = tile.select %hit, %x, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
      %ps = tile.row_sum %xs : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %pn = tile.add %p, %ps : !tile.tile<64xf32, register>
      scf.yield %mn, %ln, %pn : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %lg = tile.log %r#1 : !tile.tile<64xf32, register>
    %lse = tile.add %r#0, %lg : !tile.tile<64xf32, register>
    %loss = tile.sub %lse, %r#2 : !tile.tile<64xf32, register>
    %zi = tile.fill 0 : !tile.tile<64xi32, register>
    %ign = tile.cmp lt %lab, %zi : !tile.tile<64xi32, register>
    %z64 = tile.fill 0.0 : !tile.tile<64xf32, register>
    %lossm = tile.select %ign, %z64, %loss : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>
    %ow = tile.view %LOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %lossm, %ow : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
