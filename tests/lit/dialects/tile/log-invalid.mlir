// tile.log's verifier: a register tile of f32 (the logarithm is computed in f32), result and operand of one type.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.log' op the logarithm is computed in f32, got bf16
func.func @half(%x: !tile.tile<64x32xbf16, register>) {
  %y = tile.log %x : !tile.tile<64x32xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.log' op result must be a register tile, got shared
func.func @shared(%x: !tile.tile<64x64xf32, shared>) {
  %y = tile.log %x : !tile.tile<64x64xf32, shared>
  func.return
}

// -----

// CHECK: expected from variable 'T', but got !tile.tile<128xf32, register>
func.func @mixed(%x: !tile.tile<64xf32, register>) {
  %y = "tile.log"(%x) : (!tile.tile<64xf32, register>) -> !tile.tile<128xf32, register>
  func.return
}
