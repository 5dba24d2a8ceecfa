// Atomic adds of one value per row and one per column inside a pipelined loop: the GEMM C = f16(gelu(A B + bias)
// + R) of gemm_k_step, and per K step S[i] += max_j acc[i, j] (the running accumulator's row max, an [64, 1]
// column) and T[b, :] += 1 (a [1, 64] column vector: T counts the K steps of row block b), each through an
// in_bounds window (M a multiple of 64). Neither is a whole-row tile, so neither is the producer's bulk
// reduction: each is added once per row or column, by `red` (atomic-add=auto, red or bulk alike).
builtin.module {
  func.func @gemm_atomic_stats(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %R: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>},
      %C: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %S: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>, tile.role = "out"},
      %T: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<ceildiv(M, 64), 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>, tile.divisible = {K = 8 : i64, N = 8 : i64}} {
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
    %acc = scf.for %k0 = %c0 to %k_size step %c64 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      %rm = tile.row_max %s2 : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %rc = tile.reshape %rm : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
      %sw = tile.view %S[%m0, %c0] in_bounds : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
      tile.atomic_add %rc, %sw : !tile.tile<64x1xf32, register>, !tile.tile<64x1xf32, global>
      %cv = tile.fill 1.0 : !tile.tile<1x64xf32, register>
      %tw = tile.view %T[%bm, %c0] in_bounds : !tile.tile<?x64xf32, global> -> !tile.tile<1x64xf32, global>
      tile.atomic_add %cv, %tw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %biasw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %biasw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %x3 = tile.mul %x2, %x : !tile.tile<64x64xf32, register>
    %cube = tile.scale %x3 by 0.044715 : !tile.tile<64x64xf32, register>
    %inner = tile.add %x, %cube : !tile.tile<64x64xf32, register>
    %arg = tile.scale %inner by 0.7978845608 : !tile.tile<64x64xf32, register>
    %t = tile.tanh %arg : !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %t1 = tile.add %t, %one : !tile.tile<64x64xf32, register>
    %xt = tile.mul %x, %t1 : !tile.tile<64x64xf32, register>
    %g = tile.scale %xt by 0.5 : !tile.tile<64x64xf32, register>
    %rw = tile.view %R[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    %rh = tile.load %rw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
    %r = tile.cast %rh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %g, %r : !tile.tile<64x64xf32, register>
    %out = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    func.return
  }
}
