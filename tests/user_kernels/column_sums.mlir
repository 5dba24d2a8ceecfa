// Column sums of X [M, N] bf16 (a reduction to a column vector): S[j] = sum_i X[i, j] in f32, any M, N.
// One block per 64 columns; a loop over row blocks multiplies X^T (transpose_a of the [64 rows, 64 columns] tile
// in shared memory) by a [64, 64] tile of ones made in registers (tile.fill, tile.cast to bf16) and stored to
// shared memory once (tile.store_shared): acc[j, c] = sum_i X[i, j] for every c; tile.row_max takes one column.
builtin.module {
  func.func @column_sums(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %c64 : index
    %m = tile.dim %X[0] : !tile.tile<?x?xbf16, global>
    %nm = arith.ceildivui %m, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %ones_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %ones32 = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %ones = tile.cast %ones32 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    tile.store_shared %ones, %ones_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.barrier
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %nm step %c1 iter_args(%a = %zero) -> (!tile.tile<64x64xf32, register>) {
      %m0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %a2 = tile.mma %x_smem, %ones_smem, %a transpose_a : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %a2 : !tile.tile<64x64xf32, register>
    }
    %s = tile.row_max %acc : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %s, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
