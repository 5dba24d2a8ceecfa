// A masked softmax, NumPy's softmax(where(mask, x, -inf)) along rows: X [M, N] f32, MASK [M, N] i32 (nonzero
// keeps), N <= 128 any, Y [M, N] f32. Written the straightforward way (max, subtract, exp, sum, divide), so a row
// the mask empties gives NaN as NumPy does (-inf - -inf), and a NaN or +inf logit propagates as in NumPy.
builtin.module {
  func.func @masked_softmax(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %MASK: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %kw = tile.view %MASK[%m0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x128xi32, global>
    %k = tile.load %kw : !tile.tile<64x128xi32, global> -> !tile.tile<64x128xi32, register>
    %zi = tile.fill 0 : !tile.tile<64x128xi32, register>
    %keep = tile.cmp ne %k, %zi : !tile.tile<64x128xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x128xf32, register>
    %xm = tile.select %keep, %x, %ninf : !tile.tile<64x128xi1, register>, !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, register>
    %m = tile.row_max %xm : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %d = tile.sub %xm, %m : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %e = tile.exp %d : !tile.tile<64x128xf32, register>
    %s = tile.row_sum %e : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %y = tile.div %e, %s : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x128xf32, register>, !tile.tile<64x128xf32, global>
    func.return
  }
}
