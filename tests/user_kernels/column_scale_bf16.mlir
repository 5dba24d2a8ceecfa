// Y = bf16(X * W + b), X [M, N] bf16, W [1, N] bf16 (a per-column scale kept 2-D, one row), b [N] bf16; and
// W2 [1, N] bf16 = bf16(2 W), written by the blocks of the first row of blocks; any M, N. Blocks of 64 x 64. W is
// loaded as a bf16 column vector [1, 64] and stored as one, b broadcast straight into a full [64, 64] bf16 tile.
builtin.module {
  func.func @column_scale_bf16(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %W: !tile.tile<1x?xbf16, global> {tile.dims = #tile.dims<1, N>},
      %b: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %W2: !tile.tile<1x?xbf16, global> {tile.dims = #tile.dims<1, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %ww = tile.view %W[%c0, %n0] : !tile.tile<1x?xbf16, global> -> !tile.tile<1x64xbf16, global>
    %wh = tile.load %ww : !tile.tile<1x64xbf16, global> -> !tile.tile<1x64xbf16, register>
    %w = tile.cast %wh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
    %bw = tile.view %b[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>
    %bh = tile.load_broadcast %bw : !tile.tile<64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %bv = tile.cast %bh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %xs = tile.mul %x, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %y = tile.add %xs, %bv : !tile.tile<64x64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    %first = arith.cmpi eq, %bm, %c0 : index
    scf.if %first {
      %w2 = tile.add %w, %w : !tile.tile<1x64xf32, register>
      %w2h = tile.cast %w2 : !tile.tile<1x64xf32, register> -> !tile.tile<1x64xbf16, register>
      %w2w = tile.view %W2[%c0, %n0] : !tile.tile<1x?xbf16, global> -> !tile.tile<1x64xbf16, global>
      tile.store_global %w2h, %w2w : !tile.tile<1x64xbf16, register>, !tile.tile<1x64xbf16, global>
    }
    func.return
  }
}
