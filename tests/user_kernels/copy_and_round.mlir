// Two outputs, the second computed: Y = X (a copy) and Q = rint(4 X) (ties to even), X, Y, Q [M, N] f32, any M
// and N. `tessera.validate` must name Q's elements when a lowering of tile.rint is wrong, not Y's.
builtin.module {
  func.func @copy_and_round(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %Q: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %x, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %x4 = tile.scale %x by 4.0 : !tile.tile<64x64xf32, register>
    %q = tile.rint %x4 : !tile.tile<64x64xf32, register>
    %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %q, %qw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
