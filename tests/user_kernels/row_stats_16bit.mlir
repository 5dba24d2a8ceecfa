// Row statistics of X [M, 64] f32 stored in 16 bits: S [M, 1] bf16 = bf16(sum_j X[i, j]) as a [64, 1] column
// (tile.reshape of the row vector, then tile.cast), MX [M] f16 = f16(max_j X[i, j]) as a row vector into the 1-D
// output (any M). One block per 64 rows; each row's value is written once, by one lane of its quad.
builtin.module {
  func.func @row_stats_16bit(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %S: !tile.tile<?x1xbf16, global> {tile.dims = #tile.dims<M, 1>, tile.role = "out"},
      %MX: !tile.tile<?xf16, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %s = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sc = tile.reshape %s : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %sh = tile.cast %sc : !tile.tile<64x1xf32, register> -> !tile.tile<64x1xbf16, register>
    %sw = tile.view %S[%m0, %c0] : !tile.tile<?x1xbf16, global> -> !tile.tile<64x1xbf16, global>
    tile.store_global %sh, %sw : !tile.tile<64x1xbf16, register>, !tile.tile<64x1xbf16, global>
    %m = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %mh = tile.cast %m : !tile.tile<64xf32, register> -> !tile.tile<64xf16, register>
    %mw = tile.view %MX[%m0] : !tile.tile<?xf16, global> -> !tile.tile<64xf16, global>
    tile.store_global %mh, %mw : !tile.tile<64xf16, register>, !tile.tile<64xf16, global>
    func.return
  }
}
