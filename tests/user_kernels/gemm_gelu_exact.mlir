// A GEMM with PyTorch's exact GELU (F.gelu(approximate="none")) in its epilogue, with tile.erf:
// C [M, N] f32 = gelu(A B + bias), gelu(x) = x / 2 (1 + erf(x / sqrt 2)); A [M, K] bf16, B [K, N] bf16, bias [N]
// f32 (a [1, N] column vector); any M, N, K (K a multiple of 8: 16-byte rows for the copies).
builtin.module {
  func.func @gemm_gelu_exact(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
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
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %bvw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %bvw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %rsqrt2 = tile.fill 0.70710678118654752 : !tile.tile<1x1xf32, register>
    %half = tile.fill 0.5 : !tile.tile<1x1xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %z = tile.mul %x, %rsqrt2 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %e = tile.erf %z : !tile.tile<64x64xf32, register>
    %e1 = tile.add %e, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %hx = tile.mul %x, %half : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %y = tile.mul %hx, %e1 : !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
