// Cross-entropy over a vocabulary longer than any tile (a 32k-entry LM head's logits), one pass: for bf16 logits
// X [M, V] and labels L [M] i32, with the log-sum-exp carried online over 64-column blocks (running max m and
// sum l, l = l exp(m_old - m_new) + sum exp(x - m_new)) and the label's logit picked up in whichever block holds
// it (a select against the block's column coordinates, summed),
//   LSE[i] = log sum_j exp(X[i, j]),   LOSS[i] = LSE[i] - X[i, L[i]]   (f32 out; any M and V).
// Columns past V read as 0 and are masked to -inf. A label outside [0, V) picks nothing (LOSS = LSE).
builtin.module {
  func.func @xent_vocab(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, V>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %LOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %LSE: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %v = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %nb = arith.ceildivui %v, %c64 : index
    %vt = tile.splat %v : index -> !tile.tile<1x64xi32, register>
    %lw = tile.view %L[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %lab = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %z_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %st:3 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %z_init, %xl = %z_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %inside = tile.cmp lt %col, %vt : !tile.tile<1x64xi32, register>
      %xm = tile.select %inside, %x, %ninf : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %bm : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %xm, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %ps = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %la = tile.mul %l, %alpha : !tile.tile<64xf32, register>
      %l_new = tile.add %la, %ps : !tile.tile<64xf32, register>
      %hit = tile.cmp eq %col, %lab : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
      %picked = tile.select %hit, %x, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %pk = tile.row_sum %picked : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %xl_new = tile.add %xl, %pk : !tile.tile<64xf32, register>
      scf.yield %m_new, %l_new, %xl_new : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %logl = tile.log %st#1 : !tile.tile<64xf32, register>
    %lse = tile.add %st#0, %logl : !tile.tile<64xf32, register>
    %loss = tile.sub %lse, %st#2 : !tile.tile<64xf32, register>
    %ow = tile.view %LOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %loss, %ow : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %sw = tile.view %LSE[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %lse, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
