// Two K loops in sequence into one accumulator: C = A1 B1 + A2 B2, A1 [M, K1], B1 [K1, N], A2 [M, K2],
// B2 [K2, N] bf16, C [M, N] f32, any sizes (K1 and K2 differ: each loop has its own trip count). The second loop
// starts from the first one's result; the shared tiles are reused, the barrier at the end of each trip
// ordering the tensor core's reads before the next copies.
builtin.module {
  func.func @two_gemms(
      %A1: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K1>},
      %B1: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K1, N>},
      %A2: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K2>},
      %B2: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K2, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k1 = tile.dim %A1[1] : !tile.tile<?x?xbf16, global>
    %k2 = tile.dim %A2[1] : !tile.tile<?x?xbf16, global>
    %t1 = arith.ceildivui %k1, %c64 : index
    %t2 = arith.ceildivui %k2, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc1 = scf.for %j = %c0 to %t1 step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %kk = arith.muli %j, %c64 : index
      %aw = tile.view %A1[%m0, %kk] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B1[%kk, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %acc2 = scf.for %j = %c0 to %t2 step %c1 iter_args(%s = %acc1) -> (!tile.tile<64x64xf32, register>) {
      %kk = arith.muli %j, %c64 : index
      %aw = tile.view %A2[%m0, %kk] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B2[%kk, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc2, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
