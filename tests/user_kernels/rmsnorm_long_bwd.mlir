// RMSNorm backward over rows longer than one tile (any N, loops of 64-column chunks), the input gradient: for
// DY [M, N] f32, X [M, N] bf16 (as the forward read it), the weight W [N] f32 and the forward's RSTD [M] f32,
// with xhat = x RSTD and g = DY W,
//   DX = RSTD (g - xhat c),   c[i] = sum_j g[i, j] xhat[i, j] / N   (DX bf16, as the layer before reads it).
// The first loop carries the row sums of g xhat (columns past N read as 0 and add nothing), the second writes DX.
builtin.module {
  func.func @rmsnorm_long_bwd(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %nb = arith.ceildivui %n, %c64 : index
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %rstd = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %dot = scf.for %j = %c0 to %nb step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %ww = tile.view %W[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
      %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
      %g = tile.mul %dy, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %xhat = tile.mul %x, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %gx = tile.mul %g, %xhat : !tile.tile<64x64xf32, register>
      %part = tile.row_sum %gx : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %ni = tile.splat %n : index -> !tile.tile<64xi32, register>
    %nf = tile.cast %ni : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %c = tile.div %dot, %nf : !tile.tile<64xf32, register>
    scf.for %j = %c0 to %nb step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %ww = tile.view %W[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
      %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
      %g = tile.mul %dy, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %xhat = tile.mul %x, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %xc = tile.mul %xhat, %c : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %d = tile.sub %g, %xc : !tile.tile<64x64xf32, register>
      %dx = tile.mul %d, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %dxb = tile.cast %dx : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %dxw = tile.view %DX[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.store_global %dxb, %dxw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    }
    func.return
  }
}
