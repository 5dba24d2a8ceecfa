// A loop whose trip count comes from an input scalar: STEPS [1] i32 holds T (0 included), read with
// tile.load_index. Y = X * 2^-T computed as T halvings in a loop (exact in f32 above the subnormals), and
// ACC = sum_{t < T} (X + t) with the trip's t spread by tile.splat of the induction variable.
// X, Y, ACC [M, 64] f32, one block per 64 rows.
builtin.module {
  func.func @scalar_trips(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %STEPS: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %ACC: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %t = tile.load_index %STEPS[%c0] : !tile.tile<1xi32, global>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %r:2 = scf.for %i = %c0 to %t step %c1 iter_args(%y = %x, %a = %zero) -> (!tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>) {
      %y2 = tile.scale %y by 0.5 : !tile.tile<64x64xf32, register>
      %ii = arith.index_cast %i : index to i32
      %if = arith.sitofp %ii : i32 to f32
      %it = tile.splat %if : f32 -> !tile.tile<64x64xf32, register>
      %xi = tile.add %x, %it : !tile.tile<64x64xf32, register>
      %a2 = tile.add %a, %xi : !tile.tile<64x64xf32, register>
      scf.yield %y2, %a2 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    }
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %r#0, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %aw = tile.view %ACC[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %r#1, %aw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
