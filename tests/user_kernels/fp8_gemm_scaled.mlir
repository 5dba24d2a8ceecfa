// An FP8 GEMM with per-row and per-column scales (the DeepSeek/TransformerEngine dequantization epilogue):
//   C = bf16((A B^T) * sa[:, None] * sb[None, :]), A [M, K] f8E4M3FN, Bt [N, K] f8E4M3FN (B stored K-major, as
// the 8-bit tensor core takes it: tile.mma transpose_b), sa [M], sb [N] f32, C [M, N] bf16. K steps of 128
// (128 one-byte elements: one 128-byte swizzled row); K must be a multiple of 16 (16-byte rows for TMA).
builtin.module {
  func.func @fp8_gemm_scaled(
      %A: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<M, K>},
      %Bt: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<N, K>},
      %SA: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %SB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.divisible = {K = 16 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xf8E4M3FN, global>
    %n_k = arith.ceildivui %k_size, %c128 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c128 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x128xf8E4M3FN, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x128xf8E4M3FN, global>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
      %bw = tile.view %Bt[%n0, %k0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x128xf8E4M3FN, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x128xf8E4M3FN, global>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s transpose_b : !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %saw = tile.view %SA[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %sa = tile.load %saw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %sbw = tile.view %SB[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %sb = tile.load_broadcast %sbw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x = tile.mul %acc, %sa : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %y = tile.mul %x, %sb : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %out = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
