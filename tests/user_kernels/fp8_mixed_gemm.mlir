// A mixed FP8 GEMM (the tensor core's e5m2 x e4m3 form, gradients times weights in FP8 training):
//   C = A B^T in f32, A [M, K] f8E5M2, Bt [N, K] f8E4M3FN (K-major, tile.mma transpose_b), any M and N, K a
// multiple of 16 (16-byte rows for TMA: below Tile IR a one-byte tile is copied with TMA only, and without the
// promise the copy is refused by name at its line). K steps of 128; bytes past K read as 0.
builtin.module {
  func.func @fp8_mixed_gemm(
      %A: !tile.tile<?x?xf8E5M2, global> {tile.dims = #tile.dims<M, K>},
      %Bt: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<N, K>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
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
    %k_size = tile.dim %A[1] : !tile.tile<?x?xf8E5M2, global>
    %n_k = arith.ceildivui %k_size, %c128 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x128xf8E5M2, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c128 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf8E5M2, global> -> !tile.tile<64x128xf8E5M2, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x128xf8E5M2, global>, !tile.tile<64x128xf8E5M2, shared, swizzle 128>
      %bw = tile.view %Bt[%n0, %k0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x128xf8E4M3FN, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x128xf8E4M3FN, global>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s transpose_b : !tile.tile<64x128xf8E5M2, shared, swizzle 128>, !tile.tile<64x128xf8E4M3FN, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
