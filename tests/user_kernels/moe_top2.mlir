// A mixture-of-experts router's top-2 gate: for router logits X [M, E] f32 (E <= 64 experts, any; no NaN),
//   I1[i] = argmax_j X[i, j],  I2[i] = argmax_{j != I1[i]} X[i, j]   (the first index among equals, as NumPy),
//   W1[i] = sigmoid(X[i, I1] - X[i, I2]),  W2[i] = sigmoid(X[i, I2] - X[i, I1])   (the softmax of the two, which
// sum to 1), I1, I2 [M] i32, W1, W2 [M] f32. Columns past E are masked to -inf; with one expert the second
// pick is column 0 again with weight 0 (NumPy's argmax of a row of -inf). The first index of a row's maximum is
// the maximum of -column over the columns that hold it (tile.cmp against the row max, tile.select, tile.neg).
builtin.module {
  func.func @moe_top2(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, E>},
      %I1: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %I2: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %W1: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %W2: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %e = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %et = tile.splat %e : index -> !tile.tile<1x64xi32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %col = tile.iota cols : !tile.tile<1x64xi32, register>
    %inside = tile.cmp lt %col, %et : !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %xm = tile.select %inside, %x, %ninf : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %colf = tile.cast %col : !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %negc = tile.neg %colf : !tile.tile<1x64xf32, register>
    %miss = tile.fill -1.0e+09 : !tile.tile<64x64xf32, register>
    // the first pick
    %m1 = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %is1 = tile.cmp eq %xm, %m1 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %cand1 = tile.select %is1, %negc, %miss : !tile.tile<64x64xi1, register>, !tile.tile<1x64xf32, register>, !tile.tile<64x64xf32, register>
    %best1 = tile.row_max %cand1 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %i1f = tile.neg %best1 : !tile.tile<64xf32, register>
    %i1 = tile.cast %i1f : !tile.tile<64xf32, register> -> !tile.tile<64xi32, register>
    // the second: the first pick's column masked to -inf
    %hit1 = tile.cmp eq %col, %i1 : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
    %xm2 = tile.select %hit1, %ninf, %xm : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %m2 = tile.row_max %xm2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %is2 = tile.cmp eq %xm2, %m2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %cand2 = tile.select %is2, %negc, %miss : !tile.tile<64x64xi1, register>, !tile.tile<1x64xf32, register>, !tile.tile<64x64xf32, register>
    %best2 = tile.row_max %cand2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %i2f = tile.neg %best2 : !tile.tile<64xf32, register>
    %i2 = tile.cast %i2f : !tile.tile<64xf32, register> -> !tile.tile<64xi32, register>
    %d = tile.sub %m1, %m2 : !tile.tile<64xf32, register>
    %w1 = tile.sigmoid %d : !tile.tile<64xf32, register>
    %nd = tile.neg %d : !tile.tile<64xf32, register>
    %w2 = tile.sigmoid %nd : !tile.tile<64xf32, register>
    %i1w = tile.view %I1[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %i1, %i1w : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %i2w = tile.view %I2[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %i2, %i2w : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %w1w = tile.view %W1[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %w1, %w1w : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %w2w = tile.view %W2[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %w2, %w2w : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
