// The sum of every element of X [M, N] f32 (any M, N <= 128), TOTAL [1], a 2-D reduction to a scalar across
// thread blocks: each block sums its 64 rows (tile.row_sum), writes the 64 row sums to its own slice of a
// scratch tensor PART [ceildiv(M, 64) * 64], and after a tile.barrier (which orders the block's global writes
// before its reads) gathers them back as a column vector [1, 64]; a row sum of the [64, 64] tile that repeats
// it on every row is the block's total on every row, and tile.atomic_add of that row vector into the 1-D
// window of TOTAL from its element 0 adds it once (the other 63 elements fall outside TOTAL).
builtin.module {
  func.func @total_sum(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %PART: !tile.tile<?xf32, global> {tile.dims = #tile.dims<64 * ceildiv(M, 64)>, tile.role = "scratch"},
      %TOTAL: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %rs = tile.row_sum %x : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %pw = tile.view %PART[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rs, %pw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    tile.barrier
    %idx = tile.iota cols offset %m0 : !tile.tile<1x64xi32, register>
    %cv = tile.gather %PART[%idx] : !tile.tile<?xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %rep = tile.add %zero, %cv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %tot = tile.row_sum %rep : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %tw = tile.view %TOTAL[%c0] : !tile.tile<1xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %tot, %tw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
