// RMSNorm backward over rows of any length N <= 128: given DY, X [M, N] f32, W [N] and the forward's RSTD [M]
// (rstd = 1 / sqrt(mean(x^2) + eps)), with xhat = X rstd and g = DY W,
//   DX = rstd (g - xhat mean_j(g xhat)),   DW[j] = sum_i DY[i, j] xhat[i, j]  (atomics across row blocks).
// Columns past N read as zero, so they add nothing to the mean. For DW each block reads its rows again
// transposed (tile.gather at swapped coordinates: DY^T, X^T in two [64 columns, 64 rows] halves, since a block's register
// tiles share one row count; RSTD as a [1, 64] row; outside the tensor reads 0), sums each row of DY^T xhat^T
// and adds the sums into DW with tile.atomic_add.
builtin.module {
  func.func @rmsnorm_bwd(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DW: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ni = arith.index_cast %n : index to i32
    %nf = arith.sitofp %ni : i32 to f32
    %one = arith.constant 1.0 : f32
    %inv_n = arith.divf %one, %nf : f32
    %inv = tile.splat %inv_n : f32 -> !tile.tile<64xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %dyw = tile.view %DY[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %rstd = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %ww = tile.view %W[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %xhat = tile.mul %x, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %g = tile.mul %dy, %w : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %gx = tile.mul %g, %xhat : !tile.tile<64x128xf32, register>
    %gxs = tile.row_sum %gx : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %c = tile.mul %gxs, %inv : !tile.tile<64xf32, register>
    %t = tile.mul %xhat, %c : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %d = tile.sub %g, %t : !tile.tile<64x128xf32, register>
    %dx = tile.mul %d, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %dxw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %dx, %dxw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    %rows = tile.iota cols offset %m0 : !tile.tile<1x64xi32, register>
    %rt = tile.gather %RSTD[%rows] : !tile.tile<?xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %cols0 = tile.iota rows offset %c0 : !tile.tile<64x1xi32, register>
    %dyt0 = tile.gather %DY[%rows, %cols0] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %xt0 = tile.gather %X[%rows, %cols0] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %xht0 = tile.mul %xt0, %rt : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %pt0 = tile.mul %dyt0, %xht0 : !tile.tile<64x64xf32, register>
    %dw0 = tile.row_sum %pt0 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %dww0 = tile.view %DW[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %dw0, %dww0 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %cols1 = tile.iota rows offset %c64 : !tile.tile<64x1xi32, register>
    %dyt1 = tile.gather %DY[%rows, %cols1] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %xt1 = tile.gather %X[%rows, %cols1] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %xht1 = tile.mul %xt1, %rt : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %pt1 = tile.mul %dyt1, %xht1 : !tile.tile<64x64xf32, register>
    %dw1 = tile.row_sum %pt1 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %dww1 = tile.view %DW[%c64] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %dw1, %dww1 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
