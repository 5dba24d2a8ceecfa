// A block-sparse GEMM by a mask of K blocks per row block, as a structured-sparsity or MoE-capacity kernel writes
// it: for A [M, K] bf16, B [K, N] bf16 and MASK [ceildiv(M, 64), ceildiv(K, 64)] i32 (nonzero: the block is
// kept),
//   C[i, j] = sum over the K blocks kb with MASK[i / 64, kb] != 0 of A[i, kb] B[kb, j]   (f32),
// any M, N, K (specialized on K and N multiples of 8: TMA copies into rings, the loop pipelined). The copies run
// on every trip (a copy committed under an scf.if is refused below Tile IR); the tile.mma runs under an scf.if
// on the mask entry (tile.load_index), which yields the accumulator either way.
builtin.module {
  func.func @block_sparse_gemm(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %MASK: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<ceildiv(M, 64), ceildiv(K, 64)>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %keep = tile.load_index %MASK[%bm, %j] : !tile.tile<?x?xi32, global>
      %zero_i = arith.constant 0 : index
      %kept = arith.cmpi ne, %keep, %zero_i : index
      %s2 = scf.if %kept -> (!tile.tile<64x64xf32, register>) {
        %p = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
        scf.yield %p : !tile.tile<64x64xf32, register>
      } else {
        scf.yield %s : !tile.tile<64x64xf32, register>
      }
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
