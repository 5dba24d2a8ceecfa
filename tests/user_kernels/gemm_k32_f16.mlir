// A GEMM with a K block of 32: C = f16(A B), A [M, K] f16, B [K, N] f16, C [M, N] f16, any M, N, K.
// One block per 64 x 64 tile of C; K in steps of 32, so A's shared tile [64, 32] has rows of 64 bytes and the
// 64-byte swizzle (B's [32, 64] rows are 128 bytes: the 128-byte swizzle). tile.specialize lets sizes whose
// rows are not 16-byte multiples (K = 135, N = 7) take the path without TMA.
builtin.module {
  func.func @gemm_k32(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xf16, global>
    %n_k = arith.ceildivui %k_size, %c32 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x32xf16, shared, swizzle 64>
    %b_smem = tile.alloc_shared : !tile.tile<32x64xf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c32 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x32xf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x32xf16, global>, !tile.tile<64x32xf16, shared, swizzle 64>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<32x64xf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<32x64xf16, global>, !tile.tile<32x64xf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x32xf16, shared, swizzle 64>, !tile.tile<32x64xf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %out = tile.cast %acc : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    func.return
  }
}
