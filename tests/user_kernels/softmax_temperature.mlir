// Row softmax with a temperature: Y = softmax(X / T) along rows, X [M, N] f32 (any M, N <= 64), T [1] f32 a
// one-element tensor (a kernel's arguments are global tensors: a bare f32 argument is refused by name). Every
// row reads T with tile.gather at coordinate 0 (a [64] row vector of one value: the lowered block holds a value
// per row, so a [1, 1] tile is refused below Tile IR), its reciprocal broadcast along the rows. Columns past N load as 0 and are masked to -inf (tile.iota cols, tile.cmp, tile.select).
builtin.module {
  func.func @softmax_temperature(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %T: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %zero = tile.splat %c0 : index -> !tile.tile<64xi32, register>
    %t = tile.gather %T[%zero] : !tile.tile<1xf32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %inv_t = tile.reciprocal %t : !tile.tile<64xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %xs = tile.mul %x, %inv_t : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %col = tile.iota cols : !tile.tile<1x64xi32, register>
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %inside = tile.cmp lt %col, %nt : !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %xm = tile.select %inside, %xs, %ninf : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %m = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %d = tile.sub %xm, %m : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %e = tile.exp %d : !tile.tile<64x64xf32, register>
    %s = tile.row_sum %e : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %y = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
