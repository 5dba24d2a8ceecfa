// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p 'assign-swizzle,convert-tile-to-sm90{atomic-add=bulk},canonicalize,cse' | filecheck %s --check-prefix=BULK

// Accesses through views promised `in_bounds` (the attention backward's padded LSE2, dPsum and dq_accum) take
// an all-true mask, a constant: no compare of a row or column against the tensor's sizes, and (in the PTX) no
// predicate. The 1-D row load, the broadcast row, the reducing store of a register tile and the transposed one;
// with atomic-add=bulk, thread r < 64 adds row r without asking whether the row is inside the tensor.

builtin.module {
  func.func @in_bounds(%L: !tile.tile<?xf32, global> {tile.dims = #tile.dims<64 * ceildiv(seq_q, 64)>},
                       %Q: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<seq_q, 64>},
                       %A: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<64 * ceildiv(seq_q, 64), 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "attention_backward", causal = false, scale = 1.250000e-01 : f32},
                  tile.grid = #tile.dims<ceildiv(seq_q, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %m = tile.program_id x : index
    %q0 = arith.muli %m, %c64 : index
    %lw = tile.view %L[%q0] in_bounds : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %l = tile.load %lw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %lb = tile.load_broadcast %lw : !tile.tile<64xf32, global> -> !tile.tile<64x64xf32, register>
    %x = tile.sub_rows %lb, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %aw = tile.view %A[%q0, %c0] in_bounds : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.atomic_add %x, %aw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}

// CHECK-LABEL: func.func @in_bounds(
// CHECK-NOT:     sm90.setp
// CHECK-NOT:     arith.cmpi
// CHECK:         %[[T2:.*]] = arith.constant dense<true> : vector<2xi1>
// CHECK:         sm90.ld_global %{{.*}}[%{{.*}}], %[[T2]] : vector<2xi32>, vector<2xi1> -> vector<2xf32>
// CHECK:         %[[T16:.*]] = arith.constant dense<true> : vector<16xi1>
// CHECK:         sm90.ld_global %{{.*}}[%{{.*}}], %[[T16]] {column_bytes = array<i32: 0, 4, 32, 36
// CHECK:         %[[T32:.*]] = arith.constant dense<true> : vector<32xi1>
// CHECK:         sm90.red_global_add %{{.*}}[%{{.*}}], %{{.*}}, %[[T32]] {column_bytes
// CHECK-NOT:     sm90.setp
// CHECK-NOT:     arith.cmpi

// BULK-LABEL: func.func @in_bounds(
// BULK:         sm90.bar_sync 0, 128
// BULK:         %[[MINE:.*]] = arith.cmpi ult, %tid, %c64 : index
// BULK-NOT:     arith.cmpi
// BULK-NOT:     arith.andi
// BULK:         scf.if %[[MINE]] {
// BULK-NEXT:      sm90.bulk_reduce_add %{{.*}}, %{{.*}}, 256 : i64
