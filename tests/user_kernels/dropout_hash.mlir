// Dropout with a counter-based hash as its random numbers, as a fused training kernel writes it without an RNG op:
// for X [M, N] f32 (any M, N) and a seed SEED [1] i32, with i32 arithmetic that wraps (two's complement),
//   h = (i * 73856093 + j * 19349663 + seed)^2,  keep = (h mod 1000) < 900   (mod as Python's %: 0..999),
//   Y[i, j] = keep ? X[i, j] / 0.9 : 0,  MASK[i, j] = keep (i32 0 or 1).
// i, j from tile.iota at the tile's offsets; the seed a [1, 1] i32 tile broadcast onto the [64, 64] tile. The
// multipliers are past 2^24, so they are i32 constants splat (tile.fill holds an f32: it refuses them by name).
builtin.module {
  func.func @dropout_hash(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %SEED: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %MASK: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %sw = tile.view %SEED[%c0] : !tile.tile<1xi32, global> -> !tile.tile<1xi32, global>
    %seed = tile.load_broadcast %sw : !tile.tile<1xi32, global> -> !tile.tile<1x1xi32, register>
    %i = tile.iota rows offset %m0 : !tile.tile<64x64xi32, register>
    %j = tile.iota cols offset %n0 : !tile.tile<64x64xi32, register>
    %ka = arith.constant 73856093 : i32
    %kb = arith.constant 19349663 : i32
    %a = tile.splat %ka : i32 -> !tile.tile<1x1xi32, register>
    %b = tile.splat %kb : i32 -> !tile.tile<1x1xi32, register>
    %ia = tile.mul %i, %a : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %jb = tile.mul %j, %b : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %h0 = tile.add %ia, %jb : !tile.tile<64x64xi32, register>
    %h1 = tile.add %h0, %seed : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %h = tile.mul %h1, %h1 : !tile.tile<64x64xi32, register>
    %thousand = tile.fill 1000 : !tile.tile<1x1xi32, register>
    %r = tile.mod %h, %thousand : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %limit = tile.fill 900 : !tile.tile<1x1xi32, register>
    %keep = tile.cmp lt %r, %limit : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %scaled = tile.scale %x by 1.1111111111111112 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %y = tile.select %keep, %scaled, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %one = tile.fill 1 : !tile.tile<64x64xi32, register>
    %none = tile.fill 0 : !tile.tile<64x64xi32, register>
    %mask = tile.select %keep, %one, %none : !tile.tile<64x64xi1, register>, !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %mw = tile.view %MASK[%m0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %mask, %mw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
