// Round trip of tile.key_bias (+0 in a bias tile's rows of keys before seq_k, -inf past it) through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @key_bias(%k0: index, %seq_k: index) {
  %bias = tile.alloc_shared : !tile.tile<176x16xbf16, shared, swizzle 32>
  tile.key_bias %bias, %k0, %seq_k : !tile.tile<176x16xbf16, shared, swizzle 32>
  tile.key_bias %bias, %k0, %seq_k {note = "attr-dict"} : !tile.tile<176x16xbf16, shared, swizzle 32>
  func.return
}

// CHECK:      tile.key_bias %bias, %k0, %seq_k : !tile.tile<176x16xbf16, shared, swizzle 32>
// CHECK-NEXT: tile.key_bias %bias, %k0, %seq_k {note = "attr-dict"} : !tile.tile<176x16xbf16, shared, swizzle 32>

// GENERIC:      "tile.key_bias"(%bias, %k0, %seq_k) : (!tile.tile<176x16xbf16, shared, swizzle 32>, index, index) -> ()
