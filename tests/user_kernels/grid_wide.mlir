// The widest grids a launch allows in y: X [B, M] f32 (B <= 65535 sequences of any length M); block (x, y)
// takes elements 64x .. 64x + 63 of sequence y: Y[y, i] = X[y, i] * 2 + y, the row offset from program id y as
// an i32 splat cast to f32. M = 65535 x 64 with B = 2 launches 65535 x 2 blocks; B = 65535 launches 1 x 65535.
builtin.module {
  func.func @grid_wide(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, M>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<B, M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), B>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %xw = tile.view %X[%by, %m0] : !tile.tile<?x?xf32, global> -> !tile.tile<64xf32, global>
    %x = tile.load %xw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %two = tile.fill 2.0 : !tile.tile<64xf32, register>
    %yi = tile.splat %by : index -> !tile.tile<64xi32, register>
    %yf = tile.cast %yi : !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
    %y = tile.fma %x, %two, %yf : !tile.tile<64xf32, register>
    %yw = tile.view %Y[%by, %m0] : !tile.tile<?x?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
