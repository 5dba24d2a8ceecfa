// A triangular matrix product, BLAS's TRMM with a lower-triangular A: C = tril(A) B, A [M, M] bf16 (its strict
// upper triangle ignored, whatever it holds), B [M, N] bf16, C [M, N] f32; any M, N (specialized on M and N
// multiples of 8). Row block b needs only the K blocks 0..b (its trip count is the block's own program id + 1).
// Each trip reads A's tile into registers, zeroes the elements with a column past their row (tile.iota rows and
// cols at the tile's global offsets, tile.cmp, tile.select: only the diagonal block has any), and stores it
// to shared memory as the mma's A operand; B's tile comes by tile.cp_async. Grid: M blocks x N blocks.
builtin.module {
  func.func @trmm_lower(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, M>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {M = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %n_k = arith.addi %bm, %c1 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %rows = tile.iota rows offset %m0 : !tile.tile<64x64xi32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %ah = tile.load %aw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
      %a = tile.cast %ah : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %cols = tile.iota cols offset %k0 : !tile.tile<64x64xi32, register>
      %upper = tile.cmp gt %cols, %rows : !tile.tile<64x64xi32, register>
      %am = tile.select %upper, %zero, %a : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
      %amh = tile.cast %am : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      tile.store_shared %amh, %a_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
