// tessera-run runs a Target IR file (what tessera-opt writes after convert-tile-to-sm90, with or without
// allocate-registers) in the CTA simulator, and --check compares it with NumPy as for Tile IR.

// RUN: tessera-opt %S/../../../examples/gemm.mlir -p 'assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants,allocate-registers' -o %t.mlir
// RUN: tessera-run %t.mlir -d M=70 -d N=136 -d K=128 --check | filecheck %s
// CHECK:      @gemm_bf16 [M=70 K=128 N=136]: grid (1, 2, 1), Target IR, CTA simulator
// CHECK-NEXT:   check: max error {{.*}}: ok

// A Target IR kernel does not run in the Tile IR interpreter; a file without kernels says what can run.
// RUN: not tessera-run %t.mlir -d M=70 -d N=136 -d K=128 --level tile 2>&1 | filecheck %s --check-prefix=TILE
// TILE: tessera-run: error: {{.*}}: kernel @gemm_bf16 is Target IR: it runs in the CTA simulator (--level target, or no --level)
// RUN: not tessera-run %s 2>&1 | filecheck %s --check-prefix=NONE
// NONE: tessera-run: error: {{.*}}tessera-run-target.mlir: no kernel to run: tessera-run runs Tile IR kernels (a func.func with a 'tile.kernel' attribute), Target IR kernels (with 'sm90.kernel', as convert-tile-to-sm90 writes them) and PTX files (.ptx); this file has functions @helper without those attributes
func.func @helper() {
  func.return
}
