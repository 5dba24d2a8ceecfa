// gemm_glu with a second broadcast row and eight row reductions (of the accumulators, of g + bias and of its
// relu), applied at the end: 251 registers per consumer thread, more than the 240 warp specialization leaves;
// the default pipeline falls back to two stages without a producer warpgroup (255 registers per thread). The
// reduction of the relu keeps it whole beside g + bias and u (of g + bias instead, slab-elementwise-chains
// computes the GLU chain 8 registers at a time, and the kernel fits warp-specialized: 207 registers).
builtin.module {
  func.func @gemm_glu_rows(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B1: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %B2: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %scale: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
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
    // Epilogue: gate = relu(g + bias) * 0.5 + 0.25 * g ; out = gate * u + 1.0
    %r0 = tile.row_max %acc#0 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %r1 = tile.row_sum %acc#1 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %r2 = tile.row_sum %acc#0 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %r3 = tile.row_max %acc#1 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %r4 = tile.row_sum %acc#0 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %r5 = tile.row_sum %acc#1 : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %bias_window = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %bias_rows = tile.load_broadcast %bias_window : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
    %scale_window = tile.view %scale[%n0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %scale_rows = tile.load_broadcast %scale_window : !tile.tile<128xf32, global> -> !tile.tile<128x128xf32, register>
    %one = tile.fill 1.0 : !tile.tile<128x128xf32, register>
    %gb = tile.add %acc#0, %bias_rows : !tile.tile<128x128xf32, register>
    %r6 = tile.row_sum %gb : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %floor = tile.fill 0.0 : !tile.tile<128x128xf32, register>
    %relu = tile.element_max %gb, %floor : !tile.tile<128x128xf32, register>
    %r7 = tile.row_sum %relu : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
    %half = tile.fill 0.5 : !tile.tile<128x128xf32, register>
    %quarter = tile.fill 0.25 : !tile.tile<128x128xf32, register>
    %leak = tile.mul %gb, %quarter : !tile.tile<128x128xf32, register>
    %gate = tile.fma %relu, %half, %leak : !tile.tile<128x128xf32, register>
    %ub = tile.fma %acc#1, %scale_rows, %one : !tile.tile<128x128xf32, register>
    %out = tile.fma %gate, %ub, %one : !tile.tile<128x128xf32, register>
    %o0 = tile.mul_rows %out, %r0 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o1 = tile.mul_rows %o0, %r1 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o2 = tile.mul_rows %o1, %r2 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o3 = tile.mul_rows %o2, %r3 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o4 = tile.mul_rows %o3, %r4 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o5 = tile.mul_rows %o4, %r5 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o6 = tile.mul_rows %o5, %r6 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o7 = tile.mul_rows %o6, %r7 : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %c_window = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x128xf32, global>
    tile.store_global %o7, %c_window : !tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, global>
    func.return
  }
}
