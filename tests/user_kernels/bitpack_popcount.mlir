// Bit tricks on i32 tiles over X [M, 64] f32 and V [M, 64] i32 (M any), with operands broadcast every way:
// PACK[m, w] = the word of X[m, 32 w .. 32 w + 31] > 0, bit j for column 32 w + j (torch's packbits of a mask in
//   i32 words): flags shifted by (column & 31) (tile.shl), a row sum of distinct bits (wrapping: bit 31 makes the
//   word negative) for each half selected by column < 32;
// POP[m, c] = popcount(V[m, c]) by SWAR (the unsigned shifts, masks 0x55555555, 0x33333333, 0x0F0F0F0F, then
//   times 0x01010101 >>> 24), and ROWPOP[m] = its row sum;
// MIX[m, c] = ((V & COLMASK[c]) | ROWBITS[m]) ^ SEED >>> (ROWAMT[m] as a column), shifted back left by the same:
//   tile.and by a [1, N] column vector, tile.or by an [M] row vector, tile.xor by a [1, 1] scalar, tile.shru and
//   tile.shl by an [M, 1] column of amounts (0..40: 32 or more gives 0).
builtin.module {
  func.func @bitpack_popcount(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %V: !tile.tile<?x64xi32, global> {tile.dims = #tile.dims<M, 64>},
      %COLMASK: !tile.tile<64xi32, global> {tile.dims = #tile.dims<64>},
      %ROWBITS: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %ROWAMT: !tile.tile<?x1xi32, global> {tile.dims = #tile.dims<M, 1>},
      %SEED: !tile.tile<1x1xi32, global> {tile.dims = #tile.dims<1, 1>},
      %PACK0: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %PACK1: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %POP: !tile.tile<?x64xi32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %ROWPOP: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %MIX: !tile.tile<?x64xi32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %vw = tile.view %V[%m0, %c0] : !tile.tile<?x64xi32, global> -> !tile.tile<64x64xi32, global>
    %v = tile.load %vw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %cols = tile.iota cols : !tile.tile<1x64xi32, register>
    %c31 = tile.fill 31 : !tile.tile<1x1xi32, register>
    %c32 = tile.fill 32 : !tile.tile<1x1xi32, register>
    %zero = tile.fill 0 : !tile.tile<1x1xi32, register>
    %one = tile.fill 1 : !tile.tile<1x1xi32, register>
    %fz = tile.fill 0.0 : !tile.tile<1x1xf32, register>
    %bit = tile.and %cols, %c31 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %pos = tile.cmp gt %x, %fz : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %flag = tile.select %pos, %one, %zero : !tile.tile<64x64xi1, register>, !tile.tile<1x1xi32, register>, !tile.tile<1x1xi32, register>
    %bits = tile.shl %flag, %bit : !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register>
    %low = tile.cmp lt %cols, %c32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %b0 = tile.select %low, %bits, %zero : !tile.tile<1x64xi1, register>, !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %b1 = tile.select %low, %zero, %bits : !tile.tile<1x64xi1, register>, !tile.tile<1x1xi32, register>, !tile.tile<64x64xi32, register>
    %p0 = tile.row_sum %b0 : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %p1 = tile.row_sum %b1 : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %p0w = tile.view %PACK0[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %p0, %p0w : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %p1w = tile.view %PACK1[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %p1, %p1w : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    // popcount, SWAR
    %k55c = arith.constant 1431655765 : i32
    %k55 = tile.splat %k55c : i32 -> !tile.tile<1x1xi32, register>
    %k33c = arith.constant 858993459 : i32
    %k33 = tile.splat %k33c : i32 -> !tile.tile<1x1xi32, register>
    %k0fc = arith.constant 252645135 : i32
    %k0f = tile.splat %k0fc : i32 -> !tile.tile<1x1xi32, register>
    %k01c = arith.constant 16843009 : i32
    %k01 = tile.splat %k01c : i32 -> !tile.tile<1x1xi32, register>
    %c2 = tile.fill 2 : !tile.tile<1x1xi32, register>
    %c4 = tile.fill 4 : !tile.tile<1x1xi32, register>
    %c24 = tile.fill 24 : !tile.tile<1x1xi32, register>
    %s1 = tile.shru %v, %one : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %s1m = tile.and %s1, %k55 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t1 = tile.sub %v, %s1m : !tile.tile<64x64xi32, register>
    %t1a = tile.and %t1, %k33 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t1s = tile.shru %t1, %c2 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t1b = tile.and %t1s, %k33 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t2 = tile.add %t1a, %t1b : !tile.tile<64x64xi32, register>
    %t2s = tile.shru %t2, %c4 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t3 = tile.add %t2, %t2s : !tile.tile<64x64xi32, register>
    %t3m = tile.and %t3, %k0f : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %t4 = tile.mul %t3m, %k01 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %pop = tile.shru %t4, %c24 : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %popw = tile.view %POP[%m0, %c0] : !tile.tile<?x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %pop, %popw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %rp = tile.row_sum %pop : !tile.tile<64x64xi32, register> -> !tile.tile<64xi32, register>
    %rpw = tile.view %ROWPOP[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %rp, %rpw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    // broadcasting every way
    %cmw = tile.view %COLMASK[%c0] : !tile.tile<64xi32, global> -> !tile.tile<64xi32, global>
    %cm = tile.load_broadcast %cmw : !tile.tile<64xi32, global> -> !tile.tile<1x64xi32, register>
    %rbw = tile.view %ROWBITS[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %rb = tile.load %rbw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %raw = tile.view %ROWAMT[%m0, %c0] : !tile.tile<?x1xi32, global> -> !tile.tile<64x1xi32, global>
    %ra = tile.load %raw : !tile.tile<64x1xi32, global> -> !tile.tile<64x1xi32, register>
    %sdw = tile.view %SEED[%c0, %c0] : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, global>
    %sd = tile.load %sdw : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, register>
    %mx1 = tile.and %v, %cm : !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register>
    %mx2 = tile.or %mx1, %rb : !tile.tile<64x64xi32, register>, !tile.tile<64xi32, register>
    %mx3 = tile.xor %mx2, %sd : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %mx4 = tile.shru %mx3, %ra : !tile.tile<64x64xi32, register>, !tile.tile<64x1xi32, register>
    %mx5 = tile.shl %mx4, %ra : !tile.tile<64x64xi32, register>, !tile.tile<64x1xi32, register>
    %mxw = tile.view %MIX[%m0, %c0] : !tile.tile<?x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %mx5, %mxw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
