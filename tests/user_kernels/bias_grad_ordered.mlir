// A bias gradient reproducible bit for bit: dB [N] += the column sums of each 64-row block of dY [M, N <= 64],
// the blocks adding in block order whatever order they run in (tile.sem_wait for the counter to reach the block's
// index, tile.atomic_add of the [1x64] column vector into the 1-D window, tile.sem_signal; SEM a zeroed scratch).
builtin.module {
  func.func @bias_grad_ordered(%DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %SEM: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>, tile.role = "scratch"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %yw = tile.view %DY[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %dy = tile.load %yw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %p = tile.col_sum %dy : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
    %sem = tile.view %SEM[%c0] : !tile.tile<1xi32, global> -> !tile.tile<1xi32, global>
    tile.sem_wait %sem, %b : !tile.tile<1xi32, global>
    %dbw = tile.view %DB[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %p, %dbw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    tile.sem_signal %sem : !tile.tile<1xi32, global>
    func.return
  }
}
