// Rotary embedding in the interleaved (GPT-J / Meta's complex) form, applied to Q and K in one kernel: each
// even/odd column pair (2i, 2i+1) of a head is rotated by the angle of table column i,
//   Y[h, t, 2i]   = x[2i] COS[t, i] - x[2i+1] SIN[t, i],
//   Y[h, t, 2i+1] = x[2i+1] COS[t, i] + x[2i] SIN[t, i],
// for Q [HQ, T, 64] and K [HK, T, 64] f32 (fewer key heads: GQA), tables COS, SIN [T, 32] f32, outputs bf16.
// The partner column c ^ 1 and the table column c // 2 are i32 coordinate tiles (tile.iota, tile.mod,
// tile.floordiv), read with tile.gather; the sign (-1 on even columns, +1 on odd) is 2 (c mod 2) - 1 cast to
// f32. Grid: token blocks x query heads; the blocks of the first HK heads rotate K's head too.
builtin.module {
  func.func @rope_interleaved(
      %Q: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<HQ, T, 64>},
      %K: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<HK, T, 64>},
      %COS: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<T, 32>},
      %SIN: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<T, 32>},
      %QR: !tile.tile<?x?x64xbf16, global> {tile.dims = #tile.dims<HQ, T, 64>, tile.role = "out"},
      %KR: !tile.tile<?x?x64xbf16, global> {tile.dims = #tile.dims<HK, T, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(T, 64), HQ>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %h = tile.program_id y : index
    %t0 = arith.muli %b, %c64 : index
    %hk = tile.dim %K[0] : !tile.tile<?x?x64xf32, global>
    %row = tile.iota rows offset %t0 : !tile.tile<64x64xi32, register>
    %col = tile.iota cols : !tile.tile<1x64xi32, register>
    %two = tile.fill 2.0 : !tile.tile<1x64xi32, register>
    %one = tile.fill 1.0 : !tile.tile<1x64xi32, register>
    %odd = tile.mod %col, %two : !tile.tile<1x64xi32, register>
    %half = tile.floordiv %col, %two : !tile.tile<1x64xi32, register>
    %odd2 = tile.mul %odd, %two : !tile.tile<1x64xi32, register>
    %cp1 = tile.add %col, %one : !tile.tile<1x64xi32, register>
    %partner = tile.sub %cp1, %odd2 : !tile.tile<1x64xi32, register>
    %signi = tile.sub %odd2, %one : !tile.tile<1x64xi32, register>
    %sign = tile.cast %signi : !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %c = tile.gather %COS[%row, %half] : !tile.tile<?x32xf32, global>, !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %s = tile.gather %SIN[%row, %half] : !tile.tile<?x32xf32, global>, !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %ss = tile.mul %s, %sign : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %hv = tile.splat %h : index -> !tile.tile<1x64xi32, register>
    %qw = tile.view %Q[%h, %t0, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %q = tile.load %qw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %qp = tile.gather %Q[%hv, %row, %partner] : !tile.tile<?x?x64xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %qs = tile.mul %qp, %ss : !tile.tile<64x64xf32, register>
    %qy = tile.fma %q, %c, %qs : !tile.tile<64x64xf32, register>
    %qb = tile.cast %qy : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %qrw = tile.view %QR[%h, %t0, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %qb, %qrw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    %has_k = arith.cmpi ult, %h, %hk : index
    scf.if %has_k {
      %kw = tile.view %K[%h, %t0, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
      %k = tile.load %kw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %kp = tile.gather %K[%hv, %row, %partner] : !tile.tile<?x?x64xf32, global>, !tile.tile<1x64xi32, register>, !tile.tile<64x64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
      %ks = tile.mul %kp, %ss : !tile.tile<64x64xf32, register>
      %ky = tile.fma %k, %c, %ks : !tile.tile<64x64xf32, register>
      %kb = tile.cast %ky : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      %krw = tile.view %KR[%h, %t0, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.store_global %kb, %krw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    }
    func.return
  }
}
