// The column sums p [1x32] of X[0]'s first 64 rows stored into a 1-D window of S starting 3 elements before
// the tensor (S[j] = p[j + 3]; the first three columns are not written) and added into one of T starting at 3
// (T[3 + j] += p[j]; columns past N are not added).
builtin.module {
  func.func @shifted_col_windows(%X: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %T: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %c3 = arith.constant 3 : index
    %xw = tile.view %X[%c0, %c0, %c0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x32xf32, global>
    %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %p = tile.col_sum %x : !tile.tile<64x32xf32, register> -> !tile.tile<1x32xf32, register>
    %st = arith.subi %c0, %c3 : index
    %sw = tile.view %S[%st] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.store_global %p, %sw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    %tw = tile.view %T[%c3] : !tile.tile<?xf32, global> -> !tile.tile<32xf32, global>
    tile.atomic_add %p, %tw : !tile.tile<1x32xf32, register>, !tile.tile<32xf32, global>
    func.return
  }
}
