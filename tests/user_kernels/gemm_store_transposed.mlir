// A GEMM that stores its result transposed: CT = (A B)^T = B^T A^T, A [M, K] bf16, B [K, N] bf16, CT [N, M] f32,
// any sizes. Block (x, y) computes CT's [64, 64] tile at rows 64x.. (columns of A B), columns 64y.. (rows of
// A B) as a K loop of tile.mma with both operands transposed: the [K, N] tile of B read as B^T (transpose_a)
// times the [M, K] tile of A read as A^T (transpose_b), so the accumulator already holds the transposed tile and
// the store is a plain tile.store_global into CT (a store takes no transpose: its window's shape is the value's).
builtin.module {
  func.func @gemm_store_transposed(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %CT: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<N, M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64), ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %n0 = arith.muli %bx, %c64 : index
    %m0 = arith.muli %by, %c64 : index
    %k = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %tk = arith.ceildivui %k, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %tk step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %b_smem, %a_smem, %s transpose_a transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %CT[%n0, %m0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
