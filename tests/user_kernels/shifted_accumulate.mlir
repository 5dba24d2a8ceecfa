// Atomic adds through windows that start one row before the tensor, in a grid rounded up over batches (two at a
// time): for X [B, M, 64] f32, block (x, 0, z) adds its tile of X at rows 64x.. into S at rows 64x - 1.. and its
// transpose into ST at rows 64x - 1.. (row 64x - 1 + c of ST gets column c of the tile; the width 64 a constant):
//   S[b, i] = X[b, i + 1],   ST[b, 64x - 1 + c, r] += X[b, 64x + r, c],
// rows before the tensor, and batches past it (the last z block when B is odd), dropped. Any B, M.
builtin.module {
  func.func @shifted_accumulate(
      %X: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<B, M, 64>},
      %S: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<B, M, 64>, tile.role = "out"},
      %ST: !tile.tile<?x?x64xf32, global> {tile.dims = #tile.dims<B, M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), 1, 2 * ceildiv(B, 2)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %z = tile.program_id z : index
    %m0 = arith.muli %bx, %c64 : index
    %mb = arith.subi %m0, %c1 : index
    %xw = tile.view %X[%z, %m0, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %sw = tile.view %S[%z, %mb, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.atomic_add %x, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %tw = tile.view %ST[%z, %mb, %c0] : !tile.tile<?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.atomic_add %x, %tw transpose : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
