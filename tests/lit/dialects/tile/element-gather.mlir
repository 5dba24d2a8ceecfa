// Round trip of tile.gather (a score or mask modifier's read of a captured array, e.g. ALiBi's slopes[h] or a
// relative-position table) through the custom and the generic form; the result shape is the indices' broadcast.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @gather(%slopes: !tile.tile<8xf32, global>, %table: !tile.tile<8x63xf32, global>,
                  %h: !tile.tile<1x1xi32, register>, %rel: !tile.tile<64x32xi32, register>,
                  %docs: !tile.tile<100xi32, global>, %q: !tile.tile<64xi32, register>) {
  %s = tile.gather %slopes[%h] : !tile.tile<8xf32, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
  %t = tile.gather %table[%h, %rel] : !tile.tile<8x63xf32, global>, !tile.tile<1x1xi32, register>, !tile.tile<64x32xi32, register> -> !tile.tile<64x32xf32, register>
  %d = tile.gather %docs[%q] {note = "attr-dict"} : !tile.tile<100xi32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xi32, register>
  func.return
}

// CHECK:      %s = tile.gather %slopes[%h] : !tile.tile<8xf32, global>, !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>
// CHECK-NEXT: %t = tile.gather %table[%h, %rel] : !tile.tile<8x63xf32, global>, !tile.tile<1x1xi32, register>, !tile.tile<64x32xi32, register> -> !tile.tile<64x32xf32, register>
// CHECK-NEXT: %d = tile.gather %docs[%q] {note = "attr-dict"} : !tile.tile<100xi32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xi32, register>

// GENERIC: "tile.gather"(%slopes, %h) : (!tile.tile<8xf32, global>, !tile.tile<1x1xi32, register>) -> !tile.tile<1x1xf32, register>
