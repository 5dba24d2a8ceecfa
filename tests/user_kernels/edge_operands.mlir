// Edge operands of the new ops in one block (M <= 64): f32 row_min / row_max of rows of -inf, +inf, NaN, +-0;
// i32 row_min / row_max / wrapping row_sum with INT_MIN and INT_MAX; tile.sin of an [M] row vector, tile.cos of a
// [1, N] column vector (NaN and inf among them), tile.erf of a [1, 1] tile, tile.xor of an [M] row vector with a
// [1, N] column vector (an [M, N] result), and tile.row_min of an [M, 1] column (itself).
builtin.module {
  func.func @edge_operands(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %K: !tile.tile<?x64xi32, global> {tile.dims = #tile.dims<M, 64>},
      %R: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %CV: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
      %RI: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %CI: !tile.tile<64xi32, global> {tile.dims = #tile.dims<64>},
      %S: !tile.tile<1x1xf32, global> {tile.dims = #tile.dims<1, 1>},
      %MN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KMN: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KMX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KSUM: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %SINR: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %COSC: !tile.tile<1x64xf32, global> {tile.dims = #tile.dims<1, 64>, tile.role = "out"},
      %ERFS: !tile.tile<1x1xf32, global> {tile.dims = #tile.dims<1, 1>, tile.role = "out"},
      %XOR: !tile.tile<?x64xi32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %COLMIN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %kw = tile.view %K[%m0, %c0] : !tile.tile<?x64xi32, global> -> !tile.tile<64x64xi32, global>
    %k = tile.load %kw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %mn = tile.row_min %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %mx = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %kmn = tile.row_min %k : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %kmx = tile.row_max %k : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %ksum = tile.row_sum %k : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %w1 = tile.view %MN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mn, %w1 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %w2 = tile.view %MX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mx, %w2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %w3 = tile.view %KMN[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %kmn, %w3 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %w4 = tile.view %KMX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %kmx, %w4 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %w5 = tile.view %KSUM[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %ksum, %w5 : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %rw = tile.view %R[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %r = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %sr = tile.sin %r : !tile.tile<64xf32, register>
    %w6 = tile.view %SINR[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %sr, %w6 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %cvw = tile.view %CV[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    %cv = tile.load_broadcast %cvw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %cc = tile.cos %cv : !tile.tile<1x64xf32, register>
    %w7 = tile.view %COSC[%c0, %c0] : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, global>
    tile.store_global %cc, %w7 : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    %sw = tile.view %S[%c0, %c0] : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, global>
    %s = tile.load %sw : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, register>
    %es = tile.erf %s : !tile.tile<1x1xf32, register>
    %w8 = tile.view %ERFS[%c0, %c0] : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, global>
    tile.store_global %es, %w8 : !tile.tile<1x1xf32, register>, !tile.tile<1x1xf32, global>
    %riw = tile.view %RI[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %ri = tile.load %riw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %ciw = tile.view %CI[%c0] : !tile.tile<64xi32, global> -> !tile.tile<64xi32, global>
    %ci = tile.load_broadcast %ciw : !tile.tile<64xi32, global> -> !tile.tile<1x64xi32, register>
    %xo = tile.xor %ri, %ci : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
    %w9 = tile.view %XOR[%m0, %c0] : !tile.tile<?x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %xo, %w9 : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %col = tile.reshape %r : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %cm = tile.row_min %col : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %w10 = tile.view %COLMIN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %cm, %w10 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
