// An attention-like back-to-back GEMM at head_dim 96, without the softmax: O = sum over key blocks of
// bf16(Q K^T * 0.125) V, Q [M, 96] bf16, K [N, 96] bf16, V [N, 96] bf16, O [M, 96] f32, any M and N.
// One block per 64 queries loops over blocks of 64 keys: S = Q K^T (transpose_b, K = 96 contracted), scaled
// and rounded to bf16 in registers, is the register A operand of P V (a wgmma N of 96). Keys past N read as 0
// in K and in V, so they add nothing.
builtin.module {
  func.func @b2b_hd96(
      %Q: !tile.tile<?x96xbf16, global> {tile.dims = #tile.dims<M, 96>},
      %K: !tile.tile<?x96xbf16, global> {tile.dims = #tile.dims<N, 96>},
      %V: !tile.tile<?x96xbf16, global> {tile.dims = #tile.dims<N, 96>},
      %O: !tile.tile<?x96xf32, global> {tile.dims = #tile.dims<M, 96>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %m0 = arith.muli %bm, %c64 : index
    %n = tile.dim %K[0] : !tile.tile<?x96xbf16, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %q_smem = tile.alloc_shared : !tile.tile<64x96xbf16, shared, swizzle 64>
    %k_smem = tile.alloc_shared : !tile.tile<64x96xbf16, shared, swizzle 64>
    %v_smem = tile.alloc_shared : !tile.tile<64x96xbf16, shared, swizzle 64>
    %qw = tile.view %Q[%m0, %c0] : !tile.tile<?x96xbf16, global> -> !tile.tile<64x96xbf16, global>
    tile.cp_async %qw, %q_smem : !tile.tile<64x96xbf16, global>, !tile.tile<64x96xbf16, shared, swizzle 64>
    tile.cp_commit_group
    %zs = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %zo = tile.fill 0.0 : !tile.tile<64x96xf32, register>
    %o = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%acc = %zo) -> (!tile.tile<64x96xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %kw = tile.view %K[%n0, %c0] : !tile.tile<?x96xbf16, global> -> !tile.tile<64x96xbf16, global>
      tile.cp_async %kw, %k_smem : !tile.tile<64x96xbf16, global>, !tile.tile<64x96xbf16, shared, swizzle 64>
      %vw = tile.view %V[%n0, %c0] : !tile.tile<?x96xbf16, global> -> !tile.tile<64x96xbf16, global>
      tile.cp_async %vw, %v_smem : !tile.tile<64x96xbf16, global>, !tile.tile<64x96xbf16, shared, swizzle 64>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s = tile.mma %q_smem, %k_smem, %zs transpose_b : !tile.tile<64x96xbf16, shared, swizzle 64>, !tile.tile<64x96xbf16, shared, swizzle 64>, !tile.tile<64x64xf32, register>
      %ss = tile.scale %s by 0.125 : !tile.tile<64x64xf32, register>
      %p = tile.cast %ss : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %acc2 = tile.mma %p, %v_smem, %acc : !tile.tile<64x64xbf16, register>, !tile.tile<64x96xbf16, shared, swizzle 64>, !tile.tile<64x96xf32, register>
      tile.barrier
      scf.yield %acc2 : !tile.tile<64x96xf32, register>
    }
    %ow = tile.view %O[%m0, %c0] : !tile.tile<?x96xf32, global> -> !tile.tile<64x96xf32, global>
    tile.store_global %o, %ow : !tile.tile<64x96xf32, register>, !tile.tile<64x96xf32, global>
    func.return
  }
}
