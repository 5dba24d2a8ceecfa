// Dynamic per-token FP8 quantization, as FP8 inference quantizes activations before a scaled GEMM: for X [M, N]
// f32 (N <= 128, even: the bytes are stored in pairs),
//   amax[i] = max(max_j |X[i, j]|, 2^-20),   Y[i, :] = e4m3(X[i, :] * (448 / amax[i])),   S[i] = amax[i] / 448,
// Y [M, N] f8E4M3FN (rounded to nearest even, saturated; NaN stays NaN), S [M] f32 the dequantization scale
// (X ~ Y S). A row of zeros gets amax = 2^-20 and Y = 0, not NaN. Columns past N read as 0 (|0| adds nothing
// to the max). Every operation is one f32 rounding (tile.div is div.rn.f32), so every level gives the same bytes.
builtin.module {
  func.func @fp8_token_quant(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>,
                  tile.divisible = {N = 2 : i64}} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %ax = tile.abs %x : !tile.tile<64x128xf32, register>
    %rmax = tile.row_max %ax : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %tiny = tile.fill 9.5367431640625e-07 : !tile.tile<64xf32, register>
    %amax = tile.element_max %rmax, %tiny : !tile.tile<64xf32, register>
    %fmax = tile.fill 448.0 : !tile.tile<64xf32, register>
    %scale = tile.div %fmax, %amax : !tile.tile<64xf32, register>
    %y = tile.mul %x, %scale : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %q = tile.cast %y : !tile.tile<64x128xf32, register> -> !tile.tile<64x128xf8E4M3FN, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x128xf8E4M3FN, global>
    tile.store_global %q, %yw : !tile.tile<64x128xf8E4M3FN, register>, !tile.tile<64x128xf8E4M3FN, global>
    %s = tile.div %amax, %fmax : !tile.tile<64xf32, register>
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %s, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
