"""convert-tile-to-sm90, register tiles smaller than the block's: vectors of 16-bit elements, and [1, 1] tiles.

A bf16/f16 row vector [BM], column [BM, 1] or column vector [1, N] (a per-row scale, a per-column bias, a row
statistic on its way to a 16-bit store) is held as the registers of its f32 counterpart packed in pairs
(`RegisterTileLowering._vector_type`): 32-bit register i holds the f32 holding's registers 2i (bits 15:0) and
2i + 1 (bits 31:16). For a row vector or a column that is the thread's two rows in one register; for a column
vector, whose thread holds the distinct columns c, c + 1, c + 8, c + 9, ... of the accumulator layout, two
adjacent columns a register, as the packed pairs of an [BM, N] tile hold them. So `tile.cast` to and from f32
is the tile's (`sm90.cvt_unpack`, `sm90.cvt_pack`), and a 16-bit row broadcast onto an [BM, N] tile is a shuffle
of whole registers.

From global memory a column vector's pairs are loaded as 32-bit words where every pair starts on 4 bytes
(`_words_aligned`: an even first column of rows that start on 4 bytes), otherwise one `ld.global.u16` per element
(a bias of 135 columns), packed (`pack_pairs`); from a one-row shared tile a word a pair; a row vector's or a
column's two rows are always two elements (a row vector's, of a 1-D window: `BackwardLowering._row_window_access`).
Stores split the pairs (`unpack_pairs`) and write one `st.global.b16` per element, from one lane of those holding it.

A [1, 1] tile (one value for the whole block: a per-tensor scale read from memory) is held as a column [BM, 1]
whose rows all hold the value: every thread loads the one element, so it broadcasts onto every other operand as
a column does, and thread 0 alone stores it or adds it into a window (`tile.atomic_add`). tile.gather takes it
as a coordinate (a row of a table picked by one index for the block, broadcast onto the result's registers as any
operand is) and makes it (every coordinate [1, 1]: every thread reads the one element). The ops whose meaning
depends on where a value lies in the block (tile.iota, the row reductions and row ops, masks) refuse it by name
(`_refuse_misplaced_scalars`).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import VectorType, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects import sm90_reductions as reductions
from tessera.dialects.tile_types import MemSpace, TileType, is_half
from tessera.ir.walk import walk_ops
from tessera.lowering.emitter import Emitter
from tessera.passes.convert_tile_to_sm90.common import SharedTile, Window, refuse

HALF = 1 << 16
"""2^16: a packed pair is lo + hi * HALF (a multiply and a division take it as an immediate, where a shift by a
vector of amounts would hold a register per lane)."""

SCALAR_OPS = (tile.LoadOp, tile.LoadBroadcastOp, tile.GatherOp, tile.StoreGlobalOp, tile.AtomicAddOp, tile.CastOp,
              tile.FillOp, tile.ScaleOp, tile.SaturatingScaleOp, tile.LogOp, tile.ColSumOp, tile.ColMaxOp,
              tile.ColMinOp, *(op for op in tile.ELEMENTWISE_OPS if op is not tile.IotaOp))
"""The Tile ops that take or make a [1, 1] register tile below Tile IR: value by value, its load, store and atomic
add (a grid-wide total: each block's col_sum of its row sums added into one element), or its gather (a coordinate
is broadcast onto the result's registers as an elementwise operand is), and the column reductions (an [BM, 1]
column's is a [1, 1] tile: `col_reductions`)."""


def is_scalar(ty) -> bool:
    """A [1, 1] register tile: one value for the whole block."""
    return isinstance(ty, TileType) and ty.memory_space == MemSpace.REGISTER and tuple(ty.get_shape()) == (1, 1)


def pack_pairs(e: Emitter, low: SSAValue, high: SSAValue) -> SSAValue:
    """Registers of 16-bit elements (zero-extended, as `ld.global.u16` gives them) packed in pairs: register i
    is low[i] | high[i] << 16."""
    shifted = e.muli(high, e.splat(i32, HALF, high.type.get_shape()[0]))
    return e.op(arith.OrIOp(low, shifted))


def unpack_pairs(e: Emitter, packed: SSAValue) -> SSAValue:
    """The elements of packed pairs, one a register in its low 16 bits (what `st.global.b16` stores): element 2i
    is register i itself (its low half), element 2i + 1 its high half, i / 2^16."""
    pairs = packed.type.get_shape()[0]
    high = e.op(arith.DivUIOp(packed, e.splat(i32, HALF, pairs)))
    return e.shuffle(packed, [i // 2 + (i % 2) * pairs for i in range(2 * pairs)], high)


class SmallTileLowering:
    """The handlers of 16-bit vectors and [1, 1] tiles of `KernelLowering` (a mixin: it uses the kernel's state,
    and passes every other tile on to the general handlers)."""

    def _refuse_misplaced_scalars(self) -> None:
        """Refuse, at its line, the first op outside `SCALAR_OPS` with a [1, 1] register tile among its operands and
        results: its lowering would place the value on the thread's rows or columns of the block."""
        for op in walk_ops(self.fn):
            if op.dialect_name() != "tile" or isinstance(op, SCALAR_OPS):
                continue
            if any(is_scalar(value.type) for value in (*op.operands, *op.results)):
                refuse(op, f"a [1, 1] register tile is one value for the whole block, held by every thread: {op.name} "
                           "of it is not supported below Tile IR (elementwise ops, casts, loads and stores are)")

    def _load_half_row(self, op, window: Window, ty: TileType, columns: list[int], e: Emitter) -> SSAValue:
        """The thread's `columns` (offsets from its column base, in adjacent pairs) of the one row of `window`,
        16-bit, packed in pairs: a 32-bit word a pair where `_words_aligned`, else one `ld.global.u16` an element."""
        if self._words_aligned(window, ty):
            base, mask, column_bytes = self._one_row_access(window, ty, columns[0::2], e)
            return e.op(sm90.LdGlobalOp(base, e.dense(i32, [0] * len(column_bytes)), mask,
                                        VectorType(i32, [len(column_bytes)]), column_bytes))
        base, mask, column_bytes = self._one_row_access(window, ty, columns, e)
        elements = e.op(sm90.LdGlobalU16Op(base, e.dense(i32, [0] * len(columns)), mask, len(columns), column_bytes))
        return pack_pairs(e, e.shuffle(elements, range(0, len(columns), 2)),
                          e.shuffle(elements, range(1, len(columns), 2)))

    def _load_scalar(self, op, window: Window, ty: TileType, e: Emitter) -> SSAValue:
        """The one element at the window's origin (a [1, 1] window, a [1] one), loaded by every thread and held as
        a column: two registers, or one packed pair of it twice."""
        base, mask, column_bytes = self._one_row_access(window, ty, [0], e)
        if is_half(ty.element_type):
            element = e.op(sm90.LdGlobalU16Op(base, e.dense(i32, [0]), mask, 1, column_bytes))
            return pack_pairs(e, element, element)
        loaded = e.op(sm90.LdGlobalOp(base, e.dense(i32, [0]), mask, VectorType(ty.element_type, [1]), column_bytes))
        return e.shuffle(loaded, [0] * self._vector_type(op, ty).get_shape()[0])

    def _lower_LoadBroadcastOp(self, op: tile.LoadBroadcastOp, e: Emitter) -> None:
        """A 16-bit row of a global window or a one-row shared tile: the columns the thread's registers lie on,
        packed; a [BM, N] result then takes each of its packed pairs from the pair of its columns (a shuffle, no
        instruction), and a column [BM, 1] (a [1] window) the one element twice."""
        ty = op.result.type
        if not is_half(ty.element_type):
            super()._lower_LoadBroadcastOp(op, e)
            return
        window = self._get(op.source)
        if self._is_column(ty):
            if isinstance(window, SharedTile):
                refuse(op, "a 16-bit column [BM, 1] is broadcast from a global window, not a shared one")
            self._set(op.result, self._load_scalar(op, window, ty, e))
            return
        layout = self._layout(op, ty)
        columns = layout.distinct_columns[0]
        if isinstance(window, SharedTile):  # a one-row tile: its pairs start on 4 bytes, a word each
            packed = self._broadcast_from_shared(op, window, columns[0::2], VectorType(i32, [len(columns) // 2]), e)
        else:
            packed = self._load_half_row(op, window, ty, columns, e)
        if not self._is_column_vector(ty):  # register j of the tile: elements 2j, 2j + 1, a pair of columns
            packed = e.shuffle(packed, [columns.index(layout.col_offsets[v]) // 2 for v in layout.packed_pairs()])
        self._set(op.result, packed)

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        window, ty = self._get(op.source), op.result.type
        if not isinstance(window, Window):
            super()._lower_LoadOp(op, e)
        elif is_scalar(ty):
            self._set(op.result, self._load_scalar(op, window, ty, e))
        elif is_half(ty.element_type) and self._is_column_vector(ty):
            self._require_row_window(op, window)
            self._set(op.result, self._load_half_row(op, window, ty, self._layout(op, ty).distinct_columns[0], e))
        else:  # 16-bit columns [BM, 1] too: two rows, an element each (`_words_aligned`)
            super()._lower_LoadOp(op, e)

    def _lower_StoreGlobalOp(self, op: tile.StoreGlobalOp, e: Emitter) -> None:
        window, ty, value = self._get(op.dest), op.value.type, self._get(op.value)
        if not isinstance(window, Window):
            super()._lower_StoreGlobalOp(op, e)
        elif is_scalar(ty):
            base, mask, column_bytes = self._scalar_access(window, ty, e)
            store = sm90.StGlobalB16Op if is_half(ty.element_type) else sm90.StGlobalOp
            e.op(store(base, e.dense(i32, [0]), e.shuffle(value, [0]), mask, column_bytes))
        elif is_half(ty.element_type) and self._is_column_vector(ty):
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e, writers=True)
            e.op(sm90.StGlobalB16Op(base, offsets, unpack_pairs(e, value), mask, columns))
        else:
            super()._lower_StoreGlobalOp(op, e)

    def _lower_AtomicAddOp(self, op: tile.AtomicAddOp, e: Emitter) -> None:
        """A [1, 1] value added into the window's one element (with `transpose` too: a [1, 1] is its own
        transpose) by thread 0: one `red.global.add.f32` for the block."""
        window, ty = self._get(op.dest), op.value.type
        if not (is_scalar(ty) and isinstance(window, Window)):
            super()._lower_AtomicAddOp(op, e)
            return
        base, mask, column_bytes = self._scalar_access(window, ty, e)
        value = e.shuffle(self._get(op.value), [0])
        e.op(reductions.RedGlobalAddOp(base, e.dense(i32, [0]), value, mask, column_bytes))

    def _scalar_access(self, window: Window, ty: TileType, e: Emitter):
        """(base, mask, column bytes) of the one element at the window's origin, written by thread 0 alone (the
        thread whose row and column bases are 0): every thread holds a [1, 1] tile's value."""
        base, mask, column_bytes = self._one_row_access(window, ty, [0], e)
        first = e.andi(e.setp("eq", self.row_base, e.index(0)), e.setp("eq", self.col_base, e.index(0)))
        return base, e.andi(mask, e.broadcast(first, 1)), column_bytes
