// Softmax of each row written by hand: Y = bf16(exp(x - max x) / sum exp(x - max x)), rows of 64, 64 rows per block.
builtin.module {
  func.func @row_softmax(%X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, 64>},
                         %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %x = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %xf = tile.cast %x : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %m = tile.row_max %xf : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %p = tile.exp_subtract %xf, %m : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %l = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %y = tile.div_rows %p, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %yb = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %yb, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
