// A Mixtral-style router in one kernel: logits L = X Wr^T for X [M, K] bf16 and the router weight in nn.Linear's
// layout Wr [8, K] bf16 (8 experts), then P = softmax(L) along the 8 experts (P [M, 8] f32 out), the top-1 expert
// TOP [M] i32 (the first index of the row's maximum, as NumPy's argmax) and its probability PTOP [M] f32. Any M,
// K (specialized on K multiples of 8). Tiles of 64 x 8: the accumulator of a wgmma with N = 8, Wr's [8, 64] tile
// read transposed (transpose_b: its rows are 128 bytes, where a [64, 8] tile's would be 16, too narrow to swizzle).
builtin.module {
  func.func @router_top1(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %WR: !tile.tile<8x?xbf16, global> {tile.dims = #tile.dims<8, K>},
      %P: !tile.tile<?x8xf32, global> {tile.dims = #tile.dims<M, 8>, tile.role = "out"},
      %TOP: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %PTOP: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>,
                  tile.specialize = {K = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %m0 = arith.muli %bm, %c64 : index
    %k_size = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<8x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x8xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x8xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %WR[%c0, %k0] : !tile.tile<8x?xbf16, global> -> !tile.tile<8x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<8x64xbf16, global>, !tile.tile<8x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %x_smem, %w_smem, %s transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<8x64xbf16, shared, swizzle 128>, !tile.tile<64x8xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x8xf32, register>
    }
    %mx = tile.row_max %acc : !tile.tile<64x8xf32, register> -> !tile.tile<64xf32, register>
    %d = tile.sub %acc, %mx : !tile.tile<64x8xf32, register>, !tile.tile<64xf32, register>
    %e = tile.exp %d : !tile.tile<64x8xf32, register>
    %sum = tile.row_sum %e : !tile.tile<64x8xf32, register> -> !tile.tile<64xf32, register>
    %p = tile.div %e, %sum : !tile.tile<64x8xf32, register>, !tile.tile<64xf32, register>
    %pw = tile.view %P[%m0, %c0] : !tile.tile<?x8xf32, global> -> !tile.tile<64x8xf32, global>
    tile.store_global %p, %pw : !tile.tile<64x8xf32, register>, !tile.tile<64x8xf32, global>
    %at_max = tile.cmp eq %acc, %mx : !tile.tile<64x8xf32, register>, !tile.tile<64xf32, register>
    %col = tile.iota cols : !tile.tile<1x8xi32, register>
    %colf = tile.cast %col : !tile.tile<1x8xi32, register> -> !tile.tile<1x8xf32, register>
    %negcol = tile.neg %colf : !tile.tile<1x8xf32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x8xf32, register>
    %cand = tile.select %at_max, %negcol, %ninf : !tile.tile<64x8xi1, register>, !tile.tile<1x8xf32, register>, !tile.tile<64x8xf32, register>
    %first = tile.row_max %cand : !tile.tile<64x8xf32, register> -> !tile.tile<64xf32, register>
    %firstpos = tile.neg %first : !tile.tile<64xf32, register>
    %top = tile.cast %firstpos : !tile.tile<64xf32, register> -> !tile.tile<64xi32, register>
    %tw = tile.view %TOP[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %top, %tw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    %ptop = tile.reciprocal %sum : !tile.tile<64xf32, register>
    %ptw = tile.view %PTOP[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %ptop, %ptw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
