// Round trip of every tile op, the !tile.tile type and #tile.dims, through the custom and the generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @all_ops(%q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq, 64>}, %o: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(seq, 64), heads, batch>} {
  %bx = tile.program_id x : index
  %by = tile.program_id y : index
  %bz = tile.program_id z {note = "attr-dict"} : index
  %seq = tile.dim %q[2] : !tile.tile<?x?x?x64xbf16, global>
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %q0 = arith.muli %bx, %c64 : index
  %ring = tile.alloc_shared : !tile.tile<2x64x64xbf16, shared, swizzle 128>
  %buf = tile.stage %ring[%c0] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
  %win = tile.view %q[%bz, %by, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  tile.cp_async %win, %buf : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group 1
  tile.barrier
  %a = tile.load %buf : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
  %b = tile.load %win : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
  %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %s0 = tile.mma %buf, %b, %zero : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>
  %s = tile.mma %a, %b, %s0 transpose_b : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>
  %ss = tile.scale %s by 0.125 : !tile.tile<64x64xf32, register>
  %mc = tile.mask_causal %ss, %q0, %c0, %seq, %seq : !tile.tile<64x64xf32, register>
  %mb = tile.mask_bounds %mc, %c0, %seq : !tile.tile<64x64xf32, register>
  %m_blk = tile.row_max %mb : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
  %m_old = tile.fill -inf : !tile.tile<64xf32, register>
  %m_new = tile.element_max %m_old, %m_blk : !tile.tile<64xf32, register>
  %alpha = tile.exp_diff %m_old, %m_new : !tile.tile<64xf32, register>
  %p = tile.exp_subtract %mb, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %l_blk = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
  %l = tile.fma %alpha, %m_old, %l_blk : !tile.tile<64xf32, register>
  %acc = tile.mul_rows %s, %alpha : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %acc2 = tile.add %acc, %p : !tile.tile<64x64xf32, register>
  %acc3 = tile.mul %acc2, %acc2 : !tile.tile<64x64xf32, register>
  %out = tile.div_rows %acc3, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %out_h = tile.cast %out : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
  %flat = tile.reshape %out_h : !tile.tile<64x64xbf16, register> -> !tile.tile<4096xbf16, register>
  %tile = tile.reshape %flat : !tile.tile<4096xbf16, register> -> !tile.tile<64x64xbf16, register>
  %o_win = tile.view %o[%bz, %by, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  tile.store_global %tile, %o_win : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
  func.return
}

// A plain function (no tile.kernel): the other element types, swizzle widths, fill values, loop-carried tiles.
func.func @types(%g: !tile.tile<?x128xf16, global>, %s32: !tile.tile<4x16xf16, shared, swizzle 32>, %s64: !tile.tile<3x8x32xf16, shared, swizzle 64>, %sf: !tile.tile<16x32xf32, shared, swizzle 128>, %r: !tile.tile<8x8xf32, register>) -> !tile.tile<8x8xi32, register> {
  %i = tile.cast %r : !tile.tile<8x8xf32, register> -> !tile.tile<8x8xi32, register>
  %x = tile.fill -1.0e-03 : !tile.tile<8xf32, register>
  %y = tile.fill -3.0 : !tile.tile<2x2xindex, register>
  %z = tile.fill inf : !tile.tile<4xf16, register>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %sum = scf.for %iv = %c0 to %c4 step %c1 iter_args(%acc = %r) -> (!tile.tile<8x8xf32, register>) {
    %next = tile.add %acc, %r : !tile.tile<8x8xf32, register>
    scf.yield %next : !tile.tile<8x8xf32, register>
  }
  func.return %i : !tile.tile<8x8xi32, register>
}

// A kernel whose grid and dimensions mix names, constants and ceildiv.
func.func @grid_exprs(%x: !tile.tile<?x128xf32, global> {tile.dims = #tile.dims<n, 128>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(n, 128)>, tile.role = "out"}, %t: !tile.tile<?x4xf32, global> {tile.dims = #tile.dims<n, 4>, tile.role = "scratch"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 128), 4, 1>} {
  func.return
}

// The custom form prints back as written (names, attributes, types) and re-parses to the same module.
// CHECK:      builtin.module {
// CHECK-NEXT: func.func @all_ops(%q: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq, 64>}, %o: !tile.tile<?x?x?x64xbf16, global> {tile.dims = #tile.dims<batch, heads, seq, 64>, tile.role = "out"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(seq, 64), heads, batch>} {
// CHECK-NEXT:   %bx = tile.program_id x : index
// CHECK-NEXT:   %by = tile.program_id y : index
// CHECK-NEXT:   %bz = tile.program_id z {note = "attr-dict"} : index
// CHECK-NEXT:   %seq = tile.dim %q[2] : !tile.tile<?x?x?x64xbf16, global>
// CHECK-NEXT:   %c0 = arith.constant 0 : index
// CHECK-NEXT:   %c64 = arith.constant 64 : index
// CHECK-NEXT:   %q0 = arith.muli %bx, %c64 : index
// CHECK-NEXT:   %ring = tile.alloc_shared : !tile.tile<2x64x64xbf16, shared, swizzle 128>
// CHECK-NEXT:   %buf = tile.stage %ring[%c0] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT:   %win = tile.view %q[%bz, %by, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
// CHECK-NEXT:   tile.cp_async %win, %buf : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK-NEXT:   tile.cp_commit_group
// CHECK-NEXT:   tile.cp_wait_group 1
// CHECK-NEXT:   tile.barrier
// CHECK-NEXT:   %a = tile.load %buf : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
// CHECK-NEXT:   %b = tile.load %win : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
// CHECK-NEXT:   %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %s0 = tile.mma %buf, %b, %zero : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %s = tile.mma %a, %b, %s0 transpose_b : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %ss = tile.scale %s by 1.250000e-01 : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %mc = tile.mask_causal %ss, %q0, %c0, %seq, %seq : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %mb = tile.mask_bounds %mc, %c0, %seq : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %m_blk = tile.row_max %mb : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
// CHECK-NEXT:   %m_old = tile.fill -inf : !tile.tile<64xf32, register>
// CHECK-NEXT:   %m_new = tile.element_max %m_old, %m_blk : !tile.tile<64xf32, register>
// CHECK-NEXT:   %alpha = tile.exp_diff %m_old, %m_new : !tile.tile<64xf32, register>
// CHECK-NEXT:   %p = tile.exp_subtract %mb, %m_new : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT:   %l_blk = tile.row_sum %p : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
// CHECK-NEXT:   %l = tile.fma %alpha, %m_old, %l_blk : !tile.tile<64xf32, register>
// CHECK-NEXT:   %acc = tile.mul_rows %s, %alpha : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT:   %acc2 = tile.add %acc, %p : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %acc3 = tile.mul %acc2, %acc2 : !tile.tile<64x64xf32, register>
// CHECK-NEXT:   %out = tile.div_rows %acc3, %l : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT:   %out_h = tile.cast %out : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
// CHECK-NEXT:   %flat = tile.reshape %out_h : !tile.tile<64x64xbf16, register> -> !tile.tile<4096xbf16, register>
// CHECK-NEXT:   %tile = tile.reshape %flat : !tile.tile<4096xbf16, register> -> !tile.tile<64x64xbf16, register>
// CHECK-NEXT:   %o_win = tile.view %o[%bz, %by, %q0, %c0] : !tile.tile<?x?x?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
// CHECK-NEXT:   tile.store_global %tile, %o_win : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, global>
// CHECK-NEXT:   func.return
// CHECK-NEXT: }
// CHECK-NEXT: func.func @types(%g: !tile.tile<?x128xf16, global>, %s32: !tile.tile<4x16xf16, shared, swizzle 32>, %s64: !tile.tile<3x8x32xf16, shared, swizzle 64>, %sf: !tile.tile<16x32xf32, shared, swizzle 128>, %r: !tile.tile<8x8xf32, register>) -> !tile.tile<8x8xi32, register> {
// CHECK-NEXT:   %i = tile.cast %r : !tile.tile<8x8xf32, register> -> !tile.tile<8x8xi32, register>
// CHECK-NEXT:   %x = tile.fill -0.0010000000474974513 : !tile.tile<8xf32, register>
// CHECK-NEXT:   %y = tile.fill -3.0 : !tile.tile<2x2xindex, register>
// CHECK-NEXT:   %z = tile.fill inf : !tile.tile<4xf16, register>
// CHECK-NEXT:   %c0 = arith.constant 0 : index
// CHECK-NEXT:   %c4 = arith.constant 4 : index
// CHECK-NEXT:   %c1 = arith.constant 1 : index
// CHECK-NEXT:   %sum = scf.for %iv = %c0 to %c4 step %c1 iter_args(%acc = %r) -> (!tile.tile<8x8xf32, register>) {
// CHECK-NEXT:     %next = tile.add %acc, %r : !tile.tile<8x8xf32, register>
// CHECK-NEXT:     scf.yield %next : !tile.tile<8x8xf32, register>
// CHECK-NEXT:   }
// CHECK-NEXT:   func.return %i : !tile.tile<8x8xi32, register>
// CHECK-NEXT: }
// CHECK-NEXT: func.func @grid_exprs(%x: !tile.tile<?x128xf32, global> {tile.dims = #tile.dims<n, 128>}, %y: !tile.tile<?xf32, global> {tile.dims = #tile.dims<ceildiv(n, 128)>, tile.role = "out"}, %t: !tile.tile<?x4xf32, global> {tile.dims = #tile.dims<n, 4>, tile.role = "scratch"}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 128), 4, 1>} {
// CHECK-NEXT:   func.return
// CHECK-NEXT: }
// CHECK-NEXT: }

// The generic form keeps each op's properties (MLIR's `<{...}>`) and spells out every type.
// GENERIC:      %bx = "tile.program_id"() <{axis = "x"}> : () -> index
// GENERIC:      %bz = "tile.program_id"() <{axis = "z"}> {note = "attr-dict"} : () -> index
// GENERIC-NEXT: %seq = "tile.dim"(%q) <{index = 2 : i64}> : (!tile.tile<?x?x?x64xbf16, global>) -> index
// GENERIC:      %win = "tile.view"(%q, %bz, %by, %q0, %c0) : (!tile.tile<?x?x?x64xbf16, global>, index, index, index, index) -> !tile.tile<64x64xbf16, global>
// GENERIC:      "tile.cp_wait_group"() <{pending = 1 : i64}> : () -> ()
// GENERIC:      %zero = "tile.fill"() <{value = 0.000000e+00 : f32}> : () -> !tile.tile<64x64xf32, register>
// GENERIC-NEXT: %s0 = "tile.mma"(%buf, %b, %zero) : (!tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>) -> !tile.tile<64x64xf32, register>
// GENERIC-NEXT: %s = "tile.mma"(%a, %b, %s0) <{transpose_b}> : (!tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, register>) -> !tile.tile<64x64xf32, register>
// GENERIC-NEXT: %ss = "tile.scale"(%s) <{factor = 1.250000e-01 : f32}> : (!tile.tile<64x64xf32, register>) -> !tile.tile<64x64xf32, register>
// GENERIC:      %m_old = "tile.fill"() <{value = 0xff800000 : f32}> : () -> !tile.tile<64xf32, register>
// GENERIC:      %z = "tile.fill"() <{value = 0x7f800000 : f32}> : () -> !tile.tile<4xf16, register>
// GENERIC:      {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 128), 4, 1>} : () -> ()
