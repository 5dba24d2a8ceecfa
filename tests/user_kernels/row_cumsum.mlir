// A cumulative sum along each row of X [M, N] bf16 (any N), Y [M, N] f32: Tile IR has no scan op
// (`tile.cumsum` is refused by name), so the user writes it as a product with the upper-triangular matrix of
// ones U[i, j] = (i <= j), built once with tile.iota, tile.cmp, tile.select and tile.cast and stored to shared
// memory, plus a carry: Y[:, block j] = X[:, block j] U + (the row totals of blocks 0 .. j-1). The 64-column
// blocks go through shared memory as the A operand (cp.async; columns past N read as zero, so they add nothing
// to the carry); the carry is a row vector of f32 sums.
builtin.module {
  func.func @row_cumsum(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %nb = arith.ceildivui %n, %c64 : index
    %i = tile.iota rows : !tile.tile<64x1xi32, register>
    %j = tile.iota cols : !tile.tile<1x64xi32, register>
    %upper = tile.cmp le %i, %j : !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register>
    %ones = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %zeros = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %u32 = tile.select %upper, %ones, %zeros : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %u = tile.cast %u32 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %u_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.store_shared %u, %u_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %carry0 = tile.fill 0.0 : !tile.tile<64xf32, register>
    %total = scf.for %k = %c0 to %nb step %c1 iter_args(%carry = %carry0) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %k, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %part = tile.mma %x_smem, %u_smem, %zeros : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      %y = tile.add %part, %carry : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
      %xr = tile.load %xw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %xf = tile.cast %xr : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %s = tile.row_sum %xf : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %next = tile.add %carry, %s : !tile.tile<64xf32, register>
      scf.yield %next : !tile.tile<64xf32, register>
    }
    func.return
  }
}
