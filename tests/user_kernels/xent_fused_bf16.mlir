// Cross-entropy forward and backward in one kernel, as a fused LM-head loss writes it (the logits' gradient
// written over a vocabulary of any length in the logits' own precision): for bf16 logits X [M, V], labels L [M]
// i32 (-100: ignored) and the mean over the n rows not ignored (n = COUNT[0], an f32 given by the caller),
//   LOSS[i] = lse_i - x[i, L[i]]  (0 where ignored),
//   DX[i, j] = bf16((softmax(x_i)_j - [j = L[i]]) / n)  (0 where ignored).
// One block per 64 rows, two passes over 64-column blocks: the online log-sum-exp with the label's logit picked
// in the same loop (tile.cmp eq of the column index against the label, tile.select, tile.row_sum), then the
// gradient. Columns past V are -inf in the first pass and not stored in the second.
builtin.module {
  func.func @xent_fused_bf16(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, V>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %COUNT: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>},
      %LOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %DX: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, V>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %v = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %nb = arith.ceildivui %v, %c64 : index
    %vt = tile.splat %v : index -> !tile.tile<1x1xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<1x1xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %ignore = tile.fill -100 : !tile.tile<1x1xi32, register>
    %lw = tile.view %L[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %label = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %cw = tile.view %COUNT[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
    %count = tile.load_broadcast %cw : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %z_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %r:3 = scf.for %j = %c0 to %nb step %c1 iter_args(%m = %m_init, %l = %z_init, %picked = %z_init)
        -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x0 = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %outside = tile.cmp ge %col, %vt : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
      %x = tile.select %outside, %ninf, %x0 : !tile.tile<1x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m_new = tile.element_max %m, %bm : !tile.tile<64xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<64xf32, register>
      %p = tile.exp_subtract %x, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %ps = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %l_new = tile.fma %alpha, %l, %ps : !tile.tile<64xf32, register>
      %hit = tile.cmp eq %col, %label : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
      %xl = tile.select %hit, %x0, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
      %xls = tile.row_sum %xl : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %picked2 = tile.add %picked, %xls : !tile.tile<64xf32, register>
      scf.yield %m_new, %l_new, %picked2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %logl = tile.log %r#1 : !tile.tile<64xf32, register>
    %lse = tile.add %r#0, %logl : !tile.tile<64xf32, register>
    %loss0 = tile.sub %lse, %r#2 : !tile.tile<64xf32, register>
    %ignored1 = tile.cmp eq %label, %ignore : !tile.tile<64xi32, register>, !tile.tile<1x1xi32, register>
    %ignored = tile.reshape %ignored1 : !tile.tile<64x1xi1, register> -> !tile.tile<64xi1, register>
    %loss = tile.select %ignored, %z_init, %loss0 : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    %lossw = tile.view %LOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %loss, %lossw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %inv0 = tile.reciprocal %count : !tile.tile<1x1xf32, register>
    %inv1 = tile.select %ignored1, %zero, %inv0 : !tile.tile<64x1xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<1x1xf32, register>
    %inv = tile.reshape %inv1 : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %p = tile.exp_subtract %x, %lse : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %hit = tile.cmp eq %col, %label : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
      %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
      %onehot = tile.select %hit, %one, %zero : !tile.tile<64x64xi1, register>, !tile.tile<1x1xf32, register>, !tile.tile<1x1xf32, register>
      %g0 = tile.sub %p, %onehot : !tile.tile<64x64xf32, register>
      %g = tile.mul %g0, %inv : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %gb = tile.cast %g : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %dxw = tile.view %DX[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.store_global %gb, %dxw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    }
    func.return
  }
}
