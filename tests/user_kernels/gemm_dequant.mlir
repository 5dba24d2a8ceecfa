// Per-token / per-channel dequant: C = bf16(silu((A B) * srow[:, None] * scol[None, :])), A [M, K] bf16, B^T given
// as BT [N, K] bf16 (transpose_b), srow [M] f32, scol [N] f32.
builtin.module {
  func.func @gemm_dequant(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %BT: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<N, K>},
      %srow: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %scol: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
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
      %bw = tile.view %BT[%n0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %rw = tile.view %srow[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %r = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %cwv = tile.view %scol[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %cv = tile.load_broadcast %cwv : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x1 = tile.mul %acc, %r : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %x2 = tile.mul %x1, %cv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %y = tile.silu %x2 : !tile.tile<64x64xf32, register>
    %out = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
