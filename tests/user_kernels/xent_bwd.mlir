// Softmax cross-entropy backward, as a user writes it after cross_entropy.mlir: logits X [M, N] f32 (N <= 128,
// any), labels L [M] i32 (-100: ignored, PyTorch's ignore_index), the loss's gradient DLOSS [M] f32;
// DX[i, j] = g[i] (softmax(X)[i, j] - [j == L[i]]) with g[i] = DLOSS[i], or 0 where L[i] = -100.
builtin.module {
  func.func @xent_bwd(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %DLOSS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %ignore = arith.constant -100 : i32
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
    %p = tile.div_rows %e, %s : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %lw = tile.view %L[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %lab = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %hit = tile.cmp eq %col, %lab : !tile.tile<1x128xi32, register>, !tile.tile<64xi32, register>
    %one = tile.fill 1.0 : !tile.tile<64x128xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x128xf32, register>
    %onehot = tile.select %hit, %one, %zero : !tile.tile<64x128xi1, register>, !tile.tile<64x128xf32, register>
    %d = tile.sub %p, %onehot : !tile.tile<64x128xf32, register>
    %gw = tile.view %DLOSS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %g = tile.load %gw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %it = tile.splat %ignore : i32 -> !tile.tile<64xi32, register>
    %skip = tile.cmp eq %lab, %it : !tile.tile<64xi32, register>
    %zg = tile.fill 0.0 : !tile.tile<64xf32, register>
    %gk = tile.select %skip, %zg, %g : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>
    %dx = tile.mul_rows %d, %gk : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %dw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %dx, %dw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    func.return
  }
}
