// Bit manipulation a user writes for weight-only quantization and in-kernel randomness, with the i32 bitwise ops
// (tile.and / or / xor / shl / shrs / shru), on a [K, N] output of any size in 64 x 64 blocks:
// W[k, n] = (((P[k // 8, n] >>> 4 (k % 8)) & 15) - 8) * S[n]: int4 codes packed eight to an i32 (AWQ / GPTQ's
//   order: code j of a word in bits 4j..4j+3), zero point 8, a per-column scale;
// H[k, n] = xorshift32 of (k * N + n) ^ seed (x ^= x << 13; x ^= x >>> 17; x ^= x << 5, unsigned), the hash a
//   dropout mask is drawn from; HS[k, n] = H[k, n] >> 24 (arithmetic: the top byte with its sign);
// SIGN[k, n] = (P[k // 8, n] | 1) shifted left by 31 then arithmetically right by 31: -1 for every word (bit 0
//   set): a shift into and back from the sign bit; BIG[k, n] = 1 << (k % 40): an amount of 32 or more gives 0.
builtin.module {
  func.func @int4_unpack_hash(
      %P: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<KP, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %SEED: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>},
      %W: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<8 * KP, N>, tile.role = "out"},
      %H: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<8 * KP, N>, tile.role = "out"},
      %HS: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<8 * KP, N>, tile.role = "out"},
      %SIGN: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<8 * KP, N>, tile.role = "out"},
      %BIG: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<8 * KP, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(KP, 8), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bk = tile.program_id x : index
    %bn = tile.program_id y : index
    %k0 = arith.muli %bk, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %n = tile.dim %W[1] : !tile.tile<?x?xf32, global>
    %rows = tile.iota rows offset %k0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %c8 = arith.constant 8 : i32
    %eight = tile.splat %c8 : i32 -> !tile.tile<1x1xi32, register>
    %c4 = arith.constant 4 : i32
    %four = tile.splat %c4 : i32 -> !tile.tile<1x1xi32, register>
    %c15 = arith.constant 15 : i32
    %fifteen = tile.splat %c15 : i32 -> !tile.tile<1x1xi32, register>
    %word_row = tile.floordiv %rows, %eight : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %slot = tile.mod %rows, %eight : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %amount = tile.mul %slot, %four : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %words = tile.gather %P[%word_row, %cols] : !tile.tile<?x?xi32, global>, !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xi32, register>
    %shifted = tile.shru %words, %amount : !tile.tile<64x64xi32, register>, !tile.tile<64x1xi32, register>
    %code = tile.and %shifted, %fifteen : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %centered = tile.sub %code, %eight : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %cf = tile.cast %centered : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %s = tile.load_broadcast %sw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %w = tile.mul %cf, %s : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %ww = tile.view %W[%k0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %w, %ww : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    // the hash of the element's linear index
    %ni = arith.index_cast %n : index to i32
    %nt = tile.splat %ni : i32 -> !tile.tile<1x1xi32, register>
    %rn = tile.mul %rows, %nt : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %lin = tile.add %rn, %cols : !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register>
    %zero_row = arith.constant 0 : i32
    %z = tile.splat %zero_row : i32 -> !tile.tile<1x1xi32, register>
    %seed = tile.gather %SEED[%z] : !tile.tile<1xi32, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xi32, register>
    %x0 = tile.xor %lin, %seed : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %c13 = arith.constant 13 : i32
    %t13 = tile.splat %c13 : i32 -> !tile.tile<1x1xi32, register>
    %c17 = arith.constant 17 : i32
    %t17 = tile.splat %c17 : i32 -> !tile.tile<1x1xi32, register>
    %c5 = arith.constant 5 : i32
    %t5 = tile.splat %c5 : i32 -> !tile.tile<1x1xi32, register>
    %a1 = tile.shl %x0, %t13 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %x1 = tile.xor %x0, %a1 : !tile.tile<64x64xi32, register>
    %a2 = tile.shru %x1, %t17 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %x2 = tile.xor %x1, %a2 : !tile.tile<64x64xi32, register>
    %a3 = tile.shl %x2, %t5 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %x3 = tile.xor %x2, %a3 : !tile.tile<64x64xi32, register>
    %hw = tile.view %H[%k0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %x3, %hw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %c24 = arith.constant 24 : i32
    %t24 = tile.splat %c24 : i32 -> !tile.tile<1x1xi32, register>
    %hs = tile.shrs %x3, %t24 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %hsw = tile.view %HS[%k0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %hs, %hsw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %c1 = arith.constant 1 : i32
    %one = tile.splat %c1 : i32 -> !tile.tile<1x1xi32, register>
    %c31 = arith.constant 31 : i32
    %t31 = tile.splat %c31 : i32 -> !tile.tile<1x1xi32, register>
    %odd = tile.or %words, %one : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %top = tile.shl %odd, %t31 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %sign = tile.shrs %top, %t31 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %sgw = tile.view %SIGN[%k0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %sign, %sgw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %c40 = arith.constant 40 : i32
    %t40 = tile.splat %c40 : i32 -> !tile.tile<1x1xi32, register>
    %big_amount = tile.mod %rows, %t40 : !tile.tile<64x1xi32, register>, !tile.tile<1x1xi32, register>
    %ones = tile.fill 1 : !tile.tile<64x64xi32, register>
    %big = tile.shl %ones, %big_amount : !tile.tile<64x64xi32, register>, !tile.tile<64x1xi32, register>
    %bigw = tile.view %BIG[%k0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %big, %bigw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
