// Back-to-back GEMM: C = (A B0) B1, A [M, K] bf16, B0 [K, 64] bf16, B1 [64, N] bf16, C [M, N] f32.
// One block per 64 x 64 tile of C. The intermediate H = A B0 (a 64 x 64 f32 accumulator, K in steps of 64)
// never leaves the chip: it is rounded to bf16 in registers (tile.cast) and fed to the second tile.mma as its
// register A operand, against B1's 64 x 64 tile in shared memory. The reference rounds H to bf16 likewise.
builtin.module {
  func.func @b2b_gemm(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B0: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<K, 64>},
      %B1: !tile.tile<64x?xbf16, global> {tile.dims = #tile.dims<64, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b0_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b1_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    // B1's tile does not depend on K: start its copy first; the loop's first wait covers it.
    %b1w = tile.view %B1[%c0, %n0] : !tile.tile<64x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %b1w, %b1_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %h = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B0[%k0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b0_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b0_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %h_bf16 = tile.cast %h : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %c = tile.mma %h_bf16, %b1_smem, %zero : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %c, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
