// Round trip of `subtract_first` on tile.exp_subtract and tile.exp_diff (the operands may be huge: a lowering
// forms the difference before it scales it) through the custom and the generic form; absent, it prints nothing.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @subtract_first(%s: !tile.tile<64x128xf32, register>, %m_old: !tile.tile<64xf32, register>, %m: !tile.tile<64xf32, register>) {
  %alpha = tile.exp_diff %m_old, %m subtract_first : !tile.tile<64xf32, register>
  %p = tile.exp_subtract %s, %m subtract_first : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
  %alpha2 = tile.exp_diff %m_old, %m subtract_first {note = "attr-dict"} : !tile.tile<64xf32, register>
  %p2 = tile.exp_subtract %s, %m : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
  %alpha3 = tile.exp_diff %m_old, %m : !tile.tile<64xf32, register>
  func.return
}

// CHECK:      %alpha = tile.exp_diff %m_old, %m subtract_first : !tile.tile<64xf32, register>
// CHECK-NEXT: %p = tile.exp_subtract %s, %m subtract_first : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %alpha2 = tile.exp_diff %m_old, %m subtract_first {note = "attr-dict"} : !tile.tile<64xf32, register>
// CHECK-NEXT: %p2 = tile.exp_subtract %s, %m : !tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %alpha3 = tile.exp_diff %m_old, %m : !tile.tile<64xf32, register>

// GENERIC:      "tile.exp_diff"(%m_old, %m) <{subtract_first}> : (!tile.tile<64xf32, register>, !tile.tile<64xf32, register>) -> !tile.tile<64xf32, register>
// GENERIC-NEXT: "tile.exp_subtract"(%s, %m) <{subtract_first}> : (!tile.tile<64x128xf32, register>, !tile.tile<64xf32, register>) -> !tile.tile<64x128xf32, register>
// GENERIC-NEXT: "tile.exp_diff"(%m_old, %m) <{subtract_first}> {note = "attr-dict"}
// GENERIC-NEXT: "tile.exp_subtract"(%s, %m) : (
// GENERIC-NEXT: "tile.exp_diff"(%m_old, %m) : (
