// tile.saturating_scale's verifier: an f32 register tile, a positive finite factor and bound, result and operand
// of one type.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'tile.saturating_scale' op saturates f32 values, got bf16
func.func @half(%x: !tile.tile<64x32xbf16, register>) {
  %y = tile.saturating_scale %x by 8.0 bound 1.0e+38 : !tile.tile<64x32xbf16, register>
  func.return
}

// -----

// CHECK: 'tile.saturating_scale' op result must be a register tile, got shared
func.func @shared(%x: !tile.tile<64x64xf32, shared>) {
  %y = tile.saturating_scale %x by 8.0 bound 1.0e+38 : !tile.tile<64x64xf32, shared>
  func.return
}

// -----

// CHECK: 'tile.saturating_scale' op factor must be a positive finite f32, got -8.0
func.func @negative_factor(%x: !tile.tile<64x64xf32, register>) {
  %y = tile.saturating_scale %x by -8.0 bound 1.0e+38 : !tile.tile<64x64xf32, register>
  func.return
}

// -----

// CHECK: 'tile.saturating_scale' op bound must be a positive finite f32, got inf
func.func @infinite_bound(%x: !tile.tile<64x64xf32, register>) {
  %y = "tile.saturating_scale"(%x) <{factor = 8.0 : f32, bound = 0x7F800000 : f32}> : (!tile.tile<64x64xf32, register>) -> !tile.tile<64x64xf32, register>
  func.return
}

// -----

// CHECK: expected from variable 'T', but got !tile.tile<128xf32, register>
func.func @mixed(%x: !tile.tile<64xf32, register>) {
  %y = "tile.saturating_scale"(%x) <{factor = 8.0 : f32, bound = 1.0e+38 : f32}> : (!tile.tile<64xf32, register>) -> !tile.tile<128xf32, register>
  func.return
}
