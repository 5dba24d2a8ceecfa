// Per-tensor scales read from memory, as FP8-style GEMMs keep them: C = (A B + bias[None, :] * sb) * sa with
// sa [1, 1] bf16 (2-D) loaded as a [1, 1] tile, sb [1] f32 (1-D) broadcast into a [1, 1] tile, bias [N] f32; and
// SC [1, 1] bf16 = bf16(sa * sb), written by block (0, 0). A [M, K] bf16, B [K, N] bf16, C [M, N] f32; any M, N, K.
// Blocks of 128 x 64 (two warpgroups), K in steps of 64. A [1, 1] tile is one value for the whole block: every
// thread loads it, it broadcasts onto a [128, 64] tile and onto the column vector [1, 64] alike.
builtin.module {
  func.func @gemm_tensor_scales(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %SA: !tile.tile<1x1xbf16, global> {tile.dims = #tile.dims<1, 1>},
      %SB: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %SC: !tile.tile<1x1xbf16, global> {tile.dims = #tile.dims<1, 1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c128 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<128x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<128x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<128x64xf32, register>
    }
    %saw = tile.view %SA[%c0, %c0] : !tile.tile<1x1xbf16, global> -> !tile.tile<1x1xbf16, global>
    %sah = tile.load %saw : !tile.tile<1x1xbf16, global> -> !tile.tile<1x1xbf16, register>
    %sa = tile.cast %sah : !tile.tile<1x1xbf16, register> -> !tile.tile<1x1xf32, register>
    %sbw = tile.view %SB[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
    %sb = tile.load_broadcast %sbw : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>
    %biasw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %biasw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %bs = tile.mul %bv, %sb : !tile.tile<1x64xf32, register>, !tile.tile<1x1xf32, register>
    %x = tile.add %acc, %bs : !tile.tile<128x64xf32, register>, !tile.tile<1x64xf32, register>
    %y = tile.mul %x, %sa : !tile.tile<128x64xf32, register>, !tile.tile<1x1xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<128x64xf32, register>, !tile.tile<128x64xf32, global>
    %first_m = arith.cmpi eq, %bm, %c0 : index
    %first_n = arith.cmpi eq, %bn, %c0 : index
    %first = arith.andi %first_m, %first_n : i1
    scf.if %first {
      %sab = tile.mul %sa, %sb : !tile.tile<1x1xf32, register>
      %sc = tile.cast %sab : !tile.tile<1x1xf32, register> -> !tile.tile<1x1xbf16, register>
      %scw = tile.view %SC[%c0, %c0] : !tile.tile<1x1xbf16, global> -> !tile.tile<1x1xbf16, global>
      tile.store_global %sc, %scw : !tile.tile<1x1xbf16, register>, !tile.tile<1x1xbf16, global>
    }
    func.return
  }
}
