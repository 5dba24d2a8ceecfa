// One fused AdamW step, as an optimizer kernel writes it: parameters P, gradients G and the moments M, V, all
// [R, C] f32 (any R, C), and the step count STEP [1] f32 (t >= 1) in; the new P, M, V out. With lr = 1e-3,
// b1 = 0.9, b2 = 0.999, eps = 1e-8 and weight decay 0.01:
//   M' = b1 M + (1 - b1) G,   V' = b2 V + (1 - b2) G^2,
//   P' = P - lr (M' / (1 - b1^t) / (sqrt(V' / (1 - b2^t)) + eps) + 0.01 P).
// The bias corrections 1 - b^t = 1 - 2^(t log2 b) are computed once per block on [1, 1] tiles (one value for the
// whole block: tile.scale, tile.exp2, tile.sub) and broadcast onto the [64, 64] tiles. Three outputs.
builtin.module {
  func.func @adamw_step(
      %P: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>},
      %G: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>},
      %M: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>},
      %V: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>},
      %STEP: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>},
      %P2: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>, tile.role = "out"},
      %M2: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>, tile.role = "out"},
      %V2: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, C>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(R, 64), ceildiv(C, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %br = tile.program_id x : index
    %bc = tile.program_id y : index
    %r0 = arith.muli %br, %c64 : index
    %k0 = arith.muli %bc, %c64 : index
    %tw = tile.view %STEP[%c0] : !tile.tile<1xf32, global> -> !tile.tile<1xf32, global>
    %t = tile.load_broadcast %tw : !tile.tile<1xf32, global> -> !tile.tile<1x1xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    // log2(0.9) and log2(0.999) as f32
    %e1 = tile.scale %t by -0.15200309344504997 : !tile.tile<1x1xf32, register>
    %e2 = tile.scale %t by -0.0014434168696687277 : !tile.tile<1x1xf32, register>
    %p1 = tile.exp2 %e1 : !tile.tile<1x1xf32, register>
    %p2 = tile.exp2 %e2 : !tile.tile<1x1xf32, register>
    %bc1 = tile.sub %one, %p1 : !tile.tile<1x1xf32, register>
    %bc2 = tile.sub %one, %p2 : !tile.tile<1x1xf32, register>
    %pw = tile.view %P[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %p = tile.load %pw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %gw = tile.view %G[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %g = tile.load %gw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %mw = tile.view %M[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %m = tile.load %mw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %vw = tile.view %V[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %v = tile.load %vw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %mb = tile.scale %m by 0.9 : !tile.tile<64x64xf32, register>
    %gb = tile.scale %g by 0.1 : !tile.tile<64x64xf32, register>
    %m_new = tile.add %mb, %gb : !tile.tile<64x64xf32, register>
    %vb = tile.scale %v by 0.999 : !tile.tile<64x64xf32, register>
    %gg = tile.mul %g, %g : !tile.tile<64x64xf32, register>
    %ggb = tile.scale %gg by 0.001 : !tile.tile<64x64xf32, register>
    %v_new = tile.add %vb, %ggb : !tile.tile<64x64xf32, register>
    %mhat = tile.div %m_new, %bc1 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %vhat = tile.div %v_new, %bc2 : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %root = tile.sqrt %vhat : !tile.tile<64x64xf32, register>
    %eps = tile.fill 1.0e-08 : !tile.tile<1x1xf32, register>
    %den = tile.add %root, %eps : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %ratio = tile.div %mhat, %den : !tile.tile<64x64xf32, register>
    %decay = tile.scale %p by 0.01 : !tile.tile<64x64xf32, register>
    %upd = tile.add %ratio, %decay : !tile.tile<64x64xf32, register>
    %step = tile.scale %upd by 1.0e-03 : !tile.tile<64x64xf32, register>
    %p_new = tile.sub %p, %step : !tile.tile<64x64xf32, register>
    %p2w = tile.view %P2[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %p_new, %p2w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %m2w = tile.view %M2[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %m_new, %m2w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %v2w = tile.view %V2[%r0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %v_new, %v2w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
