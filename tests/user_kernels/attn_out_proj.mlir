// The attention output projection fused with its epilogue, as a transformer layer ends: for the attention
// output O [B, H, S, 64] bf16 (heads not yet merged), the projection W [H * 64, N] bf16, a bias [N] f32 and the
// residual stream R [B, S, N] f32,
//   Y[b, s, :] = sum_h O[b, h, s, :] W[64 h : 64 h + 64, :] + bias + R[b, s, :]   (f32 out),
// the heads merged by the K loop itself (one 64-wide K step per head, no transpose of O). Grid: query blocks x
// column blocks x batch; any S and N (rows past S and columns past N read as 0 and are not written).
builtin.module {
  func.func @attn_out_proj(
      %O: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<B, H, S, 64>},
      %W: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<64 * H, N>},
      %bias: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %R: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, S, N>},
      %Y: !tile.tile<?x?x?xf32, global> {tile.dims = #tile.dims<B, S, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(S, 64), ceildiv(N, 64), B>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %sb = tile.program_id x : index
    %nb = tile.program_id y : index
    %b = tile.program_id z : index
    %s0 = arith.muli %sb, %c64 : index
    %n0 = arith.muli %nb, %c64 : index
    %heads = tile.dim %O[1] : !tile.tile<?x?x?x64xbf16, global>
    %o_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %h = %c0 to %heads step %c1 iter_args(%a = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %h, %c64 : index
      %ow = tile.view %O[%b, %h, %s0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ow, %o_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %ww = tile.view %W[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %a2 = tile.mma %o_smem, %w_smem, %a : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %a2 : !tile.tile<64x64xf32, register>
    }
    %bw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bv = tile.load_broadcast %bw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %rw = tile.view %R[%b, %s0, %n0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %r = tile.load %rw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %ab = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %y = tile.add %ab, %r : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%b, %s0, %n0] : !tile.tile<?x?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
