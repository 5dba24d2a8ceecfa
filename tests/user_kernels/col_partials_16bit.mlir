// Column sums of X [M, N] f32 per block of 64 rows and 32 columns, written three ways: the first row block's
// rounded to bf16 into a 1-D S [N] (a bf16 column vector, packed in pairs), every block's into its row of
// P [ceildiv(M, 64), N], and all added transposed into a column TT [N, 1] (tile.atomic_add transpose of a
// [1x32] column vector: window (j, 0) += value (0, j)).
builtin.module {
  func.func @col_partials(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %P: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<ceildiv(M, 64), N>, tile.role = "out"},
      %TT: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<N, 1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 32), ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 32 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %n0 = arith.muli %bx, %cbn : index
    %m0 = arith.muli %by, %cbm : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %s = tile.col_sum %x : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %sh = tile.cast %s : !tile.tile<1x32xf32, register> -> !tile.tile<1x32xbf16, register>
    %sw = tile.view %S[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<32xbf16, global>
    %first = arith.cmpi eq, %by, %c0 : index
    scf.if %first {
      tile.store_global %sh, %sw : !tile.tile<1x32xbf16, register>, !tile.tile<32xbf16, global>
    }
    %pw = tile.view %P[%by, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x32xf32, global>
    tile.store_global %s, %pw : !tile.tile<1x32xf32, register>, !tile.tile<1x32xf32, global>
    %tw = tile.view %TT[%n0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<32x1xf32, global>
    tile.atomic_add %s, %tw transpose : !tile.tile<1x32xf32, register>, !tile.tile<32x1xf32, global>
    func.return
  }
}
