// f16 and bf16 inputs, f32 arithmetic, an output in each dtype: for A [M, N] f16 and B [M, N] bf16 (N even),
//   S = A + B and P = A * B, computed in f32 (tile.cast widens both), stored as S32 f32, S16 f16, SB bf16
// (round to nearest even), and the row sums of P in f32 (RS [M]). N <= 64, any even N: the kernel promises
// tile.divisible N by 2, so 16-bit rows move as packed pairs.
builtin.module {
  func.func @mixed_dtypes(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %S32: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %S16: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %SB: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %RS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>,
                  tile.divisible = {N = 2 : i64}} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %aw = tile.view %A[%m0, %c0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    %ah = tile.load %aw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
    %bw = tile.view %B[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %bh = tile.load %bw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %a = tile.cast %ah : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
    %bb = tile.cast %bh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %s = tile.add %a, %bb : !tile.tile<64x64xf32, register>
    %p = tile.mul %a, %bb : !tile.tile<64x64xf32, register>
    %s16 = tile.cast %s : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %sb = tile.cast %s : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %rs = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %w1 = tile.view %S32[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %s, %w1 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %w2 = tile.view %S16[%m0, %c0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %s16, %w2 : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    %w3 = tile.view %SB[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %sb, %w3 : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    %w4 = tile.view %RS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rs, %w4 : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
