// Y = A B + bias (A [M, K], B [K, N] bf16) in 128 x 64 blocks (two consumer warpgroups) with the column statistics of
// gemm_bias_colstats.mlir, and inside the K loop a tile.col_max of each step's partial accumulator carried as a
// [1x64] iter_arg: PK[j] = the largest partial sum of column j over the K steps (the 128 rows of the first row block;
// rows past M hold 0), stored by the blocks of the first row block. The default pipeline pipelines and
// warp-specializes the loop: the col_max's barrier counts the consumer warpgroups.
builtin.module {
  func.func @gemm_colmax_kloop(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %BIAS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DB: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %SQ: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %RS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %PK: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 64)>,
                  tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbk = arith.constant 64 : index
    %cbm = arith.constant 128 : index
    %cbn = arith.constant 64 : index
    %mb = tile.program_id x : index
    %nb = tile.program_id y : index
    %m0 = arith.muli %mb, %cbm : index
    %n0 = arith.muli %nb, %cbn : index
    %k = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %m = tile.dim %A[0] : !tile.tile<?x?xbf16, global>
    %nk = arith.ceildivui %k, %cbk : index
    %as = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %bs = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %acc0 = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<1x64xf32, register>
    %acc, %pk = scf.for %j = %c0 to %nk step %c1 iter_args(%a = %acc0, %p = %ninf) -> (!tile.tile<128x64xf32, register>, !tile.tile<1x64xf32, register>) {
      %k0 = arith.muli %j, %cbk : index
      %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %aw, %as : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %bs : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %an = tile.mma %as, %bs, %a : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<128x64xf32, register>
      %cm = tile.col_max %an : !tile.tile<128x64xf32, register> -> !tile.tile<1x64xf32, register>
      %pn = tile.element_max %p, %cm : !tile.tile<1x64xf32, register>
      tile.barrier
      scf.yield %an, %pn : !tile.tile<128x64xf32, register>, !tile.tile<1x64xf32, register>
    }
    %biw = tile.view %BIAS[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bias = tile.load_broadcast %biw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %y = tile.add %acc, %bias : !tile.tile<128x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<128x64xf32, register>, !tile.tile<128x64xf32, global>
    %mt = tile.splat %m : index -> !tile.tile<128xi32, register>
    %row = tile.iota rows offset %m0 : !tile.tile<128xi32, register>
    %past = tile.cmp ge %row, %mt : !tile.tile<128xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<128x64xf32, register>
    %ym = tile.select %past, %zero, %y : !tile.tile<128xi1, register>, !tile.tile<128x64xf32, register>
    %cs = tile.col_sum %ym : !tile.tile<128x64xf32, register> -> !tile.tile<1x64xf32, register>
    %dbw = tile.view %DB[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %cs, %dbw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    %y2 = tile.mul %ym, %ym : !tile.tile<128x64xf32, register>
    %cq = tile.col_sum %y2 : !tile.tile<128x64xf32, register> -> !tile.tile<1x64xf32, register>
    %sqw = tile.view %SQ[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.atomic_add %cq, %sqw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    %rs = tile.row_sum %y : !tile.tile<128x64xf32, register> -> !tile.tile<128xf32, register>
    %rsw = tile.view %RS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<128xf32, global>
    tile.atomic_add %rs, %rsw : !tile.tile<128xf32, register>, !tile.tile<128xf32, global>
    %pkw = tile.view %PK[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %first = arith.cmpi eq, %mb, %c0 : index
    scf.if %first {
      tile.store_global %pk, %pkw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    }
    func.return
  }
}
