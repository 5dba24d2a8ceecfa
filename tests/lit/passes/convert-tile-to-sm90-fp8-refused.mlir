// convert-tile-to-sm90 lowers 8-bit float tiles only in the FP8 attention form (an e4m3 P in registers as the A
// operand of the P.V wgmma, V^T in P8 key order): an 8-bit cast stored to memory is refused by name, located,
// with exit status 1 and no traceback (the Tile IR interpreter runs it).
// RUN: not tessera-opt %s -p convert-tile-to-sm90 2>&1 | filecheck %s

func.func @cast(%X: !tile.tile<?x32xf32, global> {tile.dims = #tile.dims<M, 32>},
                %Y: !tile.tile<?x32xf8E4M3FN, global> {tile.dims = #tile.dims<M, 32>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %b = tile.program_id x : index
  %m0 = arith.muli %b, %c64 : index
  %xw = tile.view %X[%m0, %c0] : !tile.tile<?x32xf32, global> -> !tile.tile<64x32xf32, global>
  %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
  %y = tile.cast %x : !tile.tile<64x32xf32, register> -> !tile.tile<64x32xf8E4M3FN, register>
  %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x32xf8E4M3FN, global> -> !tile.tile<64x32xf8E4M3FN, global>
  tile.store_global %y, %yw : !tile.tile<64x32xf8E4M3FN, register>, !tile.tile<64x32xf8E4M3FN, global>
  func.return
}

// CHECK: convert-tile-to-sm90-fp8-refused.mlir:15:3: kernel @cast: convert-tile-to-sm90: %y = tile.cast {{.*}}: an 8-bit register tile is lowered as the A operand of an 8-bit tile.mma only
// CHECK-NOT: Traceback
