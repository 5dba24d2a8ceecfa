// convert-tile-to-sm90 lowers an 8-bit register tile as the A operand of an 8-bit wgmma (FP8 attention's P) or
// stored to global memory (a quantize epilogue: byte pairs, one st.global.b16 each). Anything else is refused by
// name, located, with exit status 1 and no traceback (the Tile IR interpreter runs it): here an 8-bit tile stored
// to shared memory (a store in rows that may start on an odd byte is refused too: tests/test_fp8_quantize.py).
// RUN: not tessera-opt %s -p convert-tile-to-sm90 2>&1 | filecheck %s

func.func @to_shared(%X: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<M, 32>},
                     %Y: !tile.tile<?x32xf8E4M3FN, global> {tile.dims = #tile.dims<M, 32>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %b = tile.program_id x : index
  %m0 = arith.muli %b, %c64 : index
  %xw = tile.view %X[%m0, %c0] : !tile.tile<?x32xf32, global> -> !tile.tile<64x32xf32, global>
  %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
  %y = tile.cast %x : !tile.tile<64x32xf32, register> -> !tile.tile<64x32xf8E4M3FN, register>
  %s = tile.alloc_shared : !tile.tile<64x32xf8E4M3FN, shared, swizzle 32>
  tile.store_shared %y, %s : !tile.tile<64x32xf8E4M3FN, register>, !tile.tile<64x32xf8E4M3FN, shared, swizzle 32>
  func.return
}

// CHECK: convert-tile-to-sm90-fp8-refused.mlir:16:3: kernel @to_shared: convert-tile-to-sm90: %y = tile.cast {{.*}}: an 8-bit register tile is lowered as the A operand of an 8-bit tile.mma {{.*}}, or stored by tile.store_global only

// CHECK-NOT: Traceback
