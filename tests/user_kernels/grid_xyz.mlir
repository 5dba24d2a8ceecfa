// A grid with all three axes: X [B, M, N] f32, Y [B, M, N] f32, W [B] f32; block (x, y, z) takes rows 64x..,
// columns 64y.. of batch z: Y[z, i, j] = X[z, i, j] * W[z] + 1000 z + i - j (the coordinates from program ids and
// tile.iota, W[z] a per-block scalar read as a one-element 1-D window broadcast to a column).
builtin.module {
  func.func @grid_xyz(
      %X: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<B>},
      %Y: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64), B>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %c1000 = arith.constant 1000 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %bz = tile.program_id z : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %xw = tile.view %X[%bz, %m0, %n0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %ww = tile.view %W[%bz] : !tile.tile<?xf32, global> -> !tile.tile<1xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<1xf32, global> -> !tile.tile<64x1xf32, register>
    %xs = tile.mul %x, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %off = arith.muli %bz, %c1000 : index
    %rows = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %ot = tile.splat %off : index -> !tile.tile<64x1xi32, register>
    %ro = tile.add %rows, %ot : !tile.tile<64x1xi32, register>
    %d = tile.sub %ro, %cols : !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register>
    %df = tile.cast %d : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %xs, %df : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%bz, %m0, %n0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
