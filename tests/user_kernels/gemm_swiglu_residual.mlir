// A GEMM with a SwiGLU-and-residual epilogue, as a user fuses an MLP's first half: gate G = A B1, up U = A B2
// (two accumulators over one A), OUT = silu(G + bias) * U + R, with the bias a row broadcast [N] and the residual
// R [M, N] f32 read in the epilogue; K any multiple of 8, M and N any.
builtin.module {
  func.func @gemm_swiglu_residual(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B1: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %B2: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %R: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %OUT: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {
        tile.kernel = {kind = "custom"},
        tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 128)>,
        tile.divisible = {K = 8 : i64, N = 8 : i64}
      } {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %m_block = tile.program_id x : index
    %n_block = tile.program_id y : index
    %m0 = arith.muli %m_block, %c128 : index
    %n0 = arith.muli %n_block, %c128 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %b1_smem = tile.alloc_shared : !tile.tile<64x128xbf16, shared, swizzle 128>
    %b2_smem = tile.alloc_shared : !tile.tile<64x128xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<128x128xf32, register>
    %acc:2 = scf.for %j = %c0 to %n_k step %c1 iter_args(%g = %zero, %u = %zero) -> (!tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %a_window = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %a_window, %a_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %b1_window = tile.view %B1[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
      tile.cp_async %b1_window, %b1_smem : !tile.tile<64x128xbf16, global>, !tile.tile<64x128xbf16, shared, swizzle 128>
      %b2_window = tile.view %B2[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
      tile.cp_async %b2_window, %b2_smem : !tile.tile<64x128xbf16, global>, !tile.tile<64x128xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %g_new = tile.mma %a_smem, %b1_smem, %g : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
      %u_new = tile.mma %a_smem, %b2_smem, %u : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
      tile.barrier
      scf.yield %g_new, %u_new : !tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, register>
    }
    %bias_window = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %bias_rows = tile.load_broadcast %bias_window : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
    %gb = tile.add %acc#0, %bias_rows : !tile.tile<128x128xf32, register>
    %act = tile.silu %gb : !tile.tile<128x128xf32, register>
    %r_window = tile.view %R[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x128xf32, global>
    %r = tile.load %r_window : !tile.tile<128x128xf32, global> -> !tile.tile<128x128xf32, register>
    %out = tile.fma %act, %acc#1, %r : !tile.tile<128x128xf32, register>
    %o_window = tile.view %OUT[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x128xf32, global>
    tile.store_global %out, %o_window : !tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, global>
    func.return
  }
}
