// RoPE applied to Q in registers inside a flash-style score computation: S [SQ, SK] f32 = bf16(rope(Q)) K^T,
// Q [SQ, 64] f32 at positions OFF + row (OFF a [1, 1] i32 tile: a decode step's cache length), K [SK, 64] bf16
// (already rotated, as a KV cache holds it), rope the GPT-NeoX rotation (pairs j and j + 32, angle
// f32(pos * INV[j % 32])) with tile.sin / tile.cos; the rotated Q is cast to bf16 and stored to shared memory, the
// A operand of a tensor-core tile.mma with K (transpose_b).
builtin.module {
  func.func @rope_qk_scores(
      %Q: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<SQ, 64>},
      %K: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<SK, 64>},
      %INV: !tile.tile<32xf32, global> {tile.dims = #tile.dims<32>},
      %OFF: !tile.tile<1x1xi32, global> {tile.dims = #tile.dims<1, 1>},
      %S: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<SQ, SK>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(SQ, 64), ceildiv(SK, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %q_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %kw = tile.view %K[%n0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %kw, %k_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %rows = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols : !tile.tile<1x64xi32, register>
    %ow = tile.view %OFF[%c0, %c0] : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, global>
    %off = tile.load %ow : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, register>
    %pos = tile.add %rows, %off : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %posf = tile.cast %pos : !tile.tile<64x1xi32, register> -> !tile.tile<64x1xf32, register>
    %t31 = tile.fill 31 : !tile.tile<1x1xi32, register>
    %t32 = tile.fill 32 : !tile.tile<1x1xi32, register>
    %pair = tile.and %cols, %t31 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %inv = tile.gather %INV[%pair] : !tile.tile<32xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %angle = tile.mul %posf, %inv : !tile.tile<64x1xf32, register>, !tile.tile<1x64xf32, register>
    %cos = tile.cos %angle : !tile.tile<64x64xf32, register>
    %sin = tile.sin %angle : !tile.tile<64x64xf32, register>
    %qw = tile.view %Q[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %q = tile.load %qw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %partner_col = tile.xor %cols, %t32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %partner = tile.gather %Q[%rows, %partner_col] : !tile.tile<?x64xf32, global>, !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %first = tile.cmp lt %cols, %t32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %psn = tile.neg %partner : !tile.tile<64x64xf32, register>
    %signed = tile.select %first, %psn, %partner : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %qc = tile.mul %q, %cos : !tile.tile<64x64xf32, register>
    %ps = tile.mul %signed, %sin : !tile.tile<64x64xf32, register>
    %qr = tile.add %qc, %ps : !tile.tile<64x64xf32, register>
    %qb = tile.cast %qr : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    tile.store_shared %qb, %q_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_wait_group 0
    tile.barrier
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %s = tile.mma %q_smem, %k_smem, %zero transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %sw = tile.view %S[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %s, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
