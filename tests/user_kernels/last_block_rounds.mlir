// Y = 4 X, and in the last row block rint(4 X) (ties to even): an op only one block runs (an scf.if on the block
// id), X, Y [M, N] f32, N <= 64. `tessera.validate` must look for the first diverging op of a wrong lowering of
// tile.rint in that block, not in block (0, 0, 0).
builtin.module {
  func.func @last_block_rounds(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %nb = arith.ceildivui %m, %c64 : index
    %last = arith.subi %nb, %c1 : index
    %is_last = arith.cmpi eq, %b, %last : index
    %x4 = tile.scale %x by 4.0 : !tile.tile<64x64xf32, register>
    %y = scf.if %is_last -> (!tile.tile<64x64xf32, register>) {
      %r = tile.rint %x4 : !tile.tile<64x64xf32, register>
      scf.yield %r : !tile.tile<64x64xf32, register>
    } else {
      scf.yield %x4 : !tile.tile<64x64xf32, register>
    }
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
