// Elementwise math a user writes with tile.sin / tile.cos / tile.exp / tile.log, on X [S, 64] f32 (S any):
// PE[s, j] = X[s, j] + sin(s w_i) for even j = 2 i, + cos(s w_i) for odd j, w_i = 10000^(-2 i / 64) computed in
//   the kernel as exp2(i * (-2 log2(10000) / 64)) (the Transformer's sinusoidal position embedding);
// SP = softplus(X) = max(x, 0) + log(1 + exp(-|x|)) (the stable form); MISH = x tanh(softplus(x)).
builtin.module {
  func.func @posembed_softplus(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>},
      %PE: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>, tile.role = "out"},
      %SP: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>, tile.role = "out"},
      %MISH: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(S, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %rows = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols : !tile.tile<1x64xi32, register>
    %one_i = tile.fill 1 : !tile.tile<1x1xi32, register>
    %pair = tile.shrs %cols, %one_i : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %odd = tile.and %cols, %one_i : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %pairf = tile.cast %pair : !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %k = tile.fill -0.41524101186092029 : !tile.tile<1x1xf32, register>
    %e = tile.mul %pairf, %k : !tile.tile<1x64xf32, register>, !tile.tile<1x1xf32, register>
    %w = tile.exp2 %e : !tile.tile<1x64xf32, register>
    %pos = tile.cast %rows : !tile.tile<64x1xi32, register> -> !tile.tile<64x1xf32, register>
    %angle = tile.mul %pos, %w : !tile.tile<64x1xf32, register>, !tile.tile<1x64xf32, register>
    %s = tile.sin %angle : !tile.tile<64x64xf32, register>
    %c = tile.cos %angle : !tile.tile<64x64xf32, register>
    %is_even = tile.cmp ne %odd, %one_i : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %pe = tile.select %is_even, %s, %c : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %y = tile.add %x, %pe : !tile.tile<64x64xf32, register>
    %pw = tile.view %PE[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %pw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %zero = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %ax = tile.abs %x : !tile.tile<64x64xf32, register>
    %nax = tile.neg %ax : !tile.tile<64x64xf32, register>
    %ex = tile.exp %nax : !tile.tile<64x64xf32, register>
    %ex1 = tile.add %ex, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %l = tile.log %ex1 : !tile.tile<64x64xf32, register>
    %relu = tile.element_max %x, %zero : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %sp = tile.add %relu, %l : !tile.tile<64x64xf32, register>
    %sw = tile.view %SP[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %sp, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %t = tile.tanh %sp : !tile.tile<64x64xf32, register>
    %mish = tile.mul %x, %t : !tile.tile<64x64xf32, register>
    %mw = tile.view %MISH[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %mish, %mw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
