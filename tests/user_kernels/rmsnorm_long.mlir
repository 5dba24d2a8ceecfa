// RMSNorm forward over rows longer than one tile (any hidden size N, a loop of 64-column chunks), bf16 in and
// f32 out: for X [M, N] bf16 and the learned weight W [N] f32,
//   RSTD[i] = rsqrt(sum_j x[i, j]^2 / N + 1e-6),   Y[i, j] = x[i, j] RSTD[i] W[j]   (Y, RSTD f32).
// The first loop carries the sum of squares (columns past N read as 0 and add nothing), the second reads X again
// and scales it. N is made an f32 tile from tile.dim (tile.splat, tile.cast i32 -> f32).
builtin.module {
  func.func @rmsnorm_long(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %nb = arith.ceildivui %n, %c64 : index
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %ss = scf.for %j = %c0 to %nb step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %sq = tile.mul %x, %x : !tile.tile<64x64xf32, register>
      %part = tile.row_sum %sq : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %ni = tile.splat %n : index -> !tile.tile<64xi32, register>
    %nf = tile.cast %ni : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %mean = tile.div %ss, %nf : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-06 : !tile.tile<64xf32, register>
    %var = tile.add %mean, %eps : !tile.tile<64xf32, register>
    %rstd = tile.rsqrt %var : !tile.tile<64xf32, register>
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %ww = tile.view %W[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
      %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
      %xs = tile.mul %x, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %y = tile.mul %xs, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rstd, %rw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
