// Every kind of elementwise op at once on X, Y [M, N] f32 (any M, N):
//   Z = where(x > y, sigmoid(x) * rsqrt(|y| + 1), reciprocal(1 + |x|) / max(min(x, y), 0.25))
//   W = min(max(x * y, -2), 2) - |x - y| / (1 + y^2)
// One block per 64 x 64 tile.
builtin.module {
  func.func @elementwise_mix(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Z: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %W: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %y = tile.load %yw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %quarter = tile.fill 0.25 : !tile.tile<64x64xf32, register>
    %two = tile.fill 2.0 : !tile.tile<64x64xf32, register>
    %mtwo = tile.fill -2.0 : !tile.tile<64x64xf32, register>
    %ax = tile.abs %x : !tile.tile<64x64xf32, register>
    %ay = tile.abs %y : !tile.tile<64x64xf32, register>
    %sx = tile.sigmoid %x : !tile.tile<64x64xf32, register>
    %ay1 = tile.add %ay, %one : !tile.tile<64x64xf32, register>
    %r = tile.rsqrt %ay1 : !tile.tile<64x64xf32, register>
    %big = tile.mul %sx, %r : !tile.tile<64x64xf32, register>
    %ax1 = tile.add %one, %ax : !tile.tile<64x64xf32, register>
    %rc = tile.reciprocal %ax1 : !tile.tile<64x64xf32, register>
    %mn = tile.element_min %x, %y : !tile.tile<64x64xf32, register>
    %den = tile.element_max %mn, %quarter : !tile.tile<64x64xf32, register>
    %small = tile.div %rc, %den : !tile.tile<64x64xf32, register>
    %gt = tile.cmp gt %x, %y : !tile.tile<64x64xf32, register>
    %z = tile.select %gt, %big, %small : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %zw = tile.view %Z[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %z, %zw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %xy = tile.mul %x, %y : !tile.tile<64x64xf32, register>
    %lo = tile.element_max %xy, %mtwo : !tile.tile<64x64xf32, register>
    %cl = tile.element_min %lo, %two : !tile.tile<64x64xf32, register>
    %dxy = tile.sub %x, %y : !tile.tile<64x64xf32, register>
    %adxy = tile.abs %dxy : !tile.tile<64x64xf32, register>
    %y2 = tile.mul %y, %y : !tile.tile<64x64xf32, register>
    %y21 = tile.add %one, %y2 : !tile.tile<64x64xf32, register>
    %q = tile.div %adxy, %y21 : !tile.tile<64x64xf32, register>
    %w = tile.sub %cl, %q : !tile.tile<64x64xf32, register>
    %ww = tile.view %W[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %w, %ww : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
