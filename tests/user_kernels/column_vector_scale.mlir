// V [1, N] f32 = s * W, W [1, N] bf16 (a per-column weight kept as one row), s [1, 1] f32 read from memory; any
// N. One block per 64 columns. The kernel has no tile of the block's rows: a column vector and a [1, 1] tile only
// (one warpgroup holds them).
builtin.module {
  func.func @column_vector_scale(%W: !tile.tile<1x?xbf16, global> {tile.dims = #tile.dims<1, N>},
      %S: !tile.tile<1x1xf32, global> {tile.dims = #tile.dims<1, 1>},
      %V: !tile.tile<1x?xf32, global> {tile.dims = #tile.dims<1, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %ww = tile.view %W[%c0, %n0] : !tile.tile<1x?xbf16, global> -> !tile.tile<1x64xbf16, global>
    %wh = tile.load %ww : !tile.tile<1x64xbf16, global> -> !tile.tile<1x64xbf16, register>
    %w = tile.cast %wh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
    %sw = tile.view %S[%c0, %c0] : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, global>
    %s = tile.load %sw : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, register>
    %v = tile.mul %s, %w : !tile.tile<1x1xf32, register>, !tile.tile<1x64xf32, register>
    %vw = tile.view %V[%c0, %n0] : !tile.tile<1x?xf32, global> -> !tile.tile<1x64xf32, global>
    tile.store_global %v, %vw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    func.return
  }
}
