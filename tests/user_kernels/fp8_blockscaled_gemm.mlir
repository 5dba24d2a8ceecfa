// An FP8 GEMM with block scales (DeepSeek-V3's recipe): each 128-wide K block j has its own scales, a per-row
// SAT[j, i] for A (stored K-block-major) and one SB[j] for B, applied to that block's product in f32:
//   C = bf16(sum_j (A_j Bt_j^T) * SAT[j, :]^T * SB[j]), A [M, K], Bt [N, K] f8E4M3FN, SAT [ceildiv(K, 128), M],
// SB [ceildiv(K, 128)] f32, C [M, N] bf16, K a multiple of 16. Each trip multiplies into a fresh accumulator and
// scales it after the trip's trailing barrier (the shared tiles are free once the product is in registers): a
// loop of another shape than pipeline-loops takes, which the default pipeline compiles single-stage.
builtin.module {
  func.func @fp8_blockscaled_gemm(
      %A: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<M, K>},
      %Bt: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<N, K>},
      %SAT: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<ceildiv(K, 128), M>},
      %SB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(K, 128)>},
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
      %p = tile.mma %a_smem, %b_smem, %zero transpose_b : !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      %saw = tile.view %SAT[%j, %m0] : !tile.tile<?x?xf32, global> -> !tile.tile<64xf32, global>
      %sa = tile.load %saw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
      %sbw = tile.view %SB[%j] : !tile.tile<?xf32, global> -> !tile.tile<1xf32, global>
      %sb = tile.load_broadcast %sbw : !tile.tile<1xf32, global> -> !tile.tile<64x1xf32, register>
      %pa = tile.mul %p, %sa : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %pb = tile.mul %pa, %sb : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
      %s2 = tile.add %s, %pb : !tile.tile<64x64xf32, register>
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %out = tile.cast %acc : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
