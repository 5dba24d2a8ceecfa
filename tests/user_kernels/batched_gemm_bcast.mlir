// A batched GEMM whose weight is shared by every batch (a broadcast operand: one W read by each batch's
// blocks), with a bias and a bf16 output, as a linear layer applied to a batch of sequences:
//   C[b] = bf16(A[b] W + bias[None, :]),   A [batch, M, K] bf16, W [K, N] bf16, bias [N] f32, C [batch, M, N] bf16,
// any batch, M, N, K (no tile.divisible: copies by threads; K not a multiple of the 64-wide K step reads 0
// past K; rows of C of an odd length are stored one element at a time). Grid: M blocks x N blocks x batch.
builtin.module {
  func.func @batched_gemm_bcast(
      %A: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<batch, M, K>},
      %W: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %BIAS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<batch, M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64), batch>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %z = tile.program_id z : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %W[0] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%z, %m0, %k0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %W[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %w_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %bw = tile.view %BIAS[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bias = tile.load_broadcast %bw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %y = tile.add %acc, %bias : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%z, %m0, %n0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %yh, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
