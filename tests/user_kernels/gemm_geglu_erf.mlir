// GEGLU with the exact (erf) GELU, as PyTorch's F.gelu(approximate="none") computes it, in a GEMM epilogue with two
// B operands: C = bf16(gelu(A Bg + bias) * (A Bu)), gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
// A [M, K] bf16, Bg and Bu [K, N] bf16, bias [N] f32, C [M, N] bf16; any M, N, K (specialized on K and N multiples of 8).
// Written before Tile IR had tile.erf (kept as a user would keep it): Phi is written with Abramowitz and Stegun's 7.1.26 (|error of erf| <= 1.5e-7): with
// z = |x| / sqrt 2, t = 1 / (1 + p z) and h = (a1 t + ... + a5 t^5) exp(-z^2) / 2, Phi(x) = 1 - h for x >= 0
// and h for x < 0. The polynomial's constants are [1, 1] tiles (one register each), broadcast onto the tile.
builtin.module {
  func.func @gemm_geglu_erf(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %Bg: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %Bu: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
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
    %g_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %u_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc:2 = scf.for %j = %c0 to %n_k step %c1 iter_args(%g = %zero, %u = %zero) -> (!tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %gw = tile.view %Bg[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %gw, %g_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %uw = tile.view %Bu[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %uw, %u_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %g2 = tile.mma %a_smem, %g_smem, %g : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      %u2 = tile.mma %a_smem, %u_smem, %u : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %g2, %u2 : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    }
    %biasw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %biasw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %x = tile.add %acc#0, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %ax = tile.abs %x : !tile.tile<64x64xf32, register>
    %z = tile.scale %ax by 0.70710678118654752 : !tile.tile<64x64xf32, register>
    %pz = tile.scale %z by 0.3275911 : !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %den = tile.add %pz, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %t = tile.reciprocal %den : !tile.tile<64x64xf32, register>
    %a4 = tile.fill -1.453152027 : !tile.tile<1x1xf32, register>
    %a3 = tile.fill 1.421413741 : !tile.tile<1x1xf32, register>
    %a2 = tile.fill -0.284496736 : !tile.tile<1x1xf32, register>
    %a1 = tile.fill 0.254829592 : !tile.tile<1x1xf32, register>
    %q5 = tile.scale %t by 1.061405429 : !tile.tile<64x64xf32, register>
    %q4 = tile.add %q5, %a4 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %r4 = tile.mul %q4, %t : !tile.tile<64x64xf32, register>
    %q3 = tile.add %r4, %a3 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %r3 = tile.mul %q3, %t : !tile.tile<64x64xf32, register>
    %q2 = tile.add %r3, %a2 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %r2 = tile.mul %q2, %t : !tile.tile<64x64xf32, register>
    %q1 = tile.add %r2, %a1 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %poly = tile.mul %q1, %t : !tile.tile<64x64xf32, register>
    %z2 = tile.mul %z, %z : !tile.tile<64x64xf32, register>
    %nz2 = tile.neg %z2 : !tile.tile<64x64xf32, register>
    %ex = tile.exp %nz2 : !tile.tile<64x64xf32, register>
    %pe = tile.mul %poly, %ex : !tile.tile<64x64xf32, register>
    %h = tile.scale %pe by 0.5 : !tile.tile<64x64xf32, register>
    %upper = tile.sub %one, %h : !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
    %origin = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %negative = tile.cmp lt %x, %origin : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %phi = tile.select %negative, %h, %upper : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %gelu = tile.mul %x, %phi : !tile.tile<64x64xf32, register>
    %c = tile.mul %gelu, %acc#1 : !tile.tile<64x64xf32, register>
    %ch = tile.cast %c : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %ch, %cw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
