// LayerNorm backward, the input gradient, over rows of any length N <= 128: given DY, X [M, N] f32, gamma [N],
// and the forward's MEAN, RSTD [M], with xhat = (X - mean) rstd and g = DY gamma,
//   DX = rstd (g - mean_j(g) - xhat mean_j(g xhat)).
// Columns past N read as zero, so g is zero there and they add nothing to either mean. mean and rstd are row
// vectors loaded from 1-D windows; gamma a column vector. 1 / N is a tile.div of ones by the splat of N.
builtin.module {
  func.func @layernorm_bwd_dx(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %gamma: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ni = tile.splat %n : index -> !tile.tile<64xi32, register>
    %nf = tile.cast %ni : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %ones = tile.fill 1.0 : !tile.tile<64xf32, register>
    %inv = tile.div %ones, %nf : !tile.tile<64xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %dyw = tile.view %DY[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %meanw = tile.view %MEAN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %mean = tile.load %meanw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %rstdw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %rstd = tile.load %rstdw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %gw = tile.view %gamma[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %gm = tile.load_broadcast %gw : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %xc = tile.sub %x, %mean : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %xhat = tile.mul %xc, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %g = tile.mul %dy, %gm : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %gs = tile.row_sum %g : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %c1 = tile.mul %gs, %inv : !tile.tile<64xf32, register>
    %gx = tile.mul %g, %xhat : !tile.tile<64x128xf32, register>
    %gxs = tile.row_sum %gx : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %c2 = tile.mul %gxs, %inv : !tile.tile<64xf32, register>
    %t1 = tile.sub %g, %c1 : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %t2 = tile.mul %xhat, %c2 : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %t3 = tile.sub %t1, %t2 : !tile.tile<64x128xf32, register>
    %dx = tile.mul %t3, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %dxw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %dx, %dxw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    func.return
  }
}
