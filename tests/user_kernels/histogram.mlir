// A weighted histogram by atomic adds: H[b] = W[b] #{i : X[i] == b}, X [M] i32 (values outside [0, NB) are counted
// nowhere), W [NB] f32 (a weight per bin: 1 / its width for a density), H [NB] f32, any M and NB. Block (x, y) takes values 64x.. and bins 64y..:
// the one-hot tile E[i, j] = (X[i] == bin j) & (i < M) as 1.0 / 0.0 (tile.cmp on the values' column against the
// bins' tile.iota, a select), rounded to bf16 (exact) and stored to shared memory; E^T times a tile of ones
// (tile.mma transpose_a) sums each bin's column into every column of its row, tile.row_max takes one, times
// the bins' weights (tile.load of W's window), and tile.atomic_add adds the 64 values into H (the blocks of one
// bin range add in any order: with weights that are powers of two every partial sum below 2^24 times the
// weight is exact in f32, so every order gives the same bits). Padding rows past M are masked by their index, not
// by the value a load past the end reads.
builtin.module {
  func.func @histogram(
      %X: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<NB>},
      %H: !tile.tile<?xf32, global> {tile.dims = #tile.dims<NB>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(NB, 64)>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %b0 = arith.muli %by, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?xi32, global>
    %mi = arith.index_cast %m : index to i32
    %xw = tile.view %X[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    %x = tile.load %xw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %rows = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
    %mv = tile.splat %mi : i32 -> !tile.tile<64xi32, register>
    %valid = tile.cmp lt %rows, %mv : !tile.tile<64xi32, register>
    %bins = tile.iota cols offset %b0 : !tile.tile<1x64xi32, register>
    %hit = tile.cmp eq %x, %bins : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %none = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %e0 = tile.select %hit, %one, %none : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %e = tile.select %valid, %e0, %none : !tile.tile<64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %eb = tile.cast %e : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %ones = tile.cast %one : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %e_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %ones_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.store_shared %eb, %e_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.store_shared %ones, %ones_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.barrier
    %counts = tile.mma %e_smem, %ones_smem, %none transpose_a : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %c = tile.row_max %counts : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %ww = tile.view %W[%b0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %w = tile.load %ww : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %cw = tile.mul %c, %w : !tile.tile<64xf32, register>
    %hw = tile.view %H[%b0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %cw, %hw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
