// Elementwise i32 tiles through memory: Y = X * column index + O - 7 (wrapping), X, Y [M, N] i32, O [N] i32
// (a column vector, tile.load_broadcast), N <= 16 (any).
builtin.module {
  func.func @i32_tile(
      %X: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>},
      %O: !tile.tile<?xi32, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x16xi32, global>
    %x = tile.load %xw : !tile.tile<64x16xi32, global> -> !tile.tile<64x16xi32, register>
    %col = tile.iota cols : !tile.tile<64x16xi32, register>
    %xc = tile.mul %x, %col : !tile.tile<64x16xi32, register>
    %ow = tile.view %O[%c0] : !tile.tile<?xi32, global> -> !tile.tile<16xi32, global>
    %o = tile.load_broadcast %ow : !tile.tile<16xi32, global> -> !tile.tile<1x16xi32, register>
    %xo = tile.add %xc, %o : !tile.tile<64x16xi32, register>, !tile.tile<1x16xi32, register>
    %seven = tile.fill -7.0 : !tile.tile<64x16xi32, register>
    %y = tile.add %xo, %seven : !tile.tile<64x16xi32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x16xi32, global>
    tile.store_global %y, %yw : !tile.tile<64x16xi32, register>, !tile.tile<64x16xi32, global>
    func.return
  }
}
