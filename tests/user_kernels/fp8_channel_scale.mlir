// Per-channel FP8 quantization of X [M, N] f32: amax[j] = max_i |X[i, j]| over all rows (a running tile.col_max
// over the row blocks), SC[j] = 448 / max(amax[j], 1e-12) stored into a 1-D [N], then Q = e4m3(X SC) (the
// [1x64] scale broadcast over the rows, cvt.rn.satfinite). One block per 64 channels; N even.
builtin.module {
  func.func @fp8_cols(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Q: !tile.tile<?x?xf8E4M3FN, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %SC: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 64)>, tile.divisible = {N = 2 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbm = arith.constant 64 : index
    %cbn = arith.constant 64 : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %cbn : index
    %m = tile.dim %X[0] : !tile.tile<?x?xf32, global>
    %mb = arith.ceildivui %m, %cbm : index
    %a0 = tile.fill 0.0 : !tile.tile<1x64xf32, register>
    %amax = scf.for %i = %c0 to %mb step %c1 iter_args(%a = %a0) -> (!tile.tile<1x64xf32, register>) {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %ax = tile.abs %x : !tile.tile<64x64xf32, register>
      %bmx = tile.col_max %ax : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>
      %an = tile.element_max %a, %bmx : !tile.tile<1x64xf32, register>
      scf.yield %an : !tile.tile<1x64xf32, register>
    }
    %tiny = tile.fill 1.0e-12 : !tile.tile<1x64xf32, register>
    %am = tile.element_max %amax, %tiny : !tile.tile<1x64xf32, register>
    %fmax = tile.fill 448.0 : !tile.tile<1x64xf32, register>
    %scale = tile.div %fmax, %am : !tile.tile<1x64xf32, register>
    %sw = tile.view %SC[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %scale, %sw : !tile.tile<1x64xf32, register>, !tile.tile<64xf32, global>
    scf.for %i = %c0 to %mb step %c1 {
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %y = tile.mul %x, %scale : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %q = tile.cast %y : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf8E4M3FN, register>
      %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xf8E4M3FN, global> -> !tile.tile<64x64xf8E4M3FN, global>
      tile.store_global %q, %qw : !tile.tile<64x64xf8E4M3FN, register>, !tile.tile<64x64xf8E4M3FN, global>
    }
    func.return
  }
}
