// A two-layer MLP in one kernel, the hidden activations never leaving the block: Y = bf16(silu(X W1)) W2, X [M, D],
// W1 [D, F], W2 [F, N] bf16, Y [M, N] f32, any M, D, F, N. Block (x, y) takes rows 64x.. and output columns 64y..;
// for each 64 hidden units (the outer loop, its accumulator an iter_arg) it computes H = X W1[:, f] over D
// (the inner loop), applies silu, rounds H to bf16 and stores it to shared memory (tile.store_shared, then a
// barrier) as the A operand of the second GEMM with the [64, 64] tile of W2 at rows f. Hidden units past F read
// W1 columns and W2 rows as zero, so they add nothing; each block recomputes H for its output columns.
builtin.module {
  func.func @mlp(
      %X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, D>},
      %W1: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<D, F>},
      %W2: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<F, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %d = tile.dim %X[1] : !tile.tile<?x?xbf16, global>
    %f = tile.dim %W1[1] : !tile.tile<?x?xbf16, global>
    %td = arith.ceildivui %d, %c64 : index
    %tf = arith.ceildivui %f, %c64 : index
    %x_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w1_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %h_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w2_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %y = scf.for %j = %c0 to %tf step %c1 iter_args(%acc = %zero) -> (!tile.tile<64x64xf32, register>) {
      %f0 = arith.muli %j, %c64 : index
      %w2w = tile.view %W2[%f0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      %h = scf.for %i = %c0 to %td step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
        %k0 = arith.muli %i, %c64 : index
        %xw = tile.view %X[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
        tile.cp_async %xw, %x_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
        %w1w = tile.view %W1[%k0, %f0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
        tile.cp_async %w1w, %w1_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
        tile.cp_commit_group
        tile.cp_wait_group 0
        tile.barrier
        %s2 = tile.mma %x_smem, %w1_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
        tile.barrier
        scf.yield %s2 : !tile.tile<64x64xf32, register>
      }
      tile.cp_async %w2w, %w2_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      %a = tile.silu %h : !tile.tile<64x64xf32, register>
      %ab = tile.cast %a : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
      tile.store_shared %ab, %h_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_wait_group 0
      tile.barrier
      %acc2 = tile.mma %h_smem, %w2_smem, %acc : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %acc2 : !tile.tile<64x64xf32, register>
    }
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
