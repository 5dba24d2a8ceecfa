// A fused residual add + RMSNorm + projection, the normalized rows never leaving the block: over a hidden size
// K <= 128 (any K), C = bf16(H rsqrt(mean(H^2) + eps) W) B with H = X + R, X, R [M, K] f32, W [K] f32,
// B [K, N] bf16, C [M, N] f32. Each block normalizes its 64 rows in registers, rounds them to bf16 and stores
// them to shared memory (tile.store_shared, then a barrier) as the A operand of one tile.mma with the [128, 64]
// tile of B (columns past K read as zero in X, R and W, so their A columns are zero).
builtin.module {
  func.func @rmsnorm_gemm(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, K>},
      %R: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, K>},
      %W: !tile.tile<?xf32, global> {tile.dims = #tile.dims<K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %ki = arith.index_cast %k : index to i32
    %kf = arith.sitofp %ki : i32 to f32
    %one = arith.constant 1.0 : f32
    %inv_k = arith.divf %one, %kf : f32
    %inv = tile.splat %inv_k : f32 -> !tile.tile<64xf32, register>
    %b_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %bw = tile.view %B[%c0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
    tile.cp_async %bw, %b_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %x = tile.load %xw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %rw = tile.view %R[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x128xf32, global>
    %r = tile.load %rw : !tile.tile<64x128xf32, global> -> !tile.tile<64x128xf32, register>
    %h = tile.add %x, %r : !tile.tile<64x128xf32, register>
    %sq = tile.mul %h, %h : !tile.tile<64x128xf32, register>
    %ss = tile.row_sum %sq : !tile.tile<64x128xf32, register> -> !tile.tile<64xf32, register>
    %ms = tile.mul %ss, %inv : !tile.tile<64xf32, register>
    %eps = tile.fill 1.0e-06 : !tile.tile<64xf32, register>
    %v = tile.add %ms, %eps : !tile.tile<64xf32, register>
    %rs = tile.rsqrt %v : !tile.tile<64xf32, register>
    %hn = tile.mul %h, %rs : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
    %ww = tile.view %W[%c0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<128xf32, global> -> !tile.tile<1x128xf32, register>
    %y = tile.mul %hn, %w : !tile.tile<64x128xf32, register>, !tile.tile<1x128xf32, register>
    %yb = tile.cast %y : !tile.tile<64x128xf32, register> -> !tile.tile<64x128xbf16, register>
    %a_smem = tile.alloc_shared : !tile.tile<64x128xbf16, shared, swizzle 128>
    tile.store_shared %yb, %a_smem : !tile.tile<64x128xbf16, register>, !tile.tile<64x128xbf16, shared, swizzle 128>
    tile.cp_wait_group 0
    tile.barrier
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = tile.mma %a_smem, %b_smem, %zero : !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
