// Cross-entropy of logits X [M, N] (N <= 128, any) against labels L [M] i32:
// loss[i] = logsumexp_j X[i, j] - X[i, L[i]]; also the log-softmax Y = X - logsumexp.
builtin.module {
  func.func @cross_entropy(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %LOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %col = tile.iota cols : !tile.tile<1x128xi32, register>
    %nt = tile.splat %n : index -> !tile.tile<1x128xi32, register>
    %outside = tile.cmp ge %col, %nt : !tile.tile<1x128xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x128xf32, register>
    %xm = tile.select %outside, %ninf, %x : !tile.tile<1x128xi1, register>, !tile.tile<64x128xf32, register>
    %m = tile.row_max %xm : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %e = tile.exp_subtract %xm, %m : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %s = tile.row_sum %e : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %ls = tile.log %s : !tile.tile<64xf32, register>
    %lse = tile.add %m, %ls : !tile.tile<64xf32, register>
    %y = tile.sub %x, %lse : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    %lw = tile.view %L[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %lab = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %hit = tile.cmp eq %col, %lab : !tile.tile<1x128xi32, register>, !tile.tile<64xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x128xf32, register>
    %picked = tile.select %hit, %x, %zero : !tile.tile<64x128xi1, register>, !tile.tile<64x128xf32, register>
    %xl = tile.row_sum %picked : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %loss = tile.sub %lse, %xl : !tile.tile<64xf32, register>
    %ow = tile.view %LOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %loss, %ow : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
