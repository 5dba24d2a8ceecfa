// The bias gradient of a bf16 dY [M, N] with its column maxima: S[j] = sum_i dY[i, j] in f32, MX[j] = max_i dY[i, j].
// One block per 64 columns; the row blocks of 64 are copied into a shared tile (tile.cp_async, TMA: N promised a
// multiple of 8), loaded, cast to f32 and reduced; the default pipeline pipelines the loop and warp-specializes
// it (a TMA producer warpgroup, the reductions' barriers among the consumers).
builtin.module {
  func.func @bias_grad_tma(%X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>, tile.divisible = {N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %cbn : index
    %m = tile.dim %X[0] : !tile.tile<?x?xbf16, global>
    %mb = arith.ceildivui %m, %cbm : index
    %mt = tile.splat %m : index -> !tile.tile<64xi32, register>
    %sh = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %z = tile.fill 0.0 : !tile.tile<1x64xf32, register>
    %ni = tile.fill 0xFF800000 : !tile.tile<1x64xf32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %r:2 = scf.for %i = %c0 to %mb step %c1 iter_args(%acc = %z, %mx = %ni) -> (!tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, register>) {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %xw, %sh : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %xh = tile.load %sh : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
      %x = tile.cast %xh : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
      %p = tile.col_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
      %row = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<64xi1, register>, !tile.tile<64x64xf32, register>
      %q = tile.col_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
      %a = tile.add %acc, %p : !tile.tile<1x64xf32, register>
      %mx1 = tile.element_max %mx, %q : !tile.tile<1x64xf32, register>
      tile.barrier
      scf.yield %a, %mx1 : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, register>
    }
    %sw = tile.view %S[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#0, %sw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    %mw = tile.view %MX[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#1, %mw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
