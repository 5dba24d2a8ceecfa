// Windows that start one row and one column before the tensor (a user's shift by -1, as a stencil or a causal
// shift writes it), through every kind of access: for X [M, N] f32, XH [M, N] bf16, V [M] f32 and R [N] f32,
// block (x, y) at (m0, n0) = (64x, 64y) reads and writes windows at (m0 - 1, n0 - 1), so block (0, 0)'s first
// row and column lie outside every tensor: they read as 0 and are not written.
//   Y[i, j] = X[i + 1, j + 1]   (X's tile stored one row up and one column left; Y[M - 1, :] and Y[:, N - 1]
//                                keep the zeros the launch gives an output),
//   Z[i, j] = XH[i - 1, j - 1] + V[i - 1] + R[j - 1]   (a 16-bit load, a 1-D row vector, a [1, 64] broadcast),
//   P[i, j] = XH[i - 1, j - 1]   (the bf16 tile copied to shared memory by threads, times an identity on the
//                                tensor core; exact),
// each term 0 where its index is -1. Any M, N.
builtin.module {
  func.func @shifted_windows(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %XH: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>},
      %V: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %R: !tile.tile<?xf32, global> {tile.dims = #tile.dims<N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %Z: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %P: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %mb = arith.subi %m0, %c1 : index
    %nb = arith.subi %n0, %c1 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%mb, %nb] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %x, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %hw = tile.view %XH[%mb, %nb] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %h = tile.load %hw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %hf = tile.cast %h : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %vw = tile.view %V[%mb] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %v = tile.load %vw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %rw = tile.view %R[%nb] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %r = tile.load_broadcast %rw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %z1 = tile.add %hf, %v : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %z = tile.add %z1, %r : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %zw = tile.view %Z[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %z, %zw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %i_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %rows = tile.iota rows : !tile.tile<64x64xi32, register>
    %cols = tile.iota cols : !tile.tile<64x64xi32, register>
    %diag = tile.cmp eq %rows, %cols : !tile.tile<64x64xi32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %eye = tile.select %diag, %one, %zero : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %eyeh = tile.cast %eye : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    tile.store_shared %eyeh, %i_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_async %hw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %p = tile.mma %a_smem, %i_smem, %zero : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %pw = tile.view %P[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %p, %pw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
