// Column reductions of [64x32] tiles made only of broadcasts, in one block: R [M] (a row vector, rows past M 0)
// plus C [N] (tile.load_broadcast to a [1x32] column vector) and its col_max; a [64x32] load_broadcast of C and
// its col_sum (64 C); R C's col_min; the i32 col_sum of iota rows times iota cols; a fill's col_sum.
builtin.module {
  func.func @col_broadcast_only(%R: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>}, %C: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %O1: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"}, %O2: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"}, %O3: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"}, %O4: !tile.tile<?xi32, global> {tile.dims = #tile.dims<N>, tile.role = "out"}, %O5: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %rw = tile.view %R[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %r = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %cw = tile.view %C[%c0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    %c = tile.load_broadcast %cw : !tile.tile<32xf32, global> -> !tile.tile<1x32xf32, register>
    %cb = tile.load_broadcast %cw : !tile.tile<32xf32, global> -> !tile.tile<64x32xf32, register>
    %rc = tile.add %r, %c : !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
    %a1 = tile.col_max %rc : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %O1w = tile.view %O1[%c0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %a1, %O1w : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    %a2 = tile.col_sum %cb : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %O2w = tile.view %O2[%c0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %a2, %O2w : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    %p = tile.mul %r, %c : !tile.tile<64xf32, register>, !tile.tile<1x32xf32, register>
    %a3 = tile.col_min %p : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %O3w = tile.view %O3[%c0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %a3, %O3w : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    %io = tile.iota rows : !tile.tile<64x32xi32, register>
    %ic = tile.iota cols : !tile.tile<64x32xi32, register>
    %ii = tile.mul %io, %ic : !tile.tile<64x32xi32, register>
    %a4 = tile.col_sum %ii : !tile.tile<64x32xi32, register> -> !tile.tile<1x32xi32, register>
    %O4w = tile.view %O4[%c0] : !tile.tile<?xi32, global> -> !tile.tile<32xi32, global>
    tile.store_global %a4, %O4w : !tile.tile<1x32xi32, register>, !tile.tile<32xi32, global>
    %f = tile.fill 0.5 : !tile.tile<64x32xf32, register>
    %a5 = tile.col_sum %f : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %O5w = tile.view %O5[%c0] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %a5, %O5w : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    func.return
  }
}
