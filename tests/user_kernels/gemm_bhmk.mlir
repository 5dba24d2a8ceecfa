// A GEMM batched over two leading dims, as a multi-head projection with per-head weights: Y[b, h] = X[b, h] W[h],
// X [B, H, M, K] bf16, W [H, K, N] bf16, Y [B, H, M, N] f32, any B, H, M, N, K (specialized on K and N multiples
// of 8). The grid is M blocks x H x B (a dimension expression holds one name: B * H is refused), so each block loops
// over the N blocks itself, a K loop of copies inside a loop over N blocks.
builtin.module {
  func.func @gemm_bhmk(
      %X: !tile.tile<?x?x?x?xbf16, global> {tile.dims = #tile.dims<B, H, M, K>},
      %Wt: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<H, K, N>},
      %Y: !tile.tile<?x?x?x?xf32, global> {tile.dims = #tile.dims<B, H, M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), H, B>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %h = tile.program_id y : index
    %b = tile.program_id z : index
    %n_size = tile.dim %Wt[2] : !tile.tile<?x?x?xbf16, global>
    %n_n = arith.ceildivui %n_size, %c64 : index
    %m0 = arith.muli %bm, %c64 : index
    %k_size = tile.dim %X[3] : !tile.tile<?x?x?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    scf.for %bn = %c0 to %n_n step %c1 {
    %n0 = arith.muli %bn, %c64 : index
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%b, %h, %m0, %k0] : !tile.tile<?x?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %Wt[%h, %k0, %n0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %x_smem, %w_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %yw = tile.view %Y[%b, %h, %m0, %n0] : !tile.tile<?x?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    }
    func.return
  }
}
