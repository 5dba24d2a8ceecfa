// Tables read at one index for the whole block, the index a [1, 1] tile (tile.load_index of a block's entry of
// IDX, splat): for X [M, N] f32, IDX [B] i32 (one entry per column block, B = ceil(N / 64)), S [E] f32 and
// T [E, M] f32, Y[:, block c] = X[:, block c] S[e] + 2 T[e, :] (as rows), e = IDX[c]; any M, N, E. S[e] is a
// tile.gather whose every coordinate is [1, 1] (a [1, 1] result), T[e, rows] one whose row coordinate is [1, 1]
// and whose column is a [64, 64] tile of iota rows, and again a [64, 1] column of them. An index outside the table
// reads 0 (tile.gather's rule). Grid: M blocks x N blocks.
builtin.module {
  func.func @gather_at_a_scalar(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %IDX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<B>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<E>},
      %T: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<E, M>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %e = tile.load_index %IDX[%bn] : !tile.tile<?xi32, global>
    %ev = tile.splat %e : index -> !tile.tile<1x1xi32, register>
    %s = tile.gather %S[%ev] : !tile.tile<?xf32, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
    %rows = tile.iota rows offset %m0 : !tile.tile<64x64xi32, register>
    %t = tile.gather %T[%ev, %rows] : !tile.tile<?x?xf32, global>, !tile.tile<1x1xi32, register>, !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
    %row = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %tc = tile.gather %T[%ev, %row] : !tile.tile<?x?xf32, global>, !tile.tile<1x1xi32, register>, !tile.tile<64x1xi32, register> -> !tile.tile<64x1xf32, register>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %xs = tile.mul %x, %s : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %y1 = tile.add %xs, %t : !tile.tile<64x64xf32, register>
    %y = tile.add %y1, %tc : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
