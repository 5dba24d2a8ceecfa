// Round trip of tile.log (the natural logarithm of attention's log-sum-exp) through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @log(%l: !tile.tile<128xf32, register>, %x: !tile.tile<64x32xf32, register>) {
  %lse = tile.log %l : !tile.tile<128xf32, register>
  %y = tile.log %x {note = "attr-dict"} : !tile.tile<64x32xf32, register>
  func.return
}

// CHECK:      %lse = tile.log %l : !tile.tile<128xf32, register>
// CHECK-NEXT: %y = tile.log %x {note = "attr-dict"} : !tile.tile<64x32xf32, register>

// GENERIC: "tile.log"(%l) : (!tile.tile<128xf32, register>) -> !tile.tile<128xf32, register>
