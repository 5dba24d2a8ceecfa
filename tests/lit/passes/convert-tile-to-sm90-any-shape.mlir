// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s

// A TN GEMM (A stored [K, M]) tiled 64x64x64 that promises nothing about its sizes (gemm(aligned=False)):
// rows of A and B may start anywhere, so no tensor map; every thread copies 32 elements of each tile with
// ld.global.u16 and st.shared.b16 at swizzled addresses, then fence.proxy.async; the pointers say so
// (sm90.copy). A^T is MN-major in shared memory: imm-trans-a 1, like B.

builtin.module {
  func.func @gemm_bf16_tn_any(%A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, M>}, %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>}, %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "gemm", transpose_a = true}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %m_block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %m0 = arith.muli %m_block, %c64 : index
    %n_block = tile.program_id y : index
    %n0 = arith.muli %n_block, %c64 : index
    %k_size = tile.dim %A[0] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %acc_final = scf.for %j = %c0 to %n_k step %c1 iter_args(%acc = %acc_init) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %a_window = tile.view %A[%k0, %m0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %b_window = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %b_window, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %acc_next = tile.mma %a_smem, %b_smem, %acc transpose_a : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %acc_next : !tile.tile<64x64xf32, register>
    }
    %c_window = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc_final, %c_window : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}


// CHECK:      func.func @gemm_bf16_tn_any(%A_ptr: i64 {{{.*}}sm90.copy = "ld.global"}, %B_ptr: i64 {{{.*}}sm90.copy = "ld.global"}, %C_ptr: i64
// CHECK-NOT:  sm90.tma_load
// CHECK:      sm90.ld_global_u16 {{.*}} : vector<32xi32>, vector<32xi1> -> vector<32xi32>
// CHECK:      sm90.st_shared_b16 {{.*}} : vector<32xi32>, vector<32xi32>
// CHECK-NEXT: sm90.fence_proxy_async
// CHECK:      sm90.ld_global_u16
// CHECK:      sm90.st_shared_b16
// CHECK-NEXT: sm90.fence_proxy_async
// CHECK:      sm90.bar_sync 0, 128
// CHECK:      sm90.wgmma_mma_async {{.*}} n 64 type "bf16" trans 1, 1
// CHECK-NOT:  sm90.tma_load
