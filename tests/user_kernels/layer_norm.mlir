// A LayerNorm-like row kernel from existing ops: y = max(1, gamma * (x - mean + 0.5) / (var + eps) + beta) per
// row of a [M, 128] f32 input, gamma and beta broadcast rows loaded first (as a user writes them), and fills
// at operand positions no instruction takes an immediate in. Refused before (264 registers per thread: gamma,
// beta and the 0.5 fill held as whole tiles); now 198.
builtin.module {
  func.func @layer_norm(
      %X: !tile.tile<?x128xf32, global> {tile.dims = #tile.dims<M, 128>},
      %gamma: !tile.tile<128xf32, global> {tile.dims = #tile.dims<128>},
      %beta: !tile.tile<128xf32, global> {tile.dims = #tile.dims<128>},
      %Y: !tile.tile<?x128xf32, global> {tile.dims = #tile.dims<M, 128>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 128)>} {
    %c0 = arith.constant 0 : index
    %c128 = arith.constant 128 : index
    %block = tile.program_id x : index
    %m0 = arith.muli %block, %c128 : index
    %g_window = tile.view %gamma[%c0] : !tile.tile<128xf32, global> -> !tile.tile<128xf32, global>
    %g = tile.load_broadcast %g_window : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
    %b_window = tile.view %beta[%c0] : !tile.tile<128xf32, global> -> !tile.tile<128xf32, global>
    %b = tile.load_broadcast %b_window : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x128xf32, global> -> !tile.tile<128x128xf32, global>
    %x = tile.load %x_window : !tile.tile<128x128xf32, global> -> !tile.tile<128x128xf32, register>
    %sum = tile.row_sum %x : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %mean = tile.scale %sum by 0.0078125 : !tile.tile<128xf32, register>
    %xc = tile.sub_rows %x, %mean : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %sq = tile.mul %xc, %xc : !tile.tile<128x128xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %var = tile.scale %ss by 0.0078125 : !tile.tile<128xf32, register>
    %eps = tile.fill 1.0e-05 : !tile.tile<128xf32, register>
    %den = tile.add %eps, %var : !tile.tile<128xf32, register>
    %shift = tile.fill 0.5 : !tile.tile<128x128xf32, register>
    %xs = tile.add %shift, %xc : !tile.tile<128x128xf32, register>
    %xn = tile.div_rows %xs, %den : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %y = tile.fma %g, %xn, %b : !tile.tile<128x128xf32, register>
    %one = tile.fill 1.0 : !tile.tile<128x128xf32, register>
    %y1 = tile.element_max %one, %y : !tile.tile<128x128xf32, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x128xf32, global> -> !tile.tile<128x128xf32, global>
    tile.store_global %y1, %y_window : !tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, global>
    func.return
  }
}
