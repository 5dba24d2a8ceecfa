// Rotary embedding (rotate-half form) of X [H, T, 64] f32 with tables COS, SIN [T, 32] f32:
// Y[h, t, :32] = x1 cos - x2 sin, Y[..., 32:] = x2 cos + x1 sin, bf16 out. Grid: token blocks x heads.
builtin.module {
  func.func @rotary(
      %X: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<H, T, 64>},
      %COS: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<T, 32>},
      %SIN: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<T, 32>},
      %Y: !tile.tile<?x?x64xbf16, global> {tile.dims = #tile.dims<H, T, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(T, 64), H>} {
    %c0 = arith.constant 0 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %h = tile.program_id y : index
    %t0 = arith.muli %b, %c64 : index
    %cw = tile.view %COS[%t0, %c0] : !tile.tile<?x32xf32, global> -> !tile.tile<64x32xf32, global>
    %c = tile.load %cw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %sw = tile.view %SIN[%t0, %c0] : !tile.tile<?x32xf32, global> -> !tile.tile<64x32xf32, global>
    %s = tile.load %sw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %x1w = tile.view %X[%h, %t0, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x32xf32, global>
    %x1 = tile.load %x1w : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %x2w = tile.view %X[%h, %t0, %c32] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x32xf32, global>
    %x2 = tile.load %x2w : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %a = tile.mul %x1, %c : !tile.tile<64x32xf32, register>
    %bb = tile.mul %x2, %s : !tile.tile<64x32xf32, register>
    %y1 = tile.sub %a, %bb : !tile.tile<64x32xf32, register>
    %d = tile.mul %x2, %c : !tile.tile<64x32xf32, register>
    %y2 = tile.fma %x1, %s, %d : !tile.tile<64x32xf32, register>
    %y1b = tile.cast %y1 : !tile.tile<64x32xf32, register> -> !tile.tile<64x32xbf16, register>
    %y2b = tile.cast %y2 : !tile.tile<64x32xf32, register> -> !tile.tile<64x32xbf16, register>
    %y1w = tile.view %Y[%h, %t0, %c0] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<64x32xbf16, global>
    tile.store_global %y1b, %y1w : !tile.tile<64x32xbf16, register>, !tile.tile<64x32xbf16, global>
    %y2w = tile.view %Y[%h, %t0, %c32] : !tile.tile<?x?x64xbf16, global> -> !tile.tile<64x32xbf16, global>
    tile.store_global %y2b, %y2w : !tile.tile<64x32xbf16, register>, !tile.tile<64x32xbf16, global>
    func.return
  }
}
