// An int8-style quantize epilogue on a GEMM whose A is given transposed: for AT [K, M] bf16 (A^T, read through
// transpose_a), B [K, N] bf16, per-row scales SROW [M] f32 and per-column scales SCOL [1, N] f32 (a column
// vector),
//   Q = i32(clamp(rint(((A B) SROW[:, None]) SCOL[None, :]), -128, 127))   (rint: ties to even),
// the i32 tensor an int8 kernel stores before packing. A NaN (an infinite scale times a zero sum) stays NaN
// through the clamp (max.NaN, min.NaN) and converts to 0 (cvt.rzi.s32.f32).
// Grid: row blocks x column blocks; any M, N, K.
builtin.module {
  func.func @gemm_quant_i8(
      %AT: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, M>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %SROW: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %SCOL: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<1, N>},
      %Q: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bn = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bn, %c64 : index
    %k_size = tile.dim %B[0] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%s = %zero) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %aw = tile.view %AT[%k0, %m0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %bw, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %s2 = tile.mma %a_smem, %b_smem, %s transpose_a : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %rw = tile.view %SROW[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %r = tile.load %rw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %cw = tile.view %SCOL[%c0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x64xf32, global>
    %cv = tile.load %cw : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, register>
    %x1 = tile.mul %acc, %r : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %x2 = tile.mul %x1, %cv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %xr = tile.rint %x2 : !tile.tile<64x64xf32, register>
    %lo = tile.fill -128.0 : !tile.tile<64x64xf32, register>
    %hi = tile.fill 127.0 : !tile.tile<64x64xf32, register>
    %x3 = tile.element_max %xr, %lo : !tile.tile<64x64xf32, register>
    %x4 = tile.element_min %x3, %hi : !tile.tile<64x64xf32, register>
    %q = tile.cast %x4 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xi32, register>
    %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %q, %qw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
