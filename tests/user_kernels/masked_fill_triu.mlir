// A masked fill by coordinates: Y = where(j > i, -2.5, X), the strict upper triangle set to a constant, X and Y
// [M, N] bf16, any M, N. One block per 64 x 64 tile; the mask compares tile.iota rows and cols, each offset by
// the block's first row and column. bf16 is computed with in f32 (tile.cast both ways: exact here).
builtin.module {
  func.func @masked_fill_triu(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %row = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %upper = tile.cmp gt %col, %row : !tile.tile<1x64xi32, register>, !tile.tile<64x1xi32, register>
    %fill = tile.fill -2.5 : !tile.tile<64x64xf32, register>
    %y = tile.select %upper, %fill, %x : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
