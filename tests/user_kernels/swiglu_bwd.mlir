// SwiGLU's backward, as a training kernel fuses it after the down projection's input gradient: for the gate
// G, the up U and the gradient DY [M, N] f32 (any M, N; blocks of 64 x 64), with s = sigmoid(G),
//   DG = DY U s (1 + G (1 - s))   (d silu(g) / dg, written out from tile.sigmoid),
//   DU = bf16(DY silu(G))          (tile.silu, rounded once to bf16 for the next GEMM).
builtin.module {
  func.func @swiglu_bwd(
      %G: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %U: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DY: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %DG: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %DU: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %gw = tile.view %G[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %g = tile.load %gw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %uw = tile.view %U[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %u = tile.load %uw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %dyw = tile.view %DY[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %dy = tile.load %dyw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %s = tile.sigmoid %g : !tile.tile<64x64xf32, register>
    %oms = tile.sub %one, %s : !tile.tile<1x1xf32, register>, !tile.tile<64x64xf32, register>
    %goms = tile.mul %g, %oms : !tile.tile<64x64xf32, register>
    %t = tile.add %goms, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %ds = tile.mul %s, %t : !tile.tile<64x64xf32, register>
    %du0 = tile.mul %dy, %u : !tile.tile<64x64xf32, register>
    %dg = tile.mul %du0, %ds : !tile.tile<64x64xf32, register>
    %dgw = tile.view %DG[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %dg, %dgw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %silu = tile.silu %g : !tile.tile<64x64xf32, register>
    %du = tile.mul %dy, %silu : !tile.tile<64x64xf32, register>
    %dub = tile.cast %du : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %duw = tile.view %DU[%m0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.store_global %dub, %duw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
    func.return
  }
}
