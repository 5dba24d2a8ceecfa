// A matrix-vector product in f32 without the tensor core: Y = A x, A [M, K] f32, x [K] f32, Y [M] f32, any M (1
// included) and K (1000 included: a loop over K blocks of 64 whose last block is partial, its tail read as 0).
// x comes in as a column vector [1, 64] (tile.load_broadcast) per K block; a row sum per block is added to
// the running row vector carried by the loop.
builtin.module {
  func.func @gemv(
      %A: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, K>},
      %x: !tile.tile<?xf32, global> {tile.dims = #tile.dims<K>},
      %Y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %k = tile.dim %A[1] : !tile.tile<?x?xf32, global>
    %nk = arith.ceildivui %k, %c64 : index
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %y = scf.for %j = %c0 to %nk step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %a = tile.load %aw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %xw = tile.view %x[%k0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
      %xv = tile.load_broadcast %xw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
      %p = tile.mul %a, %xv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %s = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.add %acc, %s : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %yw = tile.view %Y[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
