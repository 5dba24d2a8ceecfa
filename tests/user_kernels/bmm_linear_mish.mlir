// A batched linear layer with a Mish activation, as a grouped MLP writes it: Y[b] = f16(mish(X[b] W[b]^T)) with
// each batch's weight in nn.Linear's layout, X [batch, M, K] bf16, W [batch, N, K] bf16 (read transposed by
// tile.mma's transpose_b), Y [batch, M, N] f16; any batch, M, N, K (specialized on K multiples of 8).
// mish(x) = x tanh(softplus(x)), softplus(x) = log(1 + exp(x)), and x itself past 20 (PyTorch's threshold, where
// exp overflows long before log(1 + exp x) differs from x in f32). Grid: M blocks x N blocks x batch (z).
builtin.module {
  func.func @bmm_linear_mish(
      %X: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<batch, M, K>},
      %W: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<batch, N, K>},
      %Y: !tile.tile<?x?x?xf16, global> {tile.dims = #tile.dims<batch, M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64), batch>,
                  tile.specialize = {K = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %z = tile.program_id z : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %X[2] : !tile.tile<?x?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%z, %m0, %k0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %W[%z, %n0, %k0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %x_smem, %w_smem, %s transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %threshold = tile.fill 20.0 : !tile.tile<1x1xf32, register>
    %e = tile.exp %acc : !tile.tile<64x64xf32, register>
    %e1 = tile.add %e, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %sp_small = tile.log %e1 : !tile.tile<64x64xf32, register>
    %big = tile.cmp gt %acc, %threshold : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %sp = tile.select %big, %acc, %sp_small : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %t = tile.tanh %sp : !tile.tile<64x64xf32, register>
    %y = tile.mul %acc, %t : !tile.tile<64x64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %yw = tile.view %Y[%z, %m0, %n0] : !tile.tile<?x?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    func.return
  }
}
