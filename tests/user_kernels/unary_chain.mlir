// Elementwise chain over X [M, N] (N <= 64): Y = sigmoid(x) * tanh(sqrt(|x|)) + exp2(min(x, 4)) * rsqrt(1 + x^2)
//   + log2(1 + |x|) - 1 / (2 + |x|) - exp(-x^2 / 2) + max(x, -x / 2)
builtin.module {
  func.func @unary_chain(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %two = tile.fill 2.0 : !tile.tile<64x64xf32, register>
    %four = tile.fill 4.0 : !tile.tile<64x64xf32, register>
    %sg = tile.sigmoid %x : !tile.tile<64x64xf32, register>
    %ax = tile.abs %x : !tile.tile<64x64xf32, register>
    %sq = tile.sqrt %ax : !tile.tile<64x64xf32, register>
    %th = tile.tanh %sq : !tile.tile<64x64xf32, register>
    %t1 = tile.mul %sg, %th : !tile.tile<64x64xf32, register>
    %mn = tile.element_min %x, %four : !tile.tile<64x64xf32, register>
    %e2 = tile.exp2 %mn : !tile.tile<64x64xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %p = tile.add %one, %x2 : !tile.tile<64x64xf32, register>
    %rs = tile.rsqrt %p : !tile.tile<64x64xf32, register>
    %t2 = tile.fma %e2, %rs, %t1 : !tile.tile<64x64xf32, register>
    %pa = tile.add %one, %ax : !tile.tile<64x64xf32, register>
    %l2 = tile.log2 %pa : !tile.tile<64x64xf32, register>
    %t3 = tile.add %t2, %l2 : !tile.tile<64x64xf32, register>
    %d = tile.add %two, %ax : !tile.tile<64x64xf32, register>
    %rc = tile.reciprocal %d : !tile.tile<64x64xf32, register>
    %t4 = tile.sub %t3, %rc : !tile.tile<64x64xf32, register>
    %h = tile.scale %x2 by -0.5 : !tile.tile<64x64xf32, register>
    %g = tile.exp %h : !tile.tile<64x64xf32, register>
    %t5 = tile.sub %t4, %g : !tile.tile<64x64xf32, register>
    %nx = tile.neg %x : !tile.tile<64x64xf32, register>
    %nh = tile.scale %nx by 0.5 : !tile.tile<64x64xf32, register>
    %mx = tile.element_max %x, %nh : !tile.tile<64x64xf32, register>
    %y = tile.add %t5, %mx : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
