// A GEMM whose epilogue adds a bias, applies GELU (the tanh form, as written before Tile IR had tile.erf) and adds a residual:
//   C = f16(gelu(A B + bias) + R), A [M, K] f16, B [K, N] f16, bias [N] f32, R [M, N] f16, C [M, N] f16,
// for any M, N, K (no tile.divisible: copies by threads, K not a multiple of the 64-wide K step; the tail of the
// last K step reads as zero). The residual is read as f16 and widened with tile.cast before the add.
builtin.module {
  func.func @gemm_gelu_residual(
      %A: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %R: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>},
      %C: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
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
    %b_smem = tile.alloc_shared : !tile.tile<64x64xf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xf16, global>, !tile.tile<64x64xf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %biasw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %biasw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x64xf32, register>
    %x3 = tile.mul %x2, %x : !tile.tile<64x64xf32, register>
    %cube = tile.scale %x3 by 0.044715 : !tile.tile<64x64xf32, register>
    %inner = tile.add %x, %cube : !tile.tile<64x64xf32, register>
    %arg = tile.scale %inner by 0.7978845608 : !tile.tile<64x64xf32, register>
    %t = tile.tanh %arg : !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %t1 = tile.add %t, %one : !tile.tile<64x64xf32, register>
    %xt = tile.mul %x, %t1 : !tile.tile<64x64xf32, register>
    %g = tile.scale %xt by 0.5 : !tile.tile<64x64xf32, register>
    %rw = tile.view %R[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    %rh = tile.load %rw : !tile.tile<64x64xf16, global> -> !tile.tile<64x64xf16, register>
    %r = tile.cast %rh : !tile.tile<64x64xf16, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %g, %r : !tile.tile<64x64xf32, register>
    %out = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x64xf16, global>
    tile.store_global %out, %cw : !tile.tile<64x64xf16, register>, !tile.tile<64x64xf16, global>
    func.return
  }
}
