// RMSNorm of X [M, 64] f32 with weights W [64]: Y = X / sqrt(mean(X^2, row) + eps) * W. One block per 64 rows.
// The row length comes from the tensor (tile.dim) and reaches the tile as a splat of a scalar SSA value.
builtin.module {
  func.func @rmsnorm(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %W: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x64xf32, global>
    %n_i32 = arith.index_cast %n : index to i32
    %n_f32 = arith.sitofp %n_i32 : i32 to f32
    %eps = arith.constant 1.0e-05 : f32
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %sq = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %nt = tile.splat %n_f32 : f32 -> !tile.tile<64xf32, register>
    %mean = tile.div %ss, %nt : !tile.tile<64xf32, register>
    %et = tile.splat %eps : f32 -> !tile.tile<64xf32, register>
    %var = tile.add %mean, %et : !tile.tile<64xf32, register>
    %r = tile.rsqrt %var : !tile.tile<64xf32, register>
    %xn = tile.mul %x, %r : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %ww = tile.view %W[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %y = tile.mul %xn, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
