// Cross-entropy with label smoothing and an ignored label, PyTorch's cross_entropy(X, L, label_smoothing=0.1,
// ignore_index=-100, reduction="none") over a vocabulary of any length V:
//   LOSS[i] = lse_i - 0.9 X[i, L[i]] - 0.1 mean_j X[i, j],  lse_i = log sum_j exp X[i, j],
// and LOSS[i] = 0 where L[i] = -100. X [M, V] bf16, L [M] i32, LOSS [M] f32; any M, V. One pass over 64-column
// blocks carries four row vectors: the running max and sum of the log-sum-exp, the label's logit (picked in the
// block that holds it) and the row's sum of logits (columns past V read as 0: masked for the max only). The mean
// divides by V, splat from tile.dim and cast to f32.
builtin.module {
  func.func @xent_label_smoothing(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, V>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %LOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
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
    %st:4 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %z_init, %xl = %z_init, %xs = %z_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
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
      %l_new = tile.fma %l, %alpha, %ps : !tile.tile<64xf32, register>
      %hit = tile.cmp eq %col, %lab : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
      %picked = tile.select %hit, %x, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %pk = tile.row_sum %picked : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %xl_new = tile.add %xl, %pk : !tile.tile<64xf32, register>
      %bs = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %xs_new = tile.add %xs, %bs : !tile.tile<64xf32, register>
      scf.yield %m_new, %l_new, %xl_new, %xs_new : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %logl = tile.log %st#1 : !tile.tile<64xf32, register>
    %lse = tile.add %st#0, %logl : !tile.tile<64xf32, register>
    %vi = tile.splat %v : index -> !tile.tile<64xi32, register>
    %vf = tile.cast %vi : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %mean = tile.div %st#3, %vf : !tile.tile<64xf32, register>
    %smooth = tile.scale %mean by 0.1 : !tile.tile<64xf32, register>
    %target = tile.scale %st#2 by 0.9 : !tile.tile<64xf32, register>
    %l1 = tile.sub %lse, %target : !tile.tile<64xf32, register>
    %loss = tile.sub %l1, %smooth : !tile.tile<64xf32, register>
    %ignore = tile.fill -100 : !tile.tile<64xi32, register>
    %ignored = tile.cmp eq %lab, %ignore : !tile.tile<64xi32, register>
    %rzero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %out = tile.select %ignored, %rzero, %loss : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    %ow = tile.view %LOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %out, %ow : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
