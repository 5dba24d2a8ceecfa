// C = mask(silu(cap * tanh((A x B) / cap))): a GEMM [M, K] x [K, N] (bf16 in, f32 out, K in steps of 64) with a
// soft-capping and SiLU epilogue, then a mask from absolute coordinates: C[i, j] = -inf where j > i (the upper
// triangle, from tile.iota with the block's first row and column as offsets, tile.cmp and tile.select).
builtin.module {
  func.func @gemm_softcap(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
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
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %init) -> (!tile.tile<64x64xf32, register>) {
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
    %scaled = tile.scale %acc by 0.0625 : !tile.tile<64x64xf32, register>
    %t = tile.tanh %scaled : !tile.tile<64x64xf32, register>
    %capped = tile.scale %t by 16.0 : !tile.tile<64x64xf32, register>
    %act = tile.silu %capped : !tile.tile<64x64xf32, register>
    %row = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
    %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %above = tile.cmp gt %col, %row : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
    %neg_inf = tile.fill -inf : !tile.tile<64x64xf32, register>
    %c = tile.select %above, %neg_inf, %act : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %c, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
