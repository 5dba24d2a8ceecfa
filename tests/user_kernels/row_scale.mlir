// A row-scaled copy written by hand: Y[m, n] = f16(X[m, n] * s[m]), 64 rows per block, any M and N <= 32.
builtin.module {
  func.func @row_scale(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
                       %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
                       %Y: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %y = tile.mul_rows %x, %s : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x32xf32, register> -> !tile.tile<64x32xf16, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x32xf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x32xf16, register>, !tile.tile<64x32xf16, global>
    func.return
  }
}
