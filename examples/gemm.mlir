// GEMM in Tessera Tile IR: C = A x B.
//
//   A [M, K] bf16, B [K, N] bf16  ->  C [M, N] f32
//
// The output stays in f32, the tensor core's accumulator type; a caller that wants bf16 rounds once.
// One thread block computes a 128 x 128 tile of C, walking K in steps of 64. M, N and K can be anything:
// copies of partial tiles fill zeros (which add nothing to the products) and the store drops the rows and
// columns of C that fall outside it.
//
// `tile.specialize` asks the launch to specialize the kernel on K and N being multiples of 8 (rows of 16
// bytes): tessera.interpret and tessera-run compile, for such sizes, the variant that reads A and B with TMA,
// pipelined, and for any other sizes the one that copies them with every thread's ld.global (its K loop stays
// single-stage). Compiled without sizes (tessera.compile, tessera-opt) it is the TMA variant, which promises
// the multiples (`tile.divisible`) and refuses other sizes at launch. `tile.divisible = {K = 8 : i64, N = 8 :
// i64}` instead would promise them always.
//
// Built by `tessera.kernels.gemm()`; this copy is written out by hand to be read.

builtin.module {
  func.func @gemm_bf16(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {
        tile.kernel = {kind = "gemm"},
        // Thread block (x, y) computes C[x*128 : x*128 + 128, y*128 : y*128 + 128].
        tile.grid = #tile.dims<ceildiv(M, 128), ceildiv(N, 128)>,
        tile.specialize = {K = 8 : i64, N = 8 : i64}
      } {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %m_block = tile.program_id x : index
    %n_block = tile.program_id y : index
    %m0 = arith.muli %m_block, %c128 : index                 // first row of this block's C tile
    %n0 = arith.muli %n_block, %c128 : index                 // first column
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index             // steps along K; the last may be partial

    // Shared tiles for one step: rows of 64 and 128 bf16 (128 and 256 bytes) both take the 128-byte swizzle.
    %a_smem = tile.alloc_shared : !tile.tile<128x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x128xbf16, shared, swizzle 128>

    %acc_init = tile.fill 0.0 : !tile.tile<128x128xf32, register>
    %acc_final = scf.for %j = %c0 to %n_k step %c1 iter_args(%acc = %acc_init) -> (!tile.tile<128x128xf32, register>) {
      // Copy A[m0 : m0+128, k0 : k0+64] and B[k0 : k0+64, n0 : n0+128] into shared memory and wait for them.
      %k0 = arith.muli %j, %c64 : index
      %a_window = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<128x64xbf16, global>
      tile.cp_async %a_window, %a_smem : !tile.tile<128x64xbf16, global>, !tile.tile<128x64xbf16, shared, swizzle 128>
      %b_window = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x128xbf16, global>
      tile.cp_async %b_window, %b_smem : !tile.tile<64x128xbf16, global>, !tile.tile<64x128xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier

      // acc += A_tile x B_tile on the tensor core (exact products, f32 sum).
      %acc_new = tile.mma %a_smem, %b_smem, %acc : !tile.tile<128x64xbf16, shared, swizzle 128>, !tile.tile<64x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>

      // Both tiles have been read by every warp before the next step's copies overwrite them.
      tile.barrier
      scf.yield %acc_new : !tile.tile<128x128xf32, register>
    }

    %c_window = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x128xf32, global>
    tile.store_global %acc_final, %c_window : !tile.tile<128x128xf32, register>, !tile.tile<128x128xf32, global>
    func.return
  }
}
