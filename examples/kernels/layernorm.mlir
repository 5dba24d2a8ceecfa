// LayerNorm of X [M, 64] f32 with scale gamma [64] and shift beta [64], one block per 64 rows:
//   Y[i, :] = (X[i, :] - mean_i) * rsqrt(var_i + 1e-5) * gamma + beta,
//   mean_i = sum_j X[i, j] / 64, var_i = sum_j (X[i, j] - mean_i)^2 / 64.
// Shows row reductions (tile.row_sum), row-vector broadcasting ([64x64] - [64]), column vectors loaded once
// (tile.load_broadcast to [1x64]) and tile.rsqrt. Rows past M are neither read nor written.
builtin.module {
  func.func @layernorm(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %gamma: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
      %beta: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %sum = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %mean = tile.scale %sum by 0.015625 : !tile.tile<64xf32, register>
    %xc = tile.sub %x, %mean : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %sq = tile.mul %xc, %xc : !tile.tile<64x64xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %var = tile.scale %ss by 0.015625 : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-05 : !tile.tile<64xf32, register>
    %ve = tile.add %var, %eps : !tile.tile<64xf32, register>
    %r = tile.rsqrt %ve : !tile.tile<64xf32, register>
    %xn = tile.mul %xc, %r : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %gw = tile.view %gamma[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    %g = tile.load_broadcast %gw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %bw = tile.view %beta[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    %bt = tile.load_broadcast %bw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %xg = tile.mul %xn, %g : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %y = tile.add %xg, %bt : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
