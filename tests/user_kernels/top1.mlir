// Top-1 of rows of any length, X [M, N] f32 (N = 1000: a loop over column blocks of 64): V [M] the row max and
// I [M] i32 the first column where it occurs (NumPy's argmax: ties go to the lowest index, within a block and
// across blocks). Each block's candidate index is the row max of -column over the columns equal to the block's
// max; a later block replaces the running (max, index) only where its max is strictly greater.
builtin.module {
  func.func @top1(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %V: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %I: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %miss = tile.fill -1.0e+09 : !tile.tile<64x64xf32, register>
    %v0 = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %i0 = tile.fill 0 : !tile.tile<64xi32, register>
    %r:2 = scf.for %j = %c0 to %nb step %c1 iter_args(%v = %v0, %i = %i0) -> (!tile.tile<64xf32, register>, !tile.tile<64xi32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %outside = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %outside, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %hit = tile.cmp eq %xm, %bm : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %colf = tile.cast %col : !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
      %negc = tile.neg %colf : !tile.tile<1x64xf32, register>
      %cand = tile.select %hit, %negc, %miss : !tile.tile<64x64xi1, register>, !tile.tile<1x64xf32, register>, !tile.tile<64x64xf32, register>
      %best = tile.row_max %cand : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %bif = tile.neg %best : !tile.tile<64xf32, register>
      %bi = tile.cast %bif : !tile.tile<64xf32, register> -> !tile.tile<64xi32, register>
      %better = tile.cmp gt %bm, %v : !tile.tile<64xf32, register>
      %v2 = tile.select %better, %bm, %v : !tile.tile<64xi1, register>, !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
      %i2 = tile.select %better, %bi, %i : !tile.tile<64xi1, register>, !tile.tile<64xi32, register>, !tile.tile<64xi32, register>
      scf.yield %v2, %i2 : !tile.tile<64xf32, register>, !tile.tile<64xi32, register>
    }
    %vw = tile.view %V[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#0, %vw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %iw = tile.view %I[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %r#1, %iw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    func.return
  }
}
