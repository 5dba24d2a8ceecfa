// LayerNorm forward over rows of any length N <= 128: X [M, N] f32, gamma, beta [N] f32;
// Y = (X - mean) * rstd * gamma + beta, MEAN [M] and RSTD [M] = 1 / sqrt(var + 1e-5) saved for the backward.
// Columns past N read as zero; they count in no sum (the centred values are masked to zero before squaring).
// 1 / N is a scalar computed with arith (index_cast, uitofp, divf) and spread with tile.splat.
builtin.module {
  func.func @layernorm_fwd(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %gamma: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %beta: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %one = arith.constant 1.0 : f32
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ni = arith.index_cast %n : index to i32
    %nf = arith.uitofp %ni : i32 to f32
    %inv_n = arith.divf %one, %nf : f32
    %inv = tile.splat %inv_n : f32 -> !tile.tile<64xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %sum = tile.row_sum %x : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %mean = tile.mul %sum, %inv : !tile.tile<64xf32, register>
    %xc0 = tile.sub %x, %mean : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %col = tile.iota cols : !tile.tile<1x128xi32, register>
    %nt = tile.splat %n : index -> !tile.tile<1x128xi32, register>
    %inside = tile.cmp lt %col, %nt : !tile.tile<1x128xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x128xf32, register>
    %xc = tile.select %inside, %xc0, %zero : !tile.tile<1x128xi1, register>, !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, register>
    %sq = tile.mul %xc, %xc : !tile.tile<64x128xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %var = tile.mul %ss, %inv : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-05 : !tile.tile<64xf32, register>
    %ve = tile.add %var, %eps : !tile.tile<64xf32, register>
    %rstd = tile.rsqrt %ve : !tile.tile<64xf32, register>
    %xn = tile.mul %xc, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %gw = tile.view %gamma[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %g = tile.load_broadcast %gw : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %bw = tile.view %beta[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %bt = tile.load_broadcast %bw : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %xg = tile.mul %xn, %g : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %y = tile.add %xg, %bt : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    %mw = tile.view %MEAN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mean, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rstd, %rw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
