// An 8-bit register fill is lowered as the A operand of an 8-bit tile.mma (four equal bytes a register: the
// never-read first P of overlap-softmax{fold=true}); stored, it was written as if it held a cast's byte pairs,
// and the pass emitted an sm90.st_global_b16 its own verifier refused ("column_bytes must be 8 i32 values").
// It is refused by name at the fill, located, with exit status 1 (the Tile IR interpreter runs it).
// RUN: not tessera-opt %s -p convert-tile-to-sm90 2>&1 | filecheck %s

func.func @fill_stored(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
                       %Y: !tile.tile<?x64xf8E4M3FN, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %b = tile.program_id x : index
  %m0 = arith.muli %b, %c64 : index
  %f = tile.fill 3.0 : !tile.tile<64x64xf8E4M3FN, register>
  %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf8E4M3FN, global> -> !tile.tile<64x64xf8E4M3FN, global>
  tile.store_global %f, %yw : !tile.tile<64x64xf8E4M3FN, register>, !tile.tile<64x64xf8E4M3FN, global>
  func.return
}

// CHECK: convert-tile-to-sm90-fp8-fill-refused.mlir:14:3: kernel @fill_stored: convert-tile-to-sm90: %f = tile.fill 3.0 {{.*}}: an 8-bit register fill is lowered as the A operand of an 8-bit tile.mma {{.*}}: fill f32 and tile.cast it to store it
// CHECK-NOT: Traceback
