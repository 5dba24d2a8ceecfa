// LayerNorm backward, the weight gradients, a column reduction across thread blocks through atomics:
//   DGAMMA[j] = sum_i DY[i, j] (X[i, j] - MEAN[i]) RSTD[i],   DBETA[j] = sum_i DY[i, j],
// DY, X [M, N] f32 (any M, N), MEAN, RSTD [M]. Block (x, y) takes columns 64x.. and rows 64y..: it reads the
// transposed tiles DY^T, X^T [64 columns, 64 rows] with tile.gather at swapped coordinates (rows and columns
// past the tensor read as zero), sums each row (a column of DY) and adds the sums into DGAMMA and DBETA with
// tile.atomic_add, so the blocks of one column block reduce in whatever order they run.
builtin.module {
  func.func @layernorm_bwd_dw(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DGAMMA: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %DBETA: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64), ceildiv(M, 64)>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %n0 = arith.muli %bx, %c64 : index
    %m0 = arith.muli %by, %c64 : index
    %cols = tile.iota rows offset %n0 : !tile.tile<64x1xi32, register>
    %rows = tile.iota cols offset %m0 : !tile.tile<1x64xi32, register>
    %dyt = tile.gather %DY[%rows, %cols] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %xt = tile.gather %X[%rows, %cols] : !tile.tile<?x?xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x64xf32, register>
    %mean = tile.gather %MEAN[%rows] : !tile.tile<?xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %rstd = tile.gather %RSTD[%rows] : !tile.tile<?xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %xc = tile.sub %xt, %mean : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %xhat = tile.mul %xc, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %p = tile.mul %dyt, %xhat : !tile.tile<64x64xf32, register>
    %dg = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %db = tile.row_sum %dyt : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %dgw = tile.view %DGAMMA[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %dg, %dgw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %dbw = tile.view %DBETA[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %db, %dbw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
