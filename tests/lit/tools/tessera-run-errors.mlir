// tessera-run reads a file as tessera-opt does: the same verifier error, at the same file:line:col, with the op's
// source line under it, and a non-zero exit status (`not`), never a Python traceback.

// RUN: not tessera-opt %s 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not tessera-run %s -d n=64 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY-NOT:  Traceback
// VERIFY:      tessera-run-errors.mlir:[[# @LINE + 10]]:3: kernel @k: 'tile.dim' op source must be a global tile, got register
// VERIFY-NEXT: {{^}}  %d = tile.dim %z[0] : !tile.tile<64x64xf32, register>
// VERIFY-NEXT: {{^}}  ^
// VERIFY-NOT:  Traceback

// Sizes are plain ASCII decimal, each a size the kernel declares, given once, from 1 to 2^31 - 1.
// RUN: not tessera-run %s -d n=+64 2>&1 | filecheck %s --check-prefix=SIGN
// SIGN: tessera-run: error: argument -d/--dim: size 'n' must be written in plain decimal digits 0-9, got '+64'
func.func @k(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %d = tile.dim %z[0] : !tile.tile<64x64xf32, register>
  func.return
}
