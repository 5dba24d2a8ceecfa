// Split-K GEMM, as a user writes it for a skinny product with a long K: C = A B summed over slices of 128 of K,
// each slice a block of the grid's z axis adding its partial product into C with tile.atomic_add (C comes in
// zeroed): A [M, K] bf16, B [K, N] bf16, C [M, N] f32, any M, N, K. Slice z takes the 64-wide K blocks
// [2 z, min(2 z + 2, nk)), nk = ceildiv(K, 64): a loop from a lower bound that is not 0, of one trip in the last
// slice when nk is odd. Blocks of 128 x 64 (two warpgroups' rows).
builtin.module {
  func.func @gemm_split_k(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 64), ceildiv(K, 128)>} {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %z = tile.program_id z : index
    %m0 = arith.muli %bm, %c128 : index
    %n0 = arith.muli %bn, %c64 : index
    %k = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %nk = arith.ceildivui %k, %c64 : index
    %c2 = arith.constant 2 : index
    %lo = arith.muli %z, %c2 : index
    %hi0 = arith.addi %lo, %c2 : index
    %hi = arith.minui %hi0, %nk : index
    %a_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %acc = scf.for %j = %lo to %hi step %c1 iter_args(%acc_in = %zero) -> (!tile.tile<128x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %acc2 = tile.mma %a_smem, %b_smem, %acc_in : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<128x64xf32, register>
      tile.barrier
      scf.yield %acc2 : !tile.tile<128x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x64xf32, global>
    tile.atomic_add %acc, %cw : !tile.tile<128x64xf32, register>, !tile.tile<128x64xf32, global>
    func.return
  }
}
