// Fused residual add + RMSNorm over a hidden size N <= 128 (any N): H = X + R (f32 out), Y = bf16(H rsqrt(mean(H^2) + eps) W)
builtin.module {
  func.func @residual_rmsnorm(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %R: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %H: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_i32 = arith.index_cast %n : index to i32
    %n_f32 = arith.sitofp %n_i32 : i32 to f32
    %one_f = arith.constant 1.0 : f32
    %inv_n = arith.divf %one_f, %n_f32 : f32
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %rw = tile.view %R[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %r = tile.load %rw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %h = tile.add %x, %r : !tile.tile<64x128xf32, register>
    %hw = tile.view %H[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %h, %hw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    %sq = tile.mul %h, %h : !tile.tile<64x128xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %it = tile.splat %inv_n : f32 -> !tile.tile<64xf32, register>
    %ms = tile.mul %ss, %it : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-06 : !tile.tile<64xf32, register>
    %v = tile.add %ms, %eps : !tile.tile<64xf32, register>
    %rs = tile.rsqrt %v : !tile.tile<64xf32, register>
    %hn = tile.mul %h, %rs : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %ww = tile.view %W[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %y = tile.mul %hn, %w : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %yb = tile.cast %y : !tile.tile<64x128xf32, register> -> !tile.tile<64x128xbf16, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
    tile.store_global %yb, %yw : !tile.tile<64x128xbf16, register>, !tile.tile<64x128xbf16, global>
    func.return
  }
}
