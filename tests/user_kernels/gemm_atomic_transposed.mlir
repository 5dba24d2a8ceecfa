// A GEMM that writes its result transposed through an atomic add: CT = (A B)^T, A [M, K] bf16, B [K, N] bf16,
// CT [N, M] f32, any sizes. It runs at Tile level; below it the lowering refuses it by name at the atomic add
// (a transposed add lowers only into a window from column 0 of a tensor whose constant row length covers the
// value's rows, as the backward's dQ^T: here the window starts at column 64x of a row of M): see
// gemm_store_transposed.mlir for the form that lowers.
// Block (x, y) computes the [64, 128] tile of A B at rows 64x.., columns 128y.. (a K loop into one accumulator)
// and writes it into CT's [128, 64] window at rows 128y.., columns 64x.. with tile.atomic_add transpose (a
// store_global takes no transpose: the window's shape must be the value's). The output starts at zero and each
// element is added once, so the result is the sum itself, bit for bit; elements past N or M are dropped.
builtin.module {
  func.func @gemm_atomic_transposed(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %CT: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<N, M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 128)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c128 : index
    %k = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %tk = arith.ceildivui %k, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x128xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x128xf32, register>
    %acc = scf.for %j = %c0 to %tk step %c1 iter_args(%s = %zero) -> (!tile.tile<64x128xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x128xbf16, global>, !tile.tile<64x128xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<64x128xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x128xf32, register>
    }
    %cw = tile.view %CT[%n0, %m0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x64xf32, global>
    tile.atomic_add %acc, %cw transpose : !tile.tile<64x128xf32, register>, !tile.tile<128x64xf32, global>
    func.return
  }
}
