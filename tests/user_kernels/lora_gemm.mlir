// A linear layer with a LoRA adapter fused in, as a fine-tuned model serves it: for X [M, K] bf16, the frozen weight
// W [K, N] bf16 and the adapter's rank-16 factors LA [K, 16] and LB [16, N] bf16, with the adapter's scale 2,
//   Y = bf16(X W + 2 bf16(X LA) LB),
// any M, N, K (specialized on K and N multiples of 8). Block (x, y) takes a 64 x 64 tile of Y: the K loop
// accumulates X W and X LA (a [64 x 16] accumulator: wgmma N = 16 over LA's 32-byte rows) from one shared X tile;
// then X LA, rounded to bf16 in registers, is the A operand of one more tile.mma (K = 16) against LB's [16 x 64].
builtin.module {
  func.func @lora_gemm(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %W: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %LA: !tile.tile<?x16xbf16, global> {tile.dims = #tile.dims<K, 16>},
      %LB: !tile.tile<16x?xbf16, global> {tile.dims = #tile.dims<16, N>},
      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.specialize = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %la_smem = tile.alloc_shared : !tile.tile<64x16xbf16, shared, swizzle 32>
    %lb_smem = tile.alloc_shared : !tile.tile<16x64xbf16, shared, swizzle 128>
    %lbw = tile.view %LB[%c0, %n0] : !tile.tile<16x?xbf16, global> -> !tile.tile<16x64xbf16, global>
    tile.cp_async %lbw, %lb_smem : !tile.tile<16x64xbf16, global>, !tile.tile<16x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %zero16 = tile.fill 0.0 : !tile.tile<64x16xf32, register>
    %acc:2 = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero, %t = %zero16) -> (!tile.tile<64x64xf32, register>, !tile.tile<64x16xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %W[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %law = tile.view %LA[%k0, %c0] : !tile.tile<?x16xbf16, global> -> !tile.tile<64x16xbf16, global>
      tile.cp_async %law, %la_smem : !tile.tile<64x16xbf16, global>, !tile.tile<64x16xbf16, shared, swizzle 32>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %x_smem, %w_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      %t2 = tile.mma %x_smem, %la_smem, %t : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x16xbf16, shared, swizzle 32>, !tile.tile<64x16xf32, register>
      tile.barrier
      scf.yield %s2, %t2 : !tile.tile<64x64xf32, register>, !tile.tile<64x16xf32, register>
    }
    %xa = tile.cast %acc#1 : !tile.tile<64x16xf32, register> -> !tile.tile<64x16xbf16, register>
    %lora = tile.mma %xa, %lb_smem, %zero : !tile.tile<64x16xbf16, register>, !tile.tile<16x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %y0 = tile.scale %lora by 2.0 : !tile.tile<64x64xf32, register>
    %y = tile.add %acc#0, %y0 : !tile.tile<64x64xf32, register>
    %yb = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %yb, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
