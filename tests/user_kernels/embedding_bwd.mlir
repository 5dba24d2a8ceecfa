// The embedding table's gradient, as a language model's backward ends: for token ids IDX [M] i32 (repeats among
// them; -1 a padding token, outside the table: not added) and the gradient of the looked-up rows DY [M, D] f32,
//   DE[v, d] = sum_{i : IDX[i] = v} DY[i, d]   (DE [V, D] f32, zeroed by the launch),
// any M, V, D (V, the vocabulary, given at launch: no input has it). Block (x, y) takes rows 64x.. and columns 64y..: tile.scatter_add of its DY tile at the
// coordinates (IDX[i] as a [64, 1] column, the column index as a [1, 64] row), atomic across blocks. Rows past M
// read DY as 0 and IDX as 0: they add nothing to row 0.
builtin.module {
  func.func @embedding_bwd(
      %IDX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, D>},
      %DE: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<V, D>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(D, 64)>,
                  tile.launch_sizes = ["V"]} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %iw = tile.view %IDX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %ids = tile.load %iw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %rows = tile.reshape %ids : !tile.tile<64xi32, register> -> !tile.tile<64x1xi32, register>
    %cols = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    tile.scatter_add %dy, %DE[%rows, %cols] : !tile.tile<64x64xf32, register>, !tile.tile<?x?xf32, global>, !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register>
    func.return
  }
}
