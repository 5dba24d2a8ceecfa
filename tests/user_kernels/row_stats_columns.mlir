// Row statistics stored as columns: S [M, 1] = sum_j |X[i, j]| and MX [M] = max_j X[i, j], of X [M, N] f32
// (any M, N). One block per 64 rows loops over blocks of 64 columns carrying the two row vectors, columns past N
// masked (0 for the sum, -inf for the max); S is stored as a [64, 1] column tile (tile.reshape of the row
// vector) into the 2-D output of one column, MX as a row vector into the 1-D one.
builtin.module {
  func.func @row_stats_columns(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>, tile.role = "out"},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %nt = tile.splat %n : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %m_init = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %s_init = tile.fill 0.0 : !tile.tile<64xf32, register>
    %mx, %sum = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%m = %m_init, %s = %s_init) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %nt : !tile.tile<1x64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %bmax = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m2 = tile.element_max %m, %bmax : !tile.tile<64xf32, register>
      %a = tile.abs %x : !tile.tile<64x64xf32, register>
      %bs = tile.row_sum %a : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %s2 = tile.add %s, %bs : !tile.tile<64xf32, register>
      scf.yield %m2, %s2 : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %sc = tile.reshape %sum : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %sw = tile.view %S[%m0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
    tile.store_global %sc, %sw : !tile.tile<64x1xf32, register>, !tile.tile<64x1xf32, global>
    %mw = tile.view %MX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mx, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
