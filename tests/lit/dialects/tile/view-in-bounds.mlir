// Round trip of `tile.view ... in_bounds` (the window is promised inside the tensor) through the custom and the
// generic form; a view without it keeps no property.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @views(%A: !tile.tile<?x64xf32, global>, %i: index) {
  %c0 = arith.constant 0 : index
  %w = tile.view %A[%i, %c0] in_bounds : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %v = tile.view %A[%i, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %w = tile.view %A[%i, %c0] in_bounds : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
// CHECK-NEXT: %v = tile.view %A[%i, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>

// GENERIC:      %w = "tile.view"(%A, %i, %c0) <{in_bounds}> : (!tile.tile<?x64xf32, global>, index, index) -> !tile.tile<64x64xf32, global>
// GENERIC-NEXT: %v = "tile.view"(%A, %i, %c0) : (!tile.tile<?x64xf32, global>, index, index) -> !tile.tile<64x64xf32, global>
