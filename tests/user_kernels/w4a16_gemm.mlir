// W4A16 GEMM: C [M, N] f32 = A [M, K] bf16 times W [K, N], W dequantized in registers from int4 codes packed eight
// to an i32 word (AWQ / GPTQ's order: code j of P[k // 8, n] in bits 4j..4j+3, zero point 8) and a per-column
// scale: W[k, n] = bf16((code - 8) * S[n]). Each K block of 64 rows is unpacked (tile.shru, tile.and), cast to f32,
// scaled, cast to bf16 and stored into a shared tile that a tensor-core tile.mma reads as its B operand. K = 8 KP.
builtin.module {
  func.func @w4a16_gemm(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, 8 * KP>},
      %P: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<KP, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
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
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %eight = tile.fill 8 : !tile.tile<1x1xi32, register>
    %four = tile.fill 4 : !tile.tile<1x1xi32, register>
    %fifteen = tile.fill 15 : !tile.tile<1x1xi32, register>
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %s = tile.load_broadcast %sw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%c = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      %rows = tile.iota rows offset %k0 : !tile.tile<64x1xi32, register>
      %three = tile.fill 3 : !tile.tile<1x1xi32, register>
      %word_row = tile.shru %rows, %three : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
      %words = tile.gather %P[%word_row, %cols] : !tile.tile<?x?xi32, global>, !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xi32, register>
      %seven = tile.fill 7 : !tile.tile<1x1xi32, register>
      %slot7 = tile.and %rows, %seven : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
      %two = tile.fill 2 : !tile.tile<1x1xi32, register>
      %amount = tile.shl %slot7, %two : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
      %shifted = tile.shru %words, %amount : !tile.tile<64x64xi32, register>, !tile.tile<64x1xi32, register>
      %code = tile.and %shifted, %fifteen : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
      %centered = tile.sub %code, %eight : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
      %cf = tile.cast %centered : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
      %wf = tile.mul %cf, %s : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %wb = tile.cast %wf : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      tile.store_shared %wb, %w_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_wait_group 0
      tile.barrier
      %c2 = tile.mma %a_smem, %w_smem, %c : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %c2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
