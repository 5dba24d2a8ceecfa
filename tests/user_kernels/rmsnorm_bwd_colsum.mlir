// RMSNorm backward in one kernel, both gradients, over a hidden size N <= 128 (any), the input as the forward
// read it (bf16): with x = f32(X), xhat = x RSTD and g = DY W,
//   DX = RSTD (g - xhat mean_j(g xhat))                         (bf16 out, for the previous layer's GEMM),
//   DW[j] += sum_i DY[i, j] xhat[i, j]                          (f32, DW comes in zeroed),
// DY [M, N] f32, X [M, N] bf16, W [N] f32, RSTD [M] f32. DW is a tile.col_sum of the block's [64 x 128] product
// (a [1, 128] column vector) added with tile.atomic_add into a 1-D window: every row block adds its partial.
// Rows past M and columns past N read as 0 and add nothing; stores past them are dropped.
builtin.module {
  func.func @rmsnorm_bwd_colsum(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DW: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %ni = arith.index_cast %n : index to i32
    %nf = arith.sitofp %ni : i32 to f32
    %nt = tile.splat %nf : f32 -> !tile.tile<1x1xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
    %xh = tile.load %xw : !tile.tile<64x128xbf16, global> -> !tile.tile<64x128xbf16, register>
    %x = tile.cast %xh : !tile.tile<64x128xbf16, register> -> !tile.tile<64x128xf32, register>
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
    %c1 = tile.div %gxs, %nt : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    %c = tile.reshape %c1 : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %t = tile.mul %xhat, %c : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %d = tile.sub %g, %t : !tile.tile<64x128xf32, register>
    %dx = tile.mul %d, %rstd : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %dxb = tile.cast %dx : !tile.tile<64x128xf32, register> -> !tile.tile<64x128xbf16, register>
    %dxw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
    tile.store_global %dxb, %dxw : !tile.tile<64x128xbf16, register>, !tile.tile<64x128xbf16, global>
    %p = tile.mul %dy, %xhat : !tile.tile<64x128xf32, register>
    %dw = tile.col_sum %p : !tile.tile<64x128xf32, register> -> !tile.tile<1x128xf32, register>
    %dww = tile.view %DW[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    tile.atomic_add %dw, %dww : !tile.tile<1x128xf32, register>, !tile.tile<128xf32, global>
    func.return
  }
}
