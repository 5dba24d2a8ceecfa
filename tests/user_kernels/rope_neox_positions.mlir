// Rotary embedding in GPT-NeoX's rotate-half form at head_dim 128, with the rotation angle picked by a position
// table, as a decoding step with a KV cache or packed sequences gives it: for Q [H, T, 128] bf16, POS [T] i32
// (each token's position, 0 <= POS < S) and the tables COS, SIN [S, 64] f32,
//   Y[h, t, :64] = Q1 cos - Q2 sin,   Y[h, t, 64:] = Q2 cos + Q1 sin,   (cos, sin) = (COS, SIN)[POS[t]],
// Q1 = Q[h, t, :64], Q2 = Q[h, t, 64:]; Y [H, T, 128] bf16, any H, T, S. The token block's positions are a row
// vector [64] i32 that tile.gather broadcasts as the row coordinate of the table. Grid: token blocks x heads.
builtin.module {
  func.func @rope_neox_positions(
      %Q: !tile.tile<?x?x128xbf16, global> {tile.dims = #tile.dims<H, T, 128>},
      %POS: !tile.tile<?xi32, global> {tile.dims = #tile.dims<T>},
      %COS: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>},
      %SIN: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>},
      %Y: !tile.tile<?x?x128xbf16, global> {tile.dims = #tile.dims<H, T, 128>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(T, 64), H>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bt = tile.program_id x : index
    %h = tile.program_id y : index
    %t0 = arith.muli %bt, %c64 : index
    %pw = tile.view %POS[%t0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %pos = tile.load %pw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %col = tile.iota cols : !tile.tile<1x64xi32, register>
    %c = tile.gather %COS[%pos, %col] : !tile.tile<?x64xf32, global>, !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %s = tile.gather %SIN[%pos, %col] : !tile.tile<?x64xf32, global>, !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %q1w = tile.view %Q[%h, %t0, %c0] : !tile.tile<?x?x128xbf16, global> -> !tile.tile<64x64xbf16, global>
    %q1h = tile.load %q1w : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %q1 = tile.cast %q1h : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %q2w = tile.view %Q[%h, %t0, %c64] : !tile.tile<?x?x128xbf16, global> -> !tile.tile<64x64xbf16, global>
    %q2h = tile.load %q2w : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %q2 = tile.cast %q2h : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %q1c = tile.mul %q1, %c : !tile.tile<64x64xf32, register>
    %q2s = tile.mul %q2, %s : !tile.tile<64x64xf32, register>
    %y1 = tile.sub %q1c, %q2s : !tile.tile<64x64xf32, register>
    %q2c = tile.mul %q2, %c : !tile.tile<64x64xf32, register>
    %q1s = tile.mul %q1, %s : !tile.tile<64x64xf32, register>
    %y2 = tile.add %q2c, %q1s : !tile.tile<64x64xf32, register>
    %y1h = tile.cast %y1 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %y2h = tile.cast %y2 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %y1w = tile.view %Y[%h, %t0, %c0] : !tile.tile<?x?x128xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %y1h, %y1w : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    %y2w = tile.view %Y[%h, %t0, %c64] : !tile.tile<?x?x128xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %y2h, %y2w : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
