// A GEMM with a bias epilogue written by hand: C = bf16(A B + bias[None, :]), blocks of 128 x 64, K in steps of 64.
builtin.module {
  func.func @gemm_bias(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 64)>,
                  tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %mb = tile.program_id x : index
    %nb = tile.program_id y : index
    %m0 = arith.muli %mb, %c128 : index
    %n0 = arith.muli %nb, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %acc0 = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%acc_in = %acc0) -> (!tile.tile<128x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %acc_new = tile.mma %a_smem, %b_smem, %acc_in : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<128x64xf32, register>
      tile.barrier
      scf.yield %acc_new : !tile.tile<128x64xf32, register>
    }
    %bias_w = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %b_rows = tile.load_broadcast %bias_w : !tile.tile<64xf32, global> -> !tile.tile<128x64xf32, register>
    %sum = tile.add %acc, %b_rows : !tile.tile<128x64xf32, register>
    %out = tile.cast %sum : !tile.tile<128x64xf32, register> -> !tile.tile<128x64xbf16, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.store_global %out, %cw : !tile.tile<128x64xbf16, register>, !tile.tile<128x64xbf16, global>
    func.return
  }
}
