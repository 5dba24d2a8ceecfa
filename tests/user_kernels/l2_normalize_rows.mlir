// L2 normalization of rows of any length, PyTorch's F.normalize(X, dim=1): Y = X / max(||X[i]||_2, 1e-12),
// X [M, N] f32, Y [M, N] bf16, any M, N. Two passes over 64-column blocks: the row's sum of squares (columns past
// N read as 0 and add nothing), then the quotient by the clamped norm, a row vector; the clamp is a [1, 1] tile
// broadcast onto it (a row vector [64] against a [1, 1] gives a column [64, 1]). A row of zeros stays zeros.
builtin.module {
  func.func @l2_normalize_rows(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %ss = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %xx = tile.mul %x, %x : !tile.tile<64x64xf32, register>
      %part = tile.row_sum %xx : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %part : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %norm = tile.sqrt %ss : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-12 : !tile.tile<1x1xf32, register>
    %den = tile.element_max %norm, %eps : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    scf.for %j = %c0 to %n_blocks step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %y = tile.div %x, %den : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
      %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.store_global %yh, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    }
    func.return
  }
}
