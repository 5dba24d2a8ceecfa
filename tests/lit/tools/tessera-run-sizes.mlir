// tessera-run refuses sizes it would otherwise misread or silently ignore, naming each, and pipelines that do not
// parse or do not reach Target IR; every message is one diagnostic and a non-zero exit status.

// RUN: not tessera-run %s -d n=64 -d n=65 2>&1 | filecheck %s --check-prefix=TWICE
// TWICE: tessera-run: error: size 'n' given more than once

// RUN: not tessera-run %s -d n=64 -d seq=3 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN: tessera-run: error: no kernel declares the size 'seq' (sizes declared: @k: n)

// RUN: not tessera-run %s -d n=5_0 2>&1 | filecheck %s --check-prefix=UNDERSCORE
// UNDERSCORE: size 'n' must be written in plain decimal digits 0-9, got '5_0'

// RUN: not tessera-run %s -d n=0 2>&1 | filecheck %s --check-prefix=ZERO
// ZERO: size 'n' must be positive (from 1 to 2147483647, as Target IR computes indices in 32 bits), got 0

// RUN: not tessera-run %s -d n=4294967296 2>&1 | filecheck %s --check-prefix=HUGE
// HUGE: size 'n' = 4294967296 is over the limit (from 1 to 2147483647, as Target IR computes indices in 32 bits)

// RUN: not tessera-run %s -d n=64 -p 'cse{' 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE-NOT: Traceback
// PIPELINE:     tessera-run: error: invalid pass pipeline 'cse{' at column 5: Expected argument name here
// PIPELINE-NOT: Traceback

// RUN: not tessera-run %s -d n=64 --level target --lower assign-swizzle 2>&1 | filecheck %s --check-prefix=SHORT
// SHORT: tessera-run: error: the lowering pipeline 'assign-swizzle' left kernel @k in Tile IR: --level target needs a pipeline that ends in Target IR

// RUN: tessera-run %s -d n=64 | filecheck %s --check-prefix=OK
// OK: @k [n=64]: grid (1, 1, 1), tile level
func.func @k(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  func.return
}
