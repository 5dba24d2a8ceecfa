// Round trip of tile.causal_bias_table (the table of -2^100 / +0 windows and A's identity, written once) and
// tile.causal_bias (a score tile plus the causal diagonal's -2^100, read from the table) through the custom and
// the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @causal_bias(%s: !tile.tile<128x176xf32, register>, %q0: index, %k0: index, %sq: index, %sk: index) -> !tile.tile<128x176xf32, register> {
  %table = tile.alloc_shared : !tile.tile<720x8xbf16, shared>
  tile.causal_bias_table %table : !tile.tile<720x8xbf16, shared>
  %r = tile.causal_bias %s, %table, %q0, %k0, %sq, %sk : !tile.tile<128x176xf32, register>, !tile.tile<720x8xbf16, shared>
  func.return %r : !tile.tile<128x176xf32, register>
}

// CHECK:      tile.causal_bias_table %table : !tile.tile<720x8xbf16, shared>
// CHECK-NEXT: %r = tile.causal_bias %s, %table, %q0, %k0, %sq, %sk : !tile.tile<128x176xf32, register>, !tile.tile<720x8xbf16, shared>

// GENERIC:      "tile.causal_bias_table"(%table) : (!tile.tile<720x8xbf16, shared>) -> ()
// GENERIC-NEXT: %r = "tile.causal_bias"(%s, %table, %q0, %k0, %sq, %sk) : (!tile.tile<128x176xf32, register>, !tile.tile<720x8xbf16, shared>, index, index, index, index) -> !tile.tile<128x176xf32, register>
