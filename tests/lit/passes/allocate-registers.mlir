// RUN: tessera-opt %s -p 'assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,allocate-registers{report=true}' 2>&1 | filecheck %s
// RUN: tessera-opt %s --verify-diagnostics -p 'assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,allocate-registers{budget=32}' | filecheck %s --check-prefix=BUDGET

// A 64x64x64-tiled GEMM: the 32 f32 accumulators (a register block of their own, class acc) dominate; the pass records the registers per
// class on the kernel, and a budget below the peak is a diagnostic naming what is live there.

builtin.module {
  func.func @gemm_bf16(%A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>}, %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>}, %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "gemm"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
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

// CHECK: allocate-registers: @gemm_bf16: peak {{[0-9]+}} of 255 registers per thread (acc 32, b32 {{[0-9]+}}, b64 {{[0-9]+}}, pred {{[0-9]+}}), at {{.*}}allocate-registers.mlir:{{[0-9]+}}:{{[0-9]+}} ({{[a-z0-9_.]+}}), live: %{{[a-z_0-9?]+}} ({{[0-9]+}} registers, {{.*}})
// CHECK: sm90.registers = {peak = {{[0-9]+}} : i64, acc = 32 : i64, b32 = {{[0-9]+}} : i64, b64 = {{[0-9]+}} : i64, pred = {{[0-9]+}} : i64}
// BUDGET: @gemm_bf16: {{[0-9]+}} registers per thread are live at once, over the budget of 32; the peak is at {{.*}}, live: %acc{{.*}} (32 registers, {{.*}}allocate-registers.mlir:{{[0-9]+}}:{{[0-9]+}})
