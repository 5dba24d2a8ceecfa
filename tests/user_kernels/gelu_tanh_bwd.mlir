// The backward of the tanh GELU (PyTorch's gelu(approximate="tanh")), as a training kernel fuses it after the
// next layer's input gradient: with u = k (x + c x^3), t = tanh u, k = sqrt(2 / pi), c = 0.044715,
//   DX = DY (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)).
// X, DY and DX [M, N] bf16, any M, N; the math in f32 (bf16 tiles are cast first), DX rounded to bf16 once.
// One block per 64 x 64 tile of a 2-D grid.
builtin.module {
  func.func @gelu_tanh_bwd(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %DY: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %DX: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %xh = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %dyh = tile.load %dyw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %dy = tile.cast %dyh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %x3 = tile.mul %x2, %x : !tile.tile<64x64xf32, register>
    %cx3 = tile.scale %x3 by 0.044715 : !tile.tile<64x64xf32, register>
    %inner = tile.add %x, %cx3 : !tile.tile<64x64xf32, register>
    %u = tile.scale %inner by 0.7978845608028654 : !tile.tile<64x64xf32, register>
    %t = tile.tanh %u : !tile.tile<64x64xf32, register>
    %t1 = tile.add %t, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %left = tile.scale %t1 by 0.5 : !tile.tile<64x64xf32, register>
    %tt = tile.mul %t, %t : !tile.tile<64x64xf32, register>
    %sech2 = tile.sub %one, %tt : !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
    %x2c = tile.scale %x2 by 0.134145 : !tile.tile<64x64xf32, register>
    %du = tile.add %x2c, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %duk = tile.scale %du by 0.3989422804014327 : !tile.tile<64x64xf32, register>
    %xs = tile.mul %x, %sech2 : !tile.tile<64x64xf32, register>
    %right = tile.mul %xs, %duk : !tile.tile<64x64xf32, register>
    %grad = tile.add %left, %right : !tile.tile<64x64xf32, register>
    %dx = tile.mul %dy, %grad : !tile.tile<64x64xf32, register>
    %dxh = tile.cast %dx : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %dxw = tile.view %DX[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %dxh, %dxw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
