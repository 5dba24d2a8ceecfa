// One tensor read twice through two views, as a user writes finite differences: X [M, N] f32 (any M, N);
// block (x, y) loads the window at [64x, 64y] and the windows one column and one row further on, and writes
// DX[i, j] = X[i, j + 1] - X[i, j] and DY[i, j] = X[i + 1, j] - X[i, j], reading 0 past the tensor's last column
// and row (a window's elements outside the tensor load as 0).
builtin.module {
  func.func @two_views(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DX: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %m1 = arith.addi %m0, %c1 : index
    %n1 = arith.addi %n0, %c1 : index
    %here = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %right = tile.view %X[%m0, %n1] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %below = tile.view %X[%m1, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %here : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %xr = tile.load %right : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %xb = tile.load %below : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %dx = tile.sub %xr, %x : !tile.tile<64x64xf32, register>
    %dy = tile.sub %xb, %x : !tile.tile<64x64xf32, register>
    %dxw = tile.view %DX[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %dx, %dxw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %dy, %dyw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
