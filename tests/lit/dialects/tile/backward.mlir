// The attention backward's Tile IR ops (dialects/tile_backward.py): tile.store_shared, tile.atomic_add,
// tile.sub_rows, tile.exp2_subtract, tile.sem_wait, tile.sem_signal; their custom form round-trips through the
// generic form.
// RUN: tessera-opt %s | tessera-opt | filecheck %s
// RUN: TESSERA_ROUNDTRIP
// RUN: tessera-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @backward_ops(%DQ: !tile.tile<?x?x?x64xf32, global>, %SEM: !tile.tile<?x?x?xi32, global>, %n: index) {
  %c0 = arith.constant 0 : index
  %p_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %s = tile.fill 1.0 : !tile.tile<64x64xf32, register>
  %lse2 = tile.fill -inf : !tile.tile<64xf32, register>
  %p = tile.exp2_subtract %s, %lse2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %ds = tile.sub_rows %p, %lse2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %p_half = tile.cast %p : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
  tile.store_shared %p_half, %p_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.barrier
  %sem = tile.view %SEM[%c0, %c0, %c0] : !tile.tile<?x?x?xi32, global> -> !tile.tile<1xi32, global>
  tile.sem_wait %sem, %n : !tile.tile<1xi32, global>
  %w = tile.view %DQ[%c0, %c0, %c0, %c0] : !tile.tile<?x?x?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.atomic_add %ds, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  %dqt = tile.fill 1.0 : !tile.tile<64x32xf32, register>
  %wt = tile.view %DQ[%c0, %c0, %c0, %c0] : !tile.tile<?x?x?x64xf32, global> -> !tile.tile<32x64xf32, global>
  tile.atomic_add %dqt, %wt transpose : !tile.tile<64x32xf32, register>, !tile.tile<32x64xf32, global>
  tile.sem_signal %sem {note = "attr-dict"} : !tile.tile<1xi32, global>
  func.return
}

// CHECK:      %p = tile.exp2_subtract %s, %lse2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
// CHECK-NEXT: %ds = tile.sub_rows %p, %lse2 : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
// CHECK:      tile.store_shared %p_half, %p_smem : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>
// CHECK:      tile.sem_wait %sem, %n : !tile.tile<1xi32, global>
// CHECK:      tile.atomic_add %ds, %w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
// CHECK:      tile.atomic_add %dqt, %wt transpose : !tile.tile<64x32xf32, register>, !tile.tile<32x64xf32, global>
// CHECK-NEXT: tile.sem_signal %sem {note = "attr-dict"} : !tile.tile<1xi32, global>

// GENERIC: "tile.exp2_subtract"(%s, %lse2) : (!tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>) -> !tile.tile<64x64xf32, register>
// GENERIC: "tile.store_shared"(%p_half, %p_smem) : (!tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>) -> ()
// GENERIC: "tile.sem_wait"(%sem, %n) : (!tile.tile<1xi32, global>, index) -> ()
// GENERIC: "tile.atomic_add"(%ds, %w) : (!tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>) -> ()
// GENERIC: "tile.atomic_add"(%dqt, %wt) <{transpose}> : (!tile.tile<64x32xf32, register>, !tile.tile<32x64xf32, global>) -> ()
// GENERIC: "tile.sem_signal"(%sem) {note = "attr-dict"} : (!tile.tile<1xi32, global>) -> ()
