// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s

// A GEMM tiled 64x64x64 whose K and N are promised multiples of 8 (tile.divisible: rows of 16 bytes): one warpgroup (128 threads); A and B arrive by TMA in 64-column (128-byte) boxes
// on the mbarrier of their commit group; each K tile is a chain of four m64n64k16 wgmmas (A K-major, B
// MN-major: trans-b 1, LBO = one box of 64 rows); C is stored with a bounds mask.

builtin.module {
  func.func @gemm_bf16(%A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>}, %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>}, %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "gemm"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>, tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %m_block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %m0 = arith.muli %m_block, %c64 : index
    %n_block = tile.program_id y : index
    %n0 = arith.muli %n_block, %c64 : index
    %k_size = tile.dim %A[1] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %acc_final = scf.for %j = %c0 to %n_k step %c1 iter_args(%acc = %acc_init) -> (!tile.tile<64x64xf32, register>) {
      %k0 = arith.muli %j, %c64 : index
      %a_window = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      %b_window = tile.view %B[%k0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
      tile.cp_async %b_window, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %acc_next = tile.mma %a_smem, %b_smem, %acc : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %acc_next : !tile.tile<64x64xf32, register>
    }
    %c_window = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc_final, %c_window : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}

// CHECK:      func.func @gemm_bf16(%A_map64: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64
// CHECK-SAME: %B_map64: !sm90.tensormap {sm90.source = 1 : i64
// CHECK-SAME: %C_ptr: i64 {sm90.source = 2 : i64
// CHECK-SAME: %M: index {sm90.size = "M"}, %K: index {sm90.size = "K"}, %N: index {sm90.size = "N"})
// CHECK-SAME: sm90.kernel = {threads = 128 : i64, smem_bytes = 17408 : i64}
// CHECK:      %tid = sm90.special "tid.x" : index
// CHECK:      %group0_bar = sm90.shared_buffer "group0_bar" offset 0 size 8 align 8 swizzle 0 : i32
// CHECK:      sm90.mbarrier_init %group0_bar, 1
// CHECK-NEXT: sm90.fence_mbarrier_init
// CHECK:      sm90.bar_sync 0, 128
// CHECK:      %a_smem = sm90.shared_buffer "a_smem" offset 1024 size 8192 align 1024 swizzle 128 : i32
// CHECK:      %b_smem = sm90.shared_buffer "b_smem" offset 9216 size 8192 align 1024 swizzle 128 : i32
// CHECK:      scf.for %j = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%acc = %{{.*}}) -> (vector<32xf32>) {
// CHECK:        sm90.tma_load %A_map64[%k0, %m0], %a_smem, %group0_bar : index, index
// CHECK:        sm90.tma_load %B_map64[%n0, %k0], %b_smem, %group0_bar : index, index
// CHECK:        sm90.mbarrier_arrive_expect_tx %group0_bar, 16384
// CHECK:        scf.while
// CHECK:          sm90.mbarrier_try_wait_parity %group0_bar, %{{.*}} : index
// CHECK:        sm90.bar_sync 0, 128
// CHECK:        %[[DA:.*]] = sm90.make_descriptor %{{.*}} lbo 16 sbo 1024 swizzle 128 : i64
// CHECK:        %[[DB:.*]] = sm90.make_descriptor %b_smem lbo 8192 sbo 1024 swizzle 128 : i64
// CHECK-NEXT:   sm90.wgmma_fence
// CHECK-NEXT:   sm90.wgmma_mma_async %acc, %[[DA]], %[[DB]] n 64 type "bf16" trans 0, 1 : vector<32xf32>, i64
// CHECK-NEXT:   sm90.descriptor_advance %[[DA]], 32 : i64
// CHECK-NEXT:   sm90.descriptor_advance %[[DB]], 2048 : i64
// CHECK-COUNT-3: sm90.wgmma_mma_async
// CHECK-NEXT:   sm90.wgmma_commit_group
// CHECK-NEXT:   sm90.wgmma_wait_group 0
// CHECK-NEXT:   sm90.bar_sync 0, 128
// CHECK:      sm90.setp "gt" %{{.*}}, %{{.*}} : vector<32xindex> -> vector<32xi1>
// CHECK:      %[[BASE:.*]] = arith.addi %C_ptr, %{{.*}} : i64
// CHECK:      sm90.st_global %[[BASE]][%{{.*}}], %acc_final, %{{.*}} : vector<32xi32>, vector<32xf32>, vector<32xi1>
