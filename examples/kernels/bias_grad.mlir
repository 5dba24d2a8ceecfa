// Bias gradient dB [N] = sum over the rows of dY [M, N] f32 (the column sums: Triton's tl.sum(dy, axis=0)).
// One block per 64 columns loops over the row blocks of 64, adding each block's tile.col_sum ([1x64], one value
// per column) into a running [1x64] sum, and stores it once. Rows past M read as 0, which adds nothing; columns
// past N are not stored: the [1x64] column vector is stored into a 1-D window of 64 elements, one per column.
builtin.module {
  func.func @bias_grad(
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %m = tile.dim %DY[0] : !tile.tile<?x?xf32, global>
    %mb = arith.ceildivui %m, %c64 : index
    %init = tile.fill 0.0 : !tile.tile<1x64xf32, register>
    %db = scf.for %i = %c0 to %mb step %c1 iter_args(%acc = %init) -> (!tile.tile<1x64xf32, register>) {
      %m0 = arith.muli %i, %c64 : index
      %yw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %dy = tile.load %yw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %part = tile.col_sum %dy : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
      %next = tile.add %acc, %part : !tile.tile<1x64xf32, register>
      scf.yield %next : !tile.tile<1x64xf32, register>
    }
    %bw = tile.view %DB[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %db, %bw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
