// A mixture-of-experts grouped GEMM, as the expert layer of a MoE model runs after routing: the tokens X [M, K]
// bf16 are sorted by expert and padded so that each block of 64 rows belongs to one expert, whose number the table
// EXPERT [B] i32 gives (B = ceil(M / 64); an expert may own no block, or many; -1 marks a block of padding);
// each block multiplies its rows by its expert's weight W [E, K, N] bf16: Y[rows of block b] = X[rows of block b]
// W[EXPERT[b]] + BIAS[EXPERT[b], :] (BIAS [E, N] f32, read with tile.gather at the expert's row, a [1, 1]
// coordinate), Y [M, N] f32, and 0 in a block of padding. Any M, N, K, E (specialized on K and N multiples of 8).
// The expert is a scalar read with tile.load_index and used as the leading index of W's views. A block of padding
// runs its K loop zero times (an scf.if around the loop is refused below Tile IR: its copies commit their groups
// inside the branch) and gathers its bias at row -1, outside the table: 0. Grid: M blocks x N blocks.
builtin.module {
  func.func @moe_grouped_gemm(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %EXPERT: !tile.tile<?xi32, global> {tile.dims = #tile.dims<B>},
      %W: !tile.tile<?x?x?xbf16, global> {tile.dims = #tile.dims<E, K, N>},
      %BIAS: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<E, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %e = tile.load_index %EXPERT[%bm] : !tile.tile<?xi32, global>
    %k_size = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %n_k_all = arith.ceildivui %k_size, %c64 : index
    %none = arith.constant -1 : index
    %padding = arith.cmpi eq, %e, %none : index
    %n_k = arith.select %padding, %c0, %n_k_all : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %W[%e, %k0, %n0] : !tile.tile<?x?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %x_smem, %w_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %ev = tile.splat %e : index -> !tile.tile<1x1xi32, register>
    %col = tile.iota cols offset %n0 : !tile.tile<1x64xi32, register>
    %bias = tile.gather %BIAS[%ev, %col] : !tile.tile<?x?xf32, global>, !tile.tile<1x1xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %y = tile.add %acc, %bias : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
