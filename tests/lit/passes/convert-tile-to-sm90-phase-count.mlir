// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s

// A copy group in a loop nest whose inner trip count is read inside the nest (a block-sparse backward: per
// head of its group, the count of query blocks to visit): its barrier completes one phase per execution, so
// the loops carry how many executions came before (an index iter_arg, "phase_count") and the wait takes
// its parity; the commit adds one.

builtin.module {
  func.func @nested_counts(%A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>}, %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>}, %counts: !tile.tile<?xi32, global> {tile.dims = #tile.dims<G>}, %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc_final = scf.for %g = %c0 to %c2 step %c1 iter_args(%acc_g = %acc_init) -> (!tile.tile<64x64xf32, register>) {
      %n = tile.load_index %counts[%g] : !tile.tile<?xi32, global>
      %acc_out = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %acc_g) -> (!tile.tile<64x64xf32, register>) {
        %k0 = arith.muli %j, %c64 : index
        %a_window = tile.view %A[%c0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
        tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
        %b_window = tile.view %B[%k0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
        tile.cp_async %b_window, %b_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
        tile.cp_commit_group
        tile.cp_wait_group 0
        tile.barrier
        %acc_next = tile.mma %a_smem, %b_smem, %acc : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
        tile.barrier
        scf.yield %acc_next : !tile.tile<64x64xf32, register>
      }
      scf.yield %acc_out : !tile.tile<64x64xf32, register>
    }
    %c_window = tile.view %C[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %acc_final, %c_window : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}

// CHECK:      func.func @nested_counts(
// CHECK:      %acc_final, %{{.*}} = scf.for %g = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%acc_g = %{{.*}}, %phase_count = %c0) -> (vector<32xf32>, index) {
// CHECK:        %acc_out, %[[INNER:.*]] = scf.for %j = %{{.*}} to %n step %{{.*}} iter_args(%acc = %acc_g, %phase_count_1 = %phase_count) -> (vector<32xf32>, index) {
// CHECK:          %[[NEXT:.*]] = arith.addi %phase_count_1, %c1 : index
// CHECK:          %[[PARITY:.*]] = arith.andi %phase_count_1, %c1 : index
// CHECK:          sm90.mbarrier_try_wait_parity %group0_bar, %[[PARITY]] : index
// CHECK:          scf.yield %acc_next, %[[NEXT]] : vector<32xf32>, index
// CHECK:        scf.yield %acc_out, %[[INNER]] : vector<32xf32>, index
