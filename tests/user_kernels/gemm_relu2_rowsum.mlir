// A GEMM with Primer's squared-ReLU epilogue, f16 in, f32 accumulation, bf16 out, and the row sums of the
// activation added across the column blocks (a following RMSNorm's or an auxiliary loss's statistic, fused):
//   H = relu(A B + bias)^2 in f32,   C = bf16(H),   S[i] += sum_j H[i, j]   (S comes in zeroed),
// A [M, K] f16, B [K, N] f16, bias [N] bf16 (a checkpoint's), C [M, N] bf16, S [M] f32; any M, N, K (specialized
// on K and N multiples of 8). Columns past N: B and the bias read 0 there, so H is 0 and adds nothing to S.
builtin.module {
  func.func @gemm_relu2_rowsum(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %biasw = tile.view %bias[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>
    %bh = tile.load_broadcast %biasw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>
    %bv = tile.cast %bh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
    %x = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %z = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %r = tile.element_max %x, %z : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %h = tile.mul %r, %r : !tile.tile<64x64xf32, register>
    %out = tile.cast %h : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    %rs = tile.row_sum %h : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %rs, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
