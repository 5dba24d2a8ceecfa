// LayerNorm backward's dgamma and dbeta over X [M, 64]: dgamma[n] = sum_m dy[m, n] xhat[m, n] into a 1-D dG [64],
// dbeta[n] = sum_m dy[m, n] into a one-row dB [1, 64]. One block per 64 rows; each block's tile.col_sum partials
// ([1x64] column vectors) are added with tile.atomic_add (the outputs start at zero). Rows past M read as 0.
builtin.module {
  func.func @dgamma(%DY: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %XH: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %DG: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>, tile.role = "out"},
      %DB: !tile.tile<1x64xf32, global> {tile.dims = #tile.dims<1, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %yw = tile.view %DY[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %dy = tile.load %yw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %hw = tile.view %XH[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %xh = tile.load %hw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %p = tile.mul %dy, %xh : !tile.tile<64x64xf32, register>
    %g = tile.col_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %bb = tile.col_sum %dy : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %gw = tile.view %DG[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %g, %gw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    %bw = tile.view %DB[%c0, %c0] : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, global>
    tile.atomic_add %bb, %bw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    func.return
  }
}
