// LayerNorm backward in one kernel over X, DY [M, N] f32, N <= 64, given gamma [N] and the forward's MEAN, RSTD [M]:
// xhat = (X - mean) rstd, g = DY gamma, DX = rstd (g - xhat mean_j(g xhat) - mean_j(g)) (row sums, 1 / N a
// tile.div by the splat of N), and DGAMMA[j] += sum_i DY xhat, DBETA[j] += sum_i DY: the block's tile.col_sum
// partials added with tile.atomic_add into 1-D [N] outputs. One block per 64 rows.
builtin.module {
  func.func @ln_bwd(%DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>}, %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %G: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>}, %MEAN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>}, %RSTD: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DG: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %DB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %cbm = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %cbm : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ni = arith.index_cast %n : index to i64
    %nf = arith.sitofp %ni : i64 to f32
    %nv = tile.splat %nf : f32 -> !tile.tile<1x1xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %dyw = tile.view %DY[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %gw = tile.view %G[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %gam = tile.load_broadcast %gw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %mw = tile.view %MEAN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %mean = tile.load %mw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %rw = tile.view %RSTD[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %rstd = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %xc = tile.sub %x, %mean : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %xh = tile.mul %xc, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %wdy = tile.mul %dy, %gam : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %p = tile.mul %xh, %wdy : !tile.tile<64x64xf32, register>
    %s1 = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %s2 = tile.row_sum %wdy : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %c1 = tile.div %s1, %nv : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    %c2 = tile.div %s2, %nv : !tile.tile<64xf32, register>, !tile.tile<1x1xf32, register>
    %a = tile.mul %xh, %c1 : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %a2 = tile.add %a, %c2 : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %d = tile.sub %wdy, %a2 : !tile.tile<64x64xf32, register>
    %dx = tile.mul %d, %rstd : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %dxw = tile.view %DX[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %dx, %dxw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %q = tile.mul %dy, %xh : !tile.tile<64x64xf32, register>
    %dg = tile.col_sum %q : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %db = tile.col_sum %dy : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %dgw = tile.view %DG[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %dg, %dgw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    %dbw = tile.view %DB[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %db, %dbw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
