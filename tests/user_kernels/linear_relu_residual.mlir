// Y = f16(relu((A W^T) * s) + R): a Linear layer (W [N, K] as PyTorch stores it: tile.mma transpose_b), a per-row
// scale s [M] f32 (tile.mul_rows), ReLU (tile.element_max with the zero fill) and a residual R [M, N] f16 widened by
// tile.cast; Y [M, N] f16. Any M, N, K: tile.specialize on K, so 16-byte rows take TMA and others ld.global.
builtin.module {
  func.func @linear_relu_residual(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, K>},
      %W: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<N, K>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %R: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64}} {
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
    %w_smem = tile.alloc_shared : !tile.tile<64x64xf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      %ww = tile.view %W[%n0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %w_smem, %s transpose_b : !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %sv = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %x = tile.mul_rows %acc, %sv : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %relu = tile.element_max %x, %zero : !tile.tile<64x64xf32, register>
    %rw = tile.view %R[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    %rh = tile.load %rw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
    %r = tile.cast %rh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %relu, %r : !tile.tile<64x64xf32, register>
    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %yh, %yw : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    func.return
  }
}
