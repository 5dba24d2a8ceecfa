// Masked mean pooling over a padded batch of sequences, as a sentence encoder ends: for X [B, S, D] f32 and the
// attention mask MASK [B, S] i32 (nonzero: a real token),
//   COUNT[b] = #{s : MASK[b, s] != 0}  (i32),   OUT[b, d] = sum_s [MASK[b, s] != 0] X[b, s, d] / max(COUNT[b], 1),
// any B, S, D (a sequence with no token pools to 0). Block (x, y) takes 64 features of batch y and loops over the
// sequence in row blocks of 64: the mask as a row vector (a 1-D window of MASK's row y), tile.select of the rows,
// tile.col_sum of the block (a [1, 64] running sum) and of the flags as an i32 [64, 1] column (a [1, 1] count).
// Rows past S read 0 from both and count nowhere. The first block of each batch stores its count (every block of
// the batch holds it: a store from each would be a race).
builtin.module {
  func.func @masked_mean_pool(
      %X: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, S, D>},
      %MASK: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<B, S>},
      %OUT: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, D>, tile.role = "out"},
      %COUNT: !tile.tile<?xi32, global> {tile.dims = #tile.dims<B>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(D, 64), B>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %bb = tile.program_id y : index
    %d0 = arith.muli %bx, %c64 : index
    %s = tile.dim %X[1] : !tile.tile<?x?x?xf32, global>
    %sb = arith.ceildivui %s, %c64 : index
    %zf = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %zi = tile.fill 0 : !tile.tile<1x1xi32, register>
    %onei = tile.fill 1 : !tile.tile<1x1xi32, register>
    %onef = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %sum0 = tile.fill 0.0 : !tile.tile<1x64xf32, register>
    %r:2 = scf.for %i = %c0 to %sb step %c1 iter_args(%acc = %sum0, %cnt = %zi) -> (!tile.tile<1x64xf32, register>, !tile.tile<1x1xi32, register>) {
      %s0 = arith.muli %i, %c64 : index
      %xw = tile.view %X[%bb, %s0, %d0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %mw = tile.view %MASK[%bb, %s0] : !tile.tile<?x?xi32, global> -> !tile.tile<64xi32, global>
      %mk = tile.load %mw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
      %keep = tile.cmp ne %mk, %zi : !tile.tile<64xi32, register>, !tile.tile<1x1xi32, register>
      %xs = tile.select %keep, %x, %zf : !tile.tile<64x1xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
      %part = tile.col_sum %xs : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<1x64xf32, register>
      %flag = tile.select %keep, %onei, %zi : !tile.tile<64x1xi1, register>, !tile.tile<1x1xi32, register>, !tile.tile<1x1xi32, register>
      %c = tile.col_sum %flag : !tile.tile<64x1xi32, register> -> !tile.tile<1x1xi32, register>
      %cnt2 = tile.add %cnt, %c : !tile.tile<1x1xi32, register>
      scf.yield %acc2, %cnt2 : !tile.tile<1x64xf32, register>, !tile.tile<1x1xi32, register>
    }
    %cf = tile.cast %r#1 : !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
    %den = tile.element_max %cf, %onef : !tile.tile<1x1xf32, register>
    %mean = tile.div %r#0, %den : !tile.tile<1x64xf32, register>, !tile.tile<1x1xf32, register>
    %ow = tile.view %OUT[%bb, %d0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x64xf32, global>
    tile.store_global %mean, %ow : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    %first = arith.cmpi eq, %bx, %c0 : index
    scf.if %first {
      %cw = tile.view %COUNT[%bb] : !tile.tile<?xi32, global> -> !tile.tile<1xi32, global>
      tile.store_global %r#1, %cw : !tile.tile<1x1xi32, register>, !tile.tile<1xi32, global>
    }
    func.return
  }
}
