// The sum of every element of X [M, N] f32 (any M, N <= 64) into TOTAL [1] from a grid of blocks: each block's
// 64 rows summed (tile.row_sum), the [64x1] column of its row sums reduced to one value for the block
// (tile.col_sum to a [1x1] tile), and that value added atomically into TOTAL's one element (the output starts at
// zero): one red.global.add for the block.
builtin.module {
  func.func @grid_total(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %TOTAL: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %r = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %c = tile.reshape %r : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %t = tile.col_sum %c : !tile.tile<64x1xf32, register> -> !tile.tile<1x1xf32, register>
    %tw = tile.view %TOTAL[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
    tile.atomic_add %t, %tw : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    func.return
  }
}
