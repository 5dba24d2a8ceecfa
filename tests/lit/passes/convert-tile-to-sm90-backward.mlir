// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p 'assign-swizzle,convert-tile-to-sm90{atomic-add=bulk},canonicalize,cse' | filecheck %s --check-prefix=BULK

// The backward's ops (passes/convert_tile_to_sm90/backward.py) on one 64-row block: a 1-D row window loaded
// as each thread's two rows (masked by seq_q), sub_rows and exp2_subtract per register (ex2 of x - m, m =
// -inf read as 0), P packed to bf16 and stored to the 128B-swizzled shared tile (one st.shared.b32 per pair,
// each pair packed right before its store, then fence.proxy.async), and the f32 tile added into dq_accum: red.global.add.f32 per register with a
// per-row mask, or (bulk) staged in shared memory and added by one cp.reduce.async.bulk per row.

builtin.module {
  func.func @bwd_pieces(%L: !tile.tile<?xf32, global> {tile.dims = #tile.dims<seq_q>},
                        %A: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<seq_q, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "attention_backward", causal = false, scale = 1.250000e-01 : f32},
                  tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %p_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared>
    %lw = tile.view %L[%c0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %l = tile.load %lw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %x = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %y = tile.sub_rows %x, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %p = tile.exp2_subtract %y, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %ph = tile.cast %p : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    tile.store_shared %ph, %p_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared>
    tile.barrier
    %aw = tile.view %A[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.atomic_add %p, %aw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}

// CHECK-LABEL: func.func @bwd_pieces(
// CHECK-SAME:      sm90.kernel = {threads = 128 : i64
// CHECK:         %[[L:.*]] = sm90.ld_global %{{.*}}[%{{.*}}], %{{.*}} : vector<2xi32>, vector<2xi1> -> vector<2xf32>
// CHECK:         arith.subf %{{.*}} : vector<32xf32>
// CHECK:         sm90.ex2_approx %{{.*}} : vector<32xf32>
// CHECK:         arith.xori
// CHECK:         sm90.cvt_pack %{{.*}} type "bf16" : vector<2xf32> -> vector<1xi32>
// CHECK-COUNT-16: sm90.st_shared %{{.*}}, %{{.*}} : i32, i32
// CHECK-NEXT:    sm90.fence_proxy_async
// CHECK-NEXT:    sm90.bar_sync 0, 128
// CHECK:         sm90.red_global_add %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} {column_bytes = array<i32: 0, 4, 0, 4, 32, 36
// CHECK-NOT:     sm90.bulk_reduce_add

// BULK-LABEL: func.func @bwd_pieces(
// BULK:         sm90.shared_buffer "atomic_add_staging" offset {{[0-9]+}} size 16384
// BULK-COUNT-32: sm90.st_shared %{{.*}}, %{{.*}} : i32, f32
// BULK-NEXT:    sm90.fence_proxy_async
// BULK-NEXT:    sm90.bar_sync 0, 128
// BULK:         scf.if
// BULK-NEXT:      sm90.bulk_reduce_add %{{.*}}, %{{.*}}, 256 : i64
// BULK-NEXT:      sm90.bulk_commit_group
// BULK-NEXT:      sm90.bulk_wait_group 0 read
// BULK-NOT:     sm90.red_global_add
