// A transformer block's output projection fused with its residual and LayerNorm over the whole hidden size:
// H = A B + R, Y = bf16((H - mean(H)) rsqrt(var(H) + 1e-5) gamma + beta) along rows, A [M, K] bf16, B [K, 256]
// bf16, R [M, 256] f32, gamma and beta [256] f32, Y [M, 256] bf16, any M and K. One block per 64 rows holds the
// whole row of 256 columns: the accumulator, the residual and the centered rows are 128 registers per thread
// each, more than a warp-specialized consumer has; the default pipeline falls back and says so.
builtin.module {
  func.func @gemm_residual_layernorm(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x256xbf16, global> {tile.dims = #tile.dims<K, 256>},
      %R: !tile.tile<?x256xf32, global> {tile.dims = #tile.dims<M, 256>},
      %G: !tile.tile<256xf32, global> {tile.dims = #tile.dims<256>},
      %BETA: !tile.tile<256xf32, global> {tile.dims = #tile.dims<256>},
      %Y: !tile.tile<?x256xbf16, global> {tile.dims = #tile.dims<M, 256>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>,
                  tile.specialize = {K = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %m0 = arith.muli %bm, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x256xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x256xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x256xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %c0] : !tile.tile<?x256xbf16, global> -> !tile.tile<64x256xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x256xbf16, global>, !tile.tile<64x256xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x256xbf16, shared, swizzle 128>, !tile.tile<64x256xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x256xf32, register>
    }
    %rw = tile.view %R[%m0, %c0] : !tile.tile<?x256xf32, global> -> !tile.tile<64x256xf32, global>
    %r = tile.load %rw : !tile.tile<64x256xf32, global> -> !tile.tile<64x256xf32, register>
    %h = tile.add %acc, %r : !tile.tile<64x256xf32, register>
    %sum = tile.row_sum %h : !tile.tile<64x256xf32, register> -> !tile.tile<64xf32, register>
    %mean = tile.scale %sum by 0.00390625 : !tile.tile<64xf32, register>
    %d = tile.sub %h, %mean : !tile.tile<64x256xf32, register>, !tile.tile<64xf32, register>
    %d2 = tile.mul %d, %d : !tile.tile<64x256xf32, register>
    %ss = tile.row_sum %d2 : !tile.tile<64x256xf32, register> -> !tile.tile<64xf32, register>
    %var = tile.scale %ss by 0.00390625 : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-05 : !tile.tile<64xf32, register>
    %ve = tile.add %var, %eps : !tile.tile<64xf32, register>
    %rstd = tile.rsqrt %ve : !tile.tile<64xf32, register>
    %n = tile.mul %d, %rstd : !tile.tile<64x256xf32, register>, !tile.tile<64xf32, register>
    %gw = tile.view %G[%c0] : !tile.tile<256xf32, global> -> !tile.tile<256xf32, global>
    %g = tile.load_broadcast %gw : !tile.tile<256xf32, global> -> !tile.tile<1x256xf32, register>
    %bw2 = tile.view %BETA[%c0] : !tile.tile<256xf32, global> -> !tile.tile<256xf32, global>
    %beta = tile.load_broadcast %bw2 : !tile.tile<256xf32, global> -> !tile.tile<1x256xf32, register>
    %ng = tile.mul %n, %g : !tile.tile<64x256xf32, register>, !tile.tile<1x256xf32, register>
    %y = tile.add %ng, %beta : !tile.tile<64x256xf32, register>, !tile.tile<1x256xf32, register>
    %yh = tile.cast %y : !tile.tile<64x256xf32, register> -> !tile.tile<64x256xbf16, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x256xbf16, global> -> !tile.tile<64x256xbf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x256xbf16, register>, !tile.tile<64x256xbf16, global>
    func.return
  }
}
