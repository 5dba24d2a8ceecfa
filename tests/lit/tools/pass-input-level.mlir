// A Tessera pass given only IR of the other level would do nothing: that is an error naming the pass, the level it
// transforms and the kernel. A pass with nothing to do at all (no kernel, no function of its level) is a warning.

// RUN: not tessera-opt %s -p allocate-registers 2>&1 | filecheck %s --check-prefix=ALLOC
// ALLOC:      pass-input-level.mlir:[[# @LINE + 13]]:1: kernel @k: pass 'allocate-registers' transforms Target IR, but the input (@k) is Tile IR; lower it first: convert-tile-to-sm90
// ALLOC-NEXT: {{^}}func.func @k(

// RUN: not tessera-opt %s -p warp-specialize 2>&1 | filecheck %s --check-prefix=WS
// WS: kernel @k: pass 'warp-specialize' transforms Target IR, but the input (@k) is Tile IR

// A Target IR kernel without copy loops has nothing for warp-specialize to do, and lost nothing: no warning
// (an unpipelined loop of TMA copies warns: tests/test_warp_specialize.py).
// RUN: tessera-opt %s -p 'assign-swizzle,convert-tile-to-sm90,warp-specialize' 2>&1 >/dev/null | filecheck %s --allow-empty --check-prefix=NOREFILL
// NOREFILL-NOT: warning

// RUN: echo 'func.func @f() { func.return }' | tessera-opt -p allocate-registers 2>&1 | filecheck %s --check-prefix=NOTHING
// NOTHING: tessera-opt: warning: pass 'allocate-registers': the input has no Target IR (no kernel, no function with sm90 ops); nothing to do
func.func @k(%x: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  func.return
}
