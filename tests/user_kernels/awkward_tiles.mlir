// Tiles of 64 x 80 (80 columns: a wgmma N that is no power of two) over X [M, N] f32, any M and N (odd N too),
// f32 math with 16-bit outputs: Y16 = f16(x * x) and YB = bf16(x + 0.25) (each one f32 operation, rounded once
// to f32 and once to the 16-bit type, to nearest even), and R [M] f32 the row sums of x * x over the block's
// 80 columns, added across the column blocks with tile.atomic_add. Block (x, y) takes rows 64x.., columns 80y..;
// the stores past M or N are dropped and the loads there read 0.
builtin.module {
  func.func @awkward_tiles(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y16: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %YB: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %R: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 80)>} {
    %c64 = arith.constant 64 : index
    %c80 = arith.constant 80 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c80 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x80xf32, global>
    %x = tile.load %xw : !tile.tile<64x80xf32, global> -> !tile.tile<64x80xf32, register>
    %sq = tile.mul %x, %x : !tile.tile<64x80xf32, register>
    %sq16 = tile.cast %sq : !tile.tile<64x80xf32, register> -> !tile.tile<64x80xf16, register>
    %y16w = tile.view %Y16[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x80xf16, global>
    tile.store_global %sq16, %y16w : !tile.tile<64x80xf16, register>, !tile.tile<64x80xf16, global>
    %quarter = tile.fill 0.25 : !tile.tile<64x80xf32, register>
    %shifted = tile.add %x, %quarter : !tile.tile<64x80xf32, register>
    %yb = tile.cast %shifted : !tile.tile<64x80xf32, register> -> !tile.tile<64x80xbf16, register>
    %ybw = tile.view %YB[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x80xbf16, global>
    tile.store_global %yb, %ybw : !tile.tile<64x80xbf16, register>, !tile.tile<64x80xbf16, global>
    %rs = tile.row_sum %sq : !tile.tile<64x80xf32, register> -> !tile.tile<64xf32, register>
    %rw = tile.view %R[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %rs, %rw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
