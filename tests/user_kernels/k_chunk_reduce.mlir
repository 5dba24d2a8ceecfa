// Row statistics over K chunks, a reduction the user's own scf.for carries: X [M, K] f32 (any M, K), the loop
// takes 64 columns at a time with the running sum of squares and the running maximum as row-vector iter_args;
// the last chunk's columns past K are masked to -inf for the maximum (the loads give 0 there, which the sum
// takes as is). SS[i] = sum_k X[i, k]^2, MX[i] = max_k X[i, k].
builtin.module {
  func.func @k_chunk_reduce(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, K>},
      %SS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %k = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %chunks = arith.ceildivui %k, %c64 : index
    %kt = tile.splat %k : index -> !tile.tile<1x64xi32, register>
    %ninf = tile.fill 0xFF800000 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %low = tile.fill 0xFF800000 : !tile.tile<64xf32, register>
    %r:2 = scf.for %j = %c0 to %chunks step %c1 iter_args(%ss = %zero, %mx = %low) -> (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %sq = tile.mul %x, %x : !tile.tile<64x64xf32, register>
      %part = tile.row_sum %sq : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %ss_new = tile.add %ss, %part : !tile.tile<64xf32, register>
      %col = tile.iota cols offset %k0 : !tile.tile<1x64xi32, register>
      %past = tile.cmp ge %col, %kt : !tile.tile<1x64xi32, register>
      %xm = tile.select %past, %ninf, %x : !tile.tile<1x64xi1, register>, !tile.tile<64x64xf32, register>
      %cm = tile.row_max %xm : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %mx_new = tile.element_max %mx, %cm : !tile.tile<64xf32, register>
      scf.yield %ss_new, %mx_new : !tile.tile<64xf32, register>, !tile.tile<64xf32, register>
    }
    %sw = tile.view %SS[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#0, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %mw = tile.view %MX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %r#1, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
