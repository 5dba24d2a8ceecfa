// A quantize epilogue writing FP8 (FP8 training's activations and gradients, stored for the next GEMM):
//   Y = fp8(X) for an f32 X [M, N], Y [M, N] f8E4M3FN, each element rounded to nearest even and saturated
// (past the largest finite value, 448 for e4m3, 57344 for e5m2, and infinities become it with their sign; NaN
// stays NaN), as `cvt.rn.satfinite.e4m3x2.f32` does. Any M; N a multiple of 2 (below Tile IR the bytes are
// stored in pairs, two bytes at an even address: without the promise the store is refused by name at its line).
builtin.module {
  func.func @fp8_quantize(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.divisible = {N = 2 : i64}} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %q = tile.cast %x : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf8E4M3FN, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x64xf8E4M3FN, global>
    tile.store_global %q, %yw : !tile.tile<64x64xf8E4M3FN, register>, !tile.tile<64x64xf8E4M3FN, global>
    func.return
  }
}
