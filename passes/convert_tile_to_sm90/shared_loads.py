"""convert-tile-to-sm90, `tile.load` of a shared tile into registers: the mirror of `tile.store_shared`
(backward.py). Each thread reads exactly the elements its registers hold in the accumulator layout
(`RegisterTileLowering._thread_offsets`, the layout store_shared writes with), at their swizzled addresses:

- an [BM, N] tile (a whole tile or a ring stage; f32 or i32 one register per element, bf16/f16 one packed pair
  per register), stored as boxes of swizzle-span rows (`SharedTile`) under its 32/64/128B swizzle
  (`tessera.sm90.swizzle.swizzle_bits`: on absolute addresses, the tile on its swizzle period). A thread's rows
  lie a multiple of the swizzle's 8-row period apart and its columns inside one row of a box, so the XOR key
  is one per thread and each register's address is one of a few swizzled bases (one per 8-byte pair of
  columns) plus a constant: the row and box offsets, multiples of the period, which the swizzle leaves alone.
  The registers of one base are one `sm90.ld_shared` with the constants as immediates, 8-byte aligned for
  32-bit elements, so that a thread's two adjacent f32/i32 columns print as one `ld.shared.v2.b32`;
- a one-row tile [1, N] (unswizzled) read into a [1, N] register row: `tile.load_broadcast`'s access of it,
  the row on its one row (the thread's distinct columns).

A ring stage is waited for first (its full barrier), like every first read of a stage. Ordering with other
threads' writes is the kernel's: a `tile.barrier` after a `tile.store_shared` or a copy by threads, a copy's
wait for a TMA (the CTA simulator and the PTX executor report a read that lacks it)."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import VectorType, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import is_half
from tessera.lowering.emitter import Emitter
from tessera.passes.convert_tile_to_sm90.common import CORE_ROWS, ROW_TILE_ROWS, SharedTile, refuse
from tessera.sm90 import facts


class SharedLoadLowering:
    """The `tile.load` handler for shared sources of `KernelLowering` (a mixin listed first: it hands loads of
    global windows to the others)."""

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        t = self._get(op.source)
        if not isinstance(t, SharedTile):
            super()._lower_LoadOp(op, e)
            return
        ty = op.result.type
        if t.rows == ROW_TILE_ROWS:
            if not self._is_column_vector(ty):
                refuse(op, f"a one-row shared tile is read into a [1, N] register row (N > 1), got {ty}")
            self._lower_LoadBroadcastOp(op, e)  # the row on its one row: load_broadcast's access
            return
        if t.rows != self.bm:
            refuse(op, f"a shared tile is read into registers with the block's {self.bm} rows, got {t.rows} rows")
        self._await_stage(op.source, t, e)
        self._set(op.result, self._load_registers(op, t, ty, e))

    def _load_registers(self, op: tile.LoadOp, t: SharedTile, ty, e: Emitter) -> SSAValue:
        """This thread's registers of [BM, N] tile `t` (see the module docstring): one ld_shared per swizzled
        base, then a shuffle (no instruction) into register order."""
        half = is_half(ty.element_type)
        rows, cols = self._thread_offsets(op, ty, pairs=half)
        if any(r % CORE_ROWS for r in rows):
            refuse(op, "the rows of a thread's registers must be a multiple of the swizzle period apart")
        pair = sm90.SHARED_PAIR_BYTES
        row_bytes = e.op(arith.MuliOp(e.op(arith.IndexCastOp(self.row_base, i32)), self._i32(e, t.span)))
        col_bytes = e.op(arith.MuliOp(e.op(arith.IndexCastOp(self.col_base, i32)), self._i32(e, t.elt_bytes)))
        thread = e.op(arith.AddiOp(e.op(arith.AddiOp(t.address, row_bytes)), col_bytes))
        key = None
        if t.swizzle:  # bits [4, ..) XOR the line bits of the thread's row: the same for all its rows
            mask, line_shift, chunk_shift = facts.swizzle_bits(t.swizzle)
            key = e.op(arith.ShLIOp(e.op(arith.AndIOp(e.op(arith.ShRUIOp(thread, self._i32(e, line_shift))),
                                                      self._i32(e, mask))), self._i32(e, chunk_shift)))
        groups: dict[int, list[tuple[int, int]]] = {}  # in-row bytes of a pair of columns -> (register, constant)
        for i, (r, c) in enumerate(zip(rows, cols)):
            in_row = (c % t.box_cols) * t.elt_bytes
            constant = (c // t.box_cols) * t.box_bytes + r * t.span + in_row % pair
            groups.setdefault(in_row - in_row % pair, []).append((i, constant))
        element = i32 if half else ty.element_type
        order, loaded = [], None
        for in_row, members in groups.items():
            base = e.op(arith.AddiOp(thread, self._i32(e, in_row))) if in_row else thread
            if key is not None:
                base = e.op(arith.XOrIOp(base, key))
            words = e.op(sm90.LdSharedOp(base, VectorType(element, [len(members)]), [c for _, c in members],
                                         aligned=pair if t.elt_bytes * 2 == pair else None))
            order += [i for i, _ in members]
            loaded = words if loaded is None else e.shuffle(loaded, range(len(order)), words)
        if order == sorted(order):
            return loaded
        return e.shuffle(loaded, [order.index(i) for i in range(len(order))])
