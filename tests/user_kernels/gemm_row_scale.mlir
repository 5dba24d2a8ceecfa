// C = (A B) * s + r, per-row: A [M, K] bf16, B [K, N] bf16, s [M, 1] bf16 (a per-row scale, 2-D: one column),
// r [M] f16 (a per-row bias, 1-D), C [M, N] f32; any M, N, K. Blocks of 64 x 64, K in steps of 64. The scale is
// loaded as a bf16 column [64, 1], the bias as an f16 row vector [64] (each thread its two rows, one element
// each), both cast to f32 in registers and broadcast along the rows.
builtin.module {
  func.func @gemm_row_scale(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %S: !tile.tile<?x1xbf16, global> {tile.dims = #tile.dims<M, 1>},
      %R: !tile.tile<?xf16, global> {tile.dims = #tile.dims<M>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
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
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %sw = tile.view %S[%m0, %c0] : !tile.tile<?x1xbf16, global> -> !tile.tile<64x1xbf16, global>
    %sh = tile.load %sw : !tile.tile<64x1xbf16, global> -> !tile.tile<64x1xbf16, register>
    %sv = tile.cast %sh : !tile.tile<64x1xbf16, register> -> !tile.tile<64x1xf32, register>
    %rw = tile.view %R[%m0] : !tile.tile<?xf16, global> -> !tile.tile<64xf16, global>
    %rh = tile.load %rw : !tile.tile<64xf16, global> -> !tile.tile<64xf16, register>
    %rv = tile.cast %rh : !tile.tile<64xf16, register> -> !tile.tile<64xf32, register>
    %scaled = tile.mul %acc, %sv : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %y = tile.add %scaled, %rv : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
