// BatchNorm's per-channel statistics of X [M, N] bf16 (cast to f32): S[j] = sum_i X[i, j], Q[j] = sum_i X[i, j]^2,
// 1-D outputs [N]. Block (x, y) takes 16 channels of 64 rows; each adds its tile.col_sum partials with
// tile.atomic_add into the 1-D windows (the outputs start at zero; rows and channels past the tensor add nothing).
builtin.module {
  func.func @bn_stats(%X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %Q: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 16), ceildiv(M, 64)>} {
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 16 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %n0 = arith.muli %bx, %cbn : index
    %m0 = arith.muli %by, %cbm : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x16xbf16, global>
    %xb = tile.load %xw : !tile.tile<64x16xbf16, global> -> !tile.tile<64x16xbf16, register>
    %x = tile.cast %xb : !tile.tile<64x16xbf16, register> -> !tile.tile<64x16xf32, register>
    %x2 = tile.mul %x, %x : !tile.tile<64x16xf32, register>
    %s = tile.col_sum %x : !tile.tile<64x16xf32, register> -> !tile.tile<1x16xf32, register>
    %q = tile.col_sum %x2 : !tile.tile<64x16xf32, register> -> !tile.tile<1x16xf32, register>
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<16xf32, global>
    tile.atomic_add %s, %sw : !tile.tile<1x16xf32, register>, !tile.tile<16xf32, global>
    %qw = tile.view %Q[%n0] : !tile.tile<?xf32, global> -> !tile.tile<16xf32, global>
    tile.atomic_add %q, %qw : !tile.tile<1x16xf32, register>, !tile.tile<16xf32, global>
    func.return
  }
}
