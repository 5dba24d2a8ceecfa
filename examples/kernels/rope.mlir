// Rotary position embedding (RoPE, the NeoX halves) of X [M, 64] f32, row m at position m, with inverse
// frequencies F [32] f32: theta = m f, Y[:, :32] = x1 cos - x2 sin, Y[:, 32:] = x2 cos + x1 sin (x1, x2 the halves).
// One block per 64 rows: the position from tile.iota rows, the frequencies a [1x32] column vector, the halves two
// tile.views of X; tile.sin / tile.cos reduce their argument by 2 pi first (error bound: tessera.sm90.approx.
// sin_cos_error_bound: 1.2e-6 for |theta| up to 2^24).
builtin.module {
  func.func @rope(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %F: !tile.tile<32xf32, global> {tile.dims = #tile.dims<32>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %row = tile.iota rows offset %m0 : !tile.tile<64x32xi32, register>
    %pos = tile.cast %row : !tile.tile<64x32xi32, register> -> !tile.tile<64x32xf32, register>
    %fw = tile.view %F[%c0] : !tile.tile<32xf32, global> -> !tile.tile<32xf32, global>
    %f = tile.load_broadcast %fw : !tile.tile<32xf32, global> -> !tile.tile<1x32xf32, register>
    %theta = tile.mul %pos, %f : !tile.tile<64x32xf32, register>, !tile.tile<1x32xf32, register>
    %cos = tile.cos %theta : !tile.tile<64x32xf32, register>
    %sin = tile.sin %theta : !tile.tile<64x32xf32, register>
    %x1w = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x32xf32, global>
    %x2w = tile.view %X[%m0, %c32] : !tile.tile<?x64xf32, global> -> !tile.tile<64x32xf32, global>
    %x1 = tile.load %x1w : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %x2 = tile.load %x2w : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %a = tile.mul %x1, %cos : !tile.tile<64x32xf32, register>
    %bb = tile.mul %x2, %sin : !tile.tile<64x32xf32, register>
    %y1 = tile.sub %a, %bb : !tile.tile<64x32xf32, register>
    %c = tile.mul %x2, %cos : !tile.tile<64x32xf32, register>
    %d = tile.mul %x1, %sin : !tile.tile<64x32xf32, register>
    %y2 = tile.add %c, %d : !tile.tile<64x32xf32, register>
    %y1w = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x32xf32, global>
    %y2w = tile.view %Y[%m0, %c32] : !tile.tile<?x64xf32, global> -> !tile.tile<64x32xf32, global>
    tile.store_global %y1, %y1w : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>
    tile.store_global %y2, %y2w : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>
    func.return
  }
}
