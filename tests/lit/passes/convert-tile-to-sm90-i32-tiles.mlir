// RUN: tessera-opt %s -p convert-tile-to-sm90,canonicalize,cse | filecheck %s

// i32 register tiles hold one value per register, as f32 tiles do: a fill is an i32 splat, a [64, 16] tile
// moves one 32-bit word per register (ld/st.global, never the 16-bit path's st.global.b16 of packed pairs),
// and a 1-D window loads and stores an i32 row vector (two registers: the thread's two rows). An i32 abs is
// one math.absi (abs.s32), not max(x, 0 - x).

func.func @i32_tiles(%L: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>},
                     %X: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>},
                     %Y: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
                     %I: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %lw = tile.view %L[%c0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
  %l = tile.load %lw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
  %xw = tile.view %X[%c0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x16xi32, global>
  %x = tile.load %xw : !tile.tile<64x16xi32, global> -> !tile.tile<64x16xi32, register>
  %three = tile.fill 3.0 : !tile.tile<64x16xi32, register>
  %a = tile.abs %x : !tile.tile<64x16xi32, register>
  %y = tile.add %a, %three : !tile.tile<64x16xi32, register>
  %yw = tile.view %Y[%c0, %c0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x16xi32, global>
  tile.store_global %y, %yw : !tile.tile<64x16xi32, register>, !tile.tile<64x16xi32, global>
  %iw = tile.view %I[%c0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
  tile.store_global %l, %iw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
  func.return
}

// CHECK:      %l = sm90.ld_global {{.*}} -> vector<2xi32>
// CHECK:      %x = sm90.ld_global {{.*}} -> vector<8xi32>
// CHECK:      %three = arith.constant dense<3> : vector<8xi32>
// CHECK-NEXT: %a = math.absi %x : vector<8xi32>
// CHECK-NEXT: %y = arith.addi %a, %three : vector<8xi32>
// CHECK-NOT:  st_global_b16
// CHECK:      sm90.st_global {{.*}}, %y, {{.*}} : vector<8xi32>, vector<8xi32>, vector<8xi1>
// CHECK:      sm90.st_global {{.*}}, %l, {{.*}} : vector<2xi32>, vector<2xi32>, vector<2xi1>
