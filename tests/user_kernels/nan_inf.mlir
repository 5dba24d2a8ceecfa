// Special values through every kind of op, as NumPy computes them: X [M, 64] f32 holding NaN, +-inf, +-0 and
// finite values (no subnormals: the .ftz instructions flush them). Outputs (each [M, 64] f32 unless said):
//   MAXZ = maximum(X, 0) (a ReLU: NaN stays NaN, as np.maximum), MINZ = minimum(X, 0),
//   ABSN = -|X|, SQ = X * X, DIV = 1 / X (IEEE: 1/0 = inf, 1/-0 = -inf), EXP = exp(X),
//   SEL = where(X > 0, X, 0.5) (NaN compares false), RMAX [M] = max over the row (np.max: NaN propagates),
//   RSUM [M] = sum over the row (NaN or inf - inf give NaN).
builtin.module {
  func.func @nan_inf(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %MAXZ: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %MINZ: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %ABSN: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %SQ: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %DIV: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %EXP: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %SEL: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %RMAX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %RSUM: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %half = tile.fill 0.5 : !tile.tile<64x64xf32, register>
    %maxz = tile.element_max %x, %zero : !tile.tile<64x64xf32, register>
    %minz = tile.element_min %x, %zero : !tile.tile<64x64xf32, register>
    %ab = tile.abs %x : !tile.tile<64x64xf32, register>
    %absn = tile.neg %ab : !tile.tile<64x64xf32, register>
    %sq = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %div = tile.div %one, %x : !tile.tile<64x64xf32, register>
    %exp = tile.exp %x : !tile.tile<64x64xf32, register>
    %pos = tile.cmp gt %x, %zero : !tile.tile<64x64xf32, register>
    %sel = tile.select %pos, %x, %half : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %rmax = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %rsum = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %w1 = tile.view %MAXZ[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %maxz, %w1 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w2 = tile.view %MINZ[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %minz, %w2 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w3 = tile.view %ABSN[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %absn, %w3 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w4 = tile.view %SQ[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %sq, %w4 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w5 = tile.view %DIV[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %div, %w5 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w6 = tile.view %EXP[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %exp, %w6 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w7 = tile.view %SEL[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %sel, %w7 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w8 = tile.view %RMAX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rmax, %w8 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %w9 = tile.view %RSUM[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rsum, %w9 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
