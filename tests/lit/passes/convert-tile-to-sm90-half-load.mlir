// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// tile.load of a 16-bit register tile (attention's bias block) then tile.cast to f32. Rows of a [M, N] tensor with
// N not known to be even need not start on 4 bytes: one ld.global.u16 per element, columns as immediates, the
// pairs packed lo | hi x 2^16 into the registers cvt_unpack widens. With N promised even (tile.divisible), one
// ld.global.b32 per packed pair.

builtin.module {
  func.func @widen(%X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>}, %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x16xbf16, global>
    %x = tile.load %x_window : !tile.tile<64x16xbf16, global> -> !tile.tile<64x16xbf16, register>
    %wide = tile.cast %x : !tile.tile<64x16xbf16, register> -> !tile.tile<64x16xf32, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    tile.store_global %wide, %y_window : !tile.tile<64x16xf32, register>, !tile.tile<64x16xf32, global>
    func.return
  }
  func.func @widen_even(%X: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>}, %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>, tile.divisible = {N = 2 : i64}} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %x_window = tile.view %X[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x16xbf16, global>
    %x = tile.load %x_window : !tile.tile<64x16xbf16, global> -> !tile.tile<64x16xbf16, register>
    %wide = tile.cast %x : !tile.tile<64x16xbf16, register> -> !tile.tile<64x16xf32, register>
    %y_window = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    tile.store_global %wide, %y_window : !tile.tile<64x16xf32, register>, !tile.tile<64x16xf32, global>
    func.return
  }
}

// CHECK-LABEL: func.func @widen(
// CHECK:       %[[E:.*]] = sm90.ld_global_u16 %{{.*}}[%{{.*}}], %{{.*}} {column_bytes = array<i32: 0, 2, 0, 2, 16, 18, 16, 18>} : vector<8xi32>, vector<8xi1> -> vector<8xi32>
// CHECK-NEXT:  %[[LO:.*]] = vector.shuffle %[[E]], %[[E]] [0, 2, 4, 6]
// CHECK-NEXT:  %[[HI:.*]] = vector.shuffle %[[E]], %[[E]] [1, 3, 5, 7]
// CHECK:       %[[SHIFTED:.*]] = arith.muli %[[HI]], %{{.*}} : vector<4xi32>
// CHECK-NEXT:  %[[X:.*]] = arith.ori %[[LO]], %[[SHIFTED]] : vector<4xi32>
// CHECK-NEXT:  %wide = sm90.cvt_unpack %[[X]] type "bf16" : vector<4xi32> -> vector<8xf32>
// CHECK-LABEL: func.func @widen_even(
// CHECK-NOT:   ld_global_u16
// CHECK:       %x = sm90.ld_global %{{.*}}[%{{.*}}], %{{.*}} {column_bytes = array<i32: 0, 0, 16, 16>} : vector<4xi32>, vector<4xi1> -> vector<4xi32>
// CHECK-NEXT:  %wide = sm90.cvt_unpack %x type "bf16" : vector<4xi32> -> vector<8xf32>
