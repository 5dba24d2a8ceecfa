// ALiBi-style scores with a sliding window: for head h = program_id y (of H heads, X and S holding head h in
// columns 64 h .. 64 h + 63) and slope s_h = 2^(-8 (h + 1) / H), S[i, 64 h + j] = X[i, 64 h + j] - s_h |i - j| where
// |i - j| <= 8, else -inf. The slope is a
// scalar SSA value made from the program id and spread over a tile with tile.splat; distances come from
// tile.iota rows/cols, in i32, converted to f32 with tile.cast.
builtin.module {
  func.func @alibi(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<L, HC>},
      %S: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<L, HC>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(L, 64), ceildiv(HC, 64)>,
                  tile.divisible = {HC = 64 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %h = tile.program_id y : index
    %m0 = arith.muli %b, %c64 : index
    %hc = tile.dim %S[1] : !tile.tile<?x?xf32, global>
    %heads = arith.divui %hc, %c64 : index
    %n0 = arith.muli %h, %c64 : index
    // exponent -8 (h + 1) / H as an f32 scalar
    %h1 = arith.addi %h, %c1 : index
    %h1_i32 = arith.index_cast %h1 : index to i32
    %h1_f = arith.sitofp %h1_i32 : i32 to f32
    %heads_i32 = arith.index_cast %heads : index to i32
    %heads_f = arith.sitofp %heads_i32 : i32 to f32
    %minus8 = arith.constant -8.0 : f32
    %num = arith.mulf %h1_f, %minus8 : f32
    %e = arith.divf %num, %heads_f : f32
    %et = tile.splat %e : f32 -> !tile.tile<64xf32, register>
    %slope = tile.exp2 %et : !tile.tile<64xf32, register>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %row = tile.iota rows offset %m0 : !tile.tile<64x64xi32, register>
    %col = tile.iota cols : !tile.tile<64x64xi32, register>
    %d = tile.sub %row, %col : !tile.tile<64x64xi32, register>
    %dist = tile.abs %d : !tile.tile<64x64xi32, register>
    %w = tile.splat %c8 : index -> !tile.tile<64x64xi32, register>
    %outside = tile.cmp gt %dist, %w : !tile.tile<64x64xi32, register>
    %distf = tile.cast %dist : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
    %bias = tile.mul %distf, %slope : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %scores = tile.sub %x, %bias : !tile.tile<64x64xf32, register>
    %neg_inf = tile.fill -inf : !tile.tile<64x64xf32, register>
    %s = tile.select %outside, %neg_inf, %scores : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>
    %sw = tile.view %S[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %s, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
