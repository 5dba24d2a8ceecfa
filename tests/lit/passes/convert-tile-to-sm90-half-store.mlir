// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// tile.store_global (and tile.store_global_rows) of a 16-bit register tile into a [M, N] tensor. With N not
// promised even, a row may start on any even byte, so a packed pair may straddle a 4-byte boundary that
// st.global.b32 refuses: one st.global.b16 per element, the low half of pair i at column 2i and the high half
// (pair / 2^16) at 2i + 1, columns as immediates. With N promised even (tile.divisible), one st.global.b32 per
// packed pair.

builtin.module {
  func.func @narrow(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>}, %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    %x = tile.load %x_window : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
    %n = tile.cast %x : !tile.tile<64x16xf32, register> -> !tile.tile<64x16xbf16, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x16xbf16, global>
    tile.store_global %n, %y_window : !tile.tile<64x16xbf16, register>, !tile.tile<64x16xbf16, global>
    func.return
  }
  func.func @narrow_rows(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>}, %Y: !tile.tile<?x?xf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %c5 = arith.constant 5 : index
    %m0 = arith.muli %block, %c64 : index
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    %x = tile.load %x_window : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
    %n = tile.cast %x : !tile.tile<64x16xf32, register> -> !tile.tile<64x16xf16, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf16, global> -> !tile.tile<64x16xf16, global>
    tile.store_global_rows %n, %y_window, %c5 : !tile.tile<64x16xf16, register>, !tile.tile<64x16xf16, global>
    func.return
  }
  func.func @narrow_even(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>}, %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>, tile.divisible = {N = 2 : i64}} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    %x = tile.load %x_window : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
    %n = tile.cast %x : !tile.tile<64x16xf32, register> -> !tile.tile<64x16xbf16, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x16xbf16, global>
    tile.store_global %n, %y_window : !tile.tile<64x16xbf16, register>, !tile.tile<64x16xbf16, global>
    func.return
  }
}

// CHECK-LABEL: func.func @narrow(
// CHECK-NOT:   sm90.st_global %
// CHECK:       %[[N:.*]] = sm90.cvt_pack %{{.*}} type "bf16" : vector<8xf32> -> vector<4xi32>
// CHECK:       %[[HI:.*]] = arith.divui %[[N]], %{{.*}} : vector<4xi32>
// CHECK-NEXT:  %[[E:.*]] = vector.shuffle %[[N]], %[[HI]] [0, 4, 1, 5, 2, 6, 3, 7] : vector<4xi32>, vector<4xi32>
// CHECK-NEXT:  sm90.st_global_b16 %{{.*}}[%{{.*}}], %[[E]], %{{.*}} {column_bytes = array<i32: 0, 2, 0, 2, 16, 18, 16, 18>} : vector<8xi32>, vector<8xi32>, vector<8xi1>
// CHECK-LABEL: func.func @narrow_rows(
// CHECK:       arith.minsi
// CHECK:       sm90.st_global_b16 %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} {column_bytes = array<i32: 0, 2, 0, 2, 16, 18, 16, 18>} : vector<8xi32>, vector<8xi32>, vector<8xi1>
// CHECK-LABEL: func.func @narrow_even(
// CHECK-NOT:   st_global_b16
// CHECK:       sm90.st_global %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} {column_bytes = array<i32: 0, 0, 16, 16>} : vector<4xi32>, vector<4xi32>, vector<4xi1>
