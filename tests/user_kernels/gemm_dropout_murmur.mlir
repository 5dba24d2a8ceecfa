// Dropout (p = 1/4) inside a GEMM epilogue, its mask drawn from murmur3's 32-bit finalizer (fmix32) of each
// output element's linear index m * N + n xor a seed ([1, 1] tile): h ^= h >>> 16; h *= 0x85ebca6b;
// h ^= h >>> 13; h *= 0xc2b2ae35; h ^= h >>> 16 (wrapping multiplies, logical shifts); an element is kept where
// the top 24 bits h >>> 8 are at least 2^22 (probability 3/4) and scaled by f32(4/3), else 0.
// C [M, N] f32 = dropout(A BT^T); A [M, K] bf16, BT [N, K] bf16 (transpose_b); K a multiple of 8.
builtin.module {
  func.func @gemm_dropout_murmur(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %BT: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<N, K>},
      %SEED: !tile.tile<1x1xi32, global> {tile.dims = #tile.dims<1, 1>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
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
      %bw = tile.view %BT[%n0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %n = tile.dim %C[1] : !tile.tile<?x?xf32, global>
    %ni = arith.index_cast %n : index to i32
    %nt = tile.splat %ni : i32 -> !tile.tile<1x1xi32, register>
    %rows = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %rn = tile.mul %rows, %nt : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %lin = tile.add %rn, %cols : !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register>
    %sdw = tile.view %SEED[%c0, %c0] : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, global>
    %seed = tile.load %sdw : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, register>
    %h0 = tile.xor %lin, %seed : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t16 = tile.fill 16 : !tile.tile<1x1xi32, register>
    %t13 = tile.fill 13 : !tile.tile<1x1xi32, register>
    %t8 = tile.fill 8 : !tile.tile<1x1xi32, register>
    %k1c = arith.constant -2048144789 : i32
    %k1 = tile.splat %k1c : i32 -> !tile.tile<1x1xi32, register>
    %k2c = arith.constant -1028477387 : i32
    %k2 = tile.splat %k2c : i32 -> !tile.tile<1x1xi32, register>
    %a1 = tile.shru %h0, %t16 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %h1 = tile.xor %h0, %a1 : !tile.tile<64x64xi32, register>
    %h2 = tile.mul %h1, %k1 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %a3 = tile.shru %h2, %t13 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %h3 = tile.xor %h2, %a3 : !tile.tile<64x64xi32, register>
    %h4 = tile.mul %h3, %k2 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %a5 = tile.shru %h4, %t16 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %h5 = tile.xor %h4, %a5 : !tile.tile<64x64xi32, register>
    %u24 = tile.shru %h5, %t8 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %thc = arith.constant 4194304 : i32
    %th = tile.splat %thc : i32 -> !tile.tile<1x1xi32, register>
    %keep = tile.cmp ge %u24, %th : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %scale = tile.fill 1.3333333333333333 : !tile.tile<1x1xf32, register>
    %zf = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %scaled = tile.mul %acc, %scale : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %y = tile.select %keep, %scaled, %zf : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
