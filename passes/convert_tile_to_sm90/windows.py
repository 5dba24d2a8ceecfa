"""convert-tile-to-sm90, windows: `tile.view` of kernel arguments, and register tiles loaded from and stored to
them (`tile.load`, `tile.store_global`, `tile.load_broadcast`, which also reads one-row shared tiles): each
thread's addresses, offsets, column immediates and bounds masks."""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    Float32Type,
    IndexType,
    VectorType,
    i32,
)
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import TileType
from tessera.kernel_abi import rows_aligned
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import element_type_bytes
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.small_tiles import pack_pairs, unpack_pairs
from tessera.passes.convert_tile_to_sm90.common import (
    ROW_TILE_ROWS,
    refuse,
    SharedTile,
    Window,
    is_even,
    is_nonnegative,
    lead_in_range,
)


class WindowLowering:
    """The window handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _element_address(self, e: Emitter, arg: int, indices, wide_dims, element_bytes: int) -> SSAValue:
        """The i64 byte address of element `indices` of global kernel argument `arg`: row-major over
        `wide_dims` (its dimensions as i64), `element_bytes` an element."""
        flat = e.i64(0)
        for index, dim in zip(indices, wide_dims):
            flat = e.addi(e.muli(flat, dim), e.to_i64(index))
        return e.addi(self.entry_args[self.pointer_args[arg]], e.muli(flat, e.i64(element_bytes)))

    def _lower_ViewOp(self, op: tile.ViewOp, e: Emitter) -> None:
        source = self._get(op.source)
        if not (isinstance(source, tuple) and source[0] == "arg"):
            refuse(op, "views must be of kernel arguments")
        if op.result.type.rank not in (1, 2):
            refuse(op, "only 2-D windows (and 1-D ones for tile.load_broadcast) are supported")
        rank = op.result.type.rank
        dims = list(self.sig.args[source[1]].dims)
        lead = zip(op.indices[:-rank], dims[:-rank])
        self.values[op.result] = Window(source[1], [self._get(i) for i in op.indices], op.result.type.get_shape(),
                                        is_even(op.indices[-1]), op.in_bounds is not None,
                                        all(is_nonnegative(i) for i in op.indices[-2:]),
                                        all(lead_in_range(i, d, self.sig.grid) for i, d in lead))

    def _window_access(self, op, window: Window, ty: TileType, e: Emitter,
                       row_end: SSAValue | None = None,
                       rows_only: bool = False,
                       per_element: bool = False) -> tuple[SSAValue, SSAValue, SSAValue, list[int]]:
        """The global address of this thread's first element, and the byte offsets from it, in-bounds mask and
        constant column bytes of each register of its share of an [BM, N] window: one per element, or per packed
        pair for 16-bit tiles. The offsets are row pitch x row only, computed once per distinct row and shuffled out;
        the columns go in the address immediates (`sm90.COLUMN_BYTES`), so that a thread's offsets take as many
        values (and registers) as it has rows. `row_end`, if
        given, is an absolute row before which the access stops even inside the tensor. `rows_only`: the
        caller knows every column is inside the tensor; offsets and mask are then computed for the thread's
        distinct rows and shuffled out to the registers (two registers live, not one per register).
        `per_element`: one register per element of a 16-bit tile too, not per packed pair. An 8-bit tile (stored
        only: `sm90.cvt_pack`'s byte pairs) is one register per pair as well. A window promised
        `in_bounds` (without `row_end`) takes an all-true mask: no compare, and unpredicated accesses."""
        half = element_type_bytes(ty.element_type) in (1, 2)  # f32 and i32 tiles hold one element per register
        # 8- and 16-bit tiles a pair of columns a register; a 16-bit column [BM, 1] its two rows, an element each
        by_rows = per_element and element_type_bytes(ty.element_type) == 2 and self._is_column(ty)
        if half and not by_rows and (ty.get_shape()[1] % 2 or self._is_column(ty)):
            refuse(op, f"{8 * element_type_bytes(ty.element_type)}-bit tiles in registers need an even number of columns")
        packed = half and not per_element
        *lead, row0, col0 = window.indices
        row_offsets, col_offsets = self._thread_offsets(op, ty, pairs=packed)
        row, col = self._origin(e, row0, col0, column=self._is_column(ty))
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        end = dims[-2] if row_end is None else e.op(arith.MinSIOp(dims[-2], row_end))
        end = self._lead_limit(e, window, dims, end)
        distinct = sorted(set(row_offsets))
        spread = [distinct.index(r) for r in row_offsets]
        if window.in_bounds and row_end is None:
            in_rows = in_cols = self._all_true(e, len(row_offsets))
        elif rows_only:
            in_rows = self._below(e, e.op(arith.SubiOp(end, row)), distinct)
            if not window.starts_inside:
                in_rows = e.andi(in_rows, self._not_before(e, row, distinct))
            in_rows = e.shuffle(in_rows, spread)
        else:
            in_rows = self._below(e, e.op(arith.SubiOp(end, row)), row_offsets)
            last = [c + 1 if packed else c for c in col_offsets]
            in_cols = self._below(e, e.op(arith.SubiOp(dims[-1], col)), last)
            if not window.starts_inside:
                in_rows = e.andi(in_rows, self._not_before(e, row, row_offsets))
                in_cols = e.andi(in_cols, self._not_before(e, col, col_offsets))
        # The thread's first element is at byte ((lead..., row) * C + col) * elt (i64, added to the pointer);
        # register i is (row_offset[i] * C + col_offset[i]) * elt bytes further (i32: within one tile).
        wide = [e.to_i64(d) for d in dims]
        elt = element_type_bytes(self._arg_tile(window.arg).element_type)
        base = self._element_address(e, window.arg, [*lead, row, col], wide, elt)
        pitch = e.op(arith.IndexCastOp(e.muli(dims[-1], e.index(elt)), i32))
        # One offset per distinct row, shuffled out to the registers: two registers live, not one per register
        # (a load in a loop keeps them live across it: the bias of attention).
        offsets = e.shuffle(e.muli(e.broadcast(pitch, len(distinct)), e.dense(i32, distinct)), spread)
        if rows_only or (window.in_bounds and row_end is None):
            return base, offsets, in_rows, [c * elt for c in col_offsets]
        return base, offsets, e.andi(in_rows, in_cols), [c * elt for c in col_offsets]

    def _lower_StoreGlobalOp(self, op: tile.StoreGlobalOp, e: Emitter) -> None:
        self._store_window(op, self._get(op.dest), op.value.type, self._get(op.value), e)

    def _words_aligned(self, window: Window, ty: TileType) -> bool:
        """Whether a register tile of type `ty` may move to or from `window` one 32-bit word per register:
        32-bit elements (f32, i32: one element per register), or 16-bit elements whose packed pairs start on
        their own size (an access must be aligned to its size [P#operand-addresses]): every row of the tensor
        does (its innermost size is even for every size the kernel accepts, `rows_aligned`) and so does the
        window's first column (`Window.even_column`; the fragment layouts put pairs at even columns from it). A
        16-bit column [BM, 1] never does: its pairs are two rows (small_tiles.py)."""
        if element_type_bytes(ty.element_type) == 4:
            return True
        if self._is_column(ty):
            return False
        return window.even_column and rows_aligned(self.sig, window.arg, 2 * element_type_bytes(ty.element_type))

    def _store_window(self, op, window: Window, ty: TileType, value: SSAValue, e: Emitter,
                      row_end: SSAValue | None = None) -> None:
        """Each thread stores its registers of `value` (of type `ty`) into the window, masked by the tensor's
        bounds (and `row_end`): one `st.global.b32` per register where `_words_aligned`, otherwise (16-bit
        elements in rows that may start on any even byte) one `st.global.b16` per element, the packed pair
        (lo | hi << 16) split into its low half and hi = pair / 2^16. A column vector [1, N] writes the
        window's one row, from the threads of the tile's first row (`_column_vector_access`). An 8-bit tile
        (`sm90.cvt_pack`'s byte pairs, bits 15:0 of each register) is one `st.global.b16` per pair, in rows that
        start on even bytes only (refused by name otherwise)."""
        if element_type_bytes(ty.element_type) == 1:
            if self._is_column_vector(ty) or not self._words_aligned(window, ty):
                refuse(op, "an 8-bit register tile is stored in byte pairs at even addresses: its window must start "
                            "at an even column and the tensor's rows hold an even number of elements (a constant, "
                            "or a size promised even: tile.divisible = {N = 2})")
            base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end)
            e.op(sm90.StGlobalB16Op(base, offsets, value, mask, columns))
            return
        if self._is_column_vector(ty):
            if row_end is not None:
                refuse(op, "a [1, N] register tile is stored with tile.store_global")
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e, writers=True)
            e.op(sm90.StGlobalOp(base, offsets, value, mask, columns))
            return
        if self._words_aligned(window, ty):
            base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end)
            mask = self._column_writers(ty, mask, columns, e)
            e.op(sm90.StGlobalOp(base, offsets, value, mask, columns))
            return
        base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end, per_element=True)
        mask = self._column_writers(ty, mask, columns, e)
        e.op(sm90.StGlobalB16Op(base, offsets, unpack_pairs(e, value), mask, columns))

    def _column_writers(self, ty, mask, columns, e: Emitter):
        """The store mask of a tile of type `ty`: `mask` itself, or for a column tile ([BM, 1]) `mask` and
        only the lane whose column base is 0, since the lanes of a row's quad hold the same value. (A
        register-by-register compare: sm90.selp takes one condition per register, not a scalar one.)"""
        if not self._is_column(ty):
            return mask
        lanes = len(columns)
        first = e.setp("eq", e.broadcast(self.col_base, lanes), e.dense(IndexType(), [0] * lanes))
        return e.andi(mask, first)

    def _lower_LoadBroadcastOp(self, op: tile.LoadBroadcastOp, e: Emitter) -> None:
        """Each thread loads the window's elements at the distinct columns its registers lie on, once each
        (`AccumulatorLayout.distinct_columns`: n/4 registers for an [BM, n] tile, where a whole tile would
        hold n/2), masked by the tensor's bounds (out-of-bounds columns give 0, and so does every column of a
        window whose leading indices, the row of a 2-D tensor or a batch, lie outside the tensor; no mask for a
        window promised `in_bounds`); the tile is
        a shuffle of them, which costs no instruction and no register. The columns are the loads' address
        immediates."""
        window = self._get(op.source)
        ty = op.result.type
        if not (isinstance(ty.element_type, Float32Type) or ty.element_type == i32):
            refuse(op, f"only f32, i32, bf16 and f16 rows can be broadcast, got {ty.element_type}")
        vector_type = self._vector_type(op, ty)
        if self._is_column(ty):  # [BM, 1]: one element, on both of the thread's rows
            columns, spread = [0], [0] * vector_type.get_shape()[0]
        elif self._is_column_vector(ty):  # [1, N]: held as the distinct columns themselves
            columns = self._layout(op, ty).distinct_columns[0]
            spread = list(range(len(columns)))
        elif _initializes_accumulators(op.result):
            # loaded into every register (each column twice): the tile becomes a wgmma accumulator, whose registers
            # the loaded ones then are (and, scaled first, in place), where a shuffle of n/4 registers would be
            # copied into n/2 others with both live at once (16 registers more at the backward's dP^T - dPsum)
            columns = self._layout(op, ty).col_offsets
            spread = list(range(len(columns)))
        else:
            columns, spread = self._layout(op, ty).distinct_columns
        if isinstance(window, SharedTile):
            loaded = self._broadcast_from_shared(op, window, columns, vector_type, e)
            self._set(op.result, loaded if spread == list(range(len(columns))) else e.shuffle(loaded, spread))
            return
        base, mask, column_bytes = self._one_row_access(window, ty, columns, e)
        loaded = e.op(sm90.LdGlobalOp(base, e.dense(i32, [0] * len(columns)), mask,
                                      VectorType(vector_type.element_type, [len(columns)]), column_bytes))
        self._set(op.result, loaded if spread == list(range(len(columns))) else e.shuffle(loaded, spread))

    def _one_row_access(self, window: Window, ty: TileType, columns: list[int], e: Emitter):
        """(base address, in-bounds mask, column bytes) of the thread's `columns` (offsets from its column
        base) of the one row of a window [lead..., col0] whose leading indices select the row (a 1-D window, or
        a [1, N] window of a 2-D tensor): every thread reads the same row. Out-of-bounds columns, and every
        column of a row outside the tensor, are masked (no mask for a window promised `in_bounds`). An [BM, 1]
        column takes the window's one element whatever the thread's column."""
        *lead, col0 = window.indices
        col = col0 if self._is_column(ty) else e.addi(col0, self.col_base)
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        mask = self._all_true(e, len(columns)) if window.in_bounds else self._below(e, e.op(arith.SubiOp(dims[-1], col)), columns)
        if not (window.in_bounds or window.starts_inside):
            mask = e.andi(mask, self._not_before(e, col, columns))
        flat = e.i64(0)
        for index, dim in zip(lead, dims):
            flat = e.addi(e.muli(flat, e.to_i64(dim)), e.to_i64(index))
            if not window.in_bounds:
                mask = e.andi(mask, e.broadcast(e.cmpi(index, dim, "ult"), len(columns)))
        first = e.addi(e.muli(flat, e.to_i64(dims[-1])), e.to_i64(col))
        elt = element_type_bytes(ty.element_type)
        base = e.addi(self.entry_args[self.pointer_args[window.arg]], e.muli(first, e.i64(elt)))
        return base, mask, [c * elt for c in columns]

    def _column_vector_access(self, op, window: Window, ty: TileType, e: Emitter, writers: bool = False):
        """(base, offsets, mask, column bytes) of a [1, N] register tile (a column vector: the thread's distinct
        columns, `_is_column_vector`) moved to or from a [1, N] window of a 2-D tensor: the window's one row, not
        the thread's rows. `writers`: only the threads of the tile's first row write (the lanes of one quad
        hold every column once; the other rows hold the same values again)."""
        self._require_row_window(op, window)
        columns = self._layout(op, ty).distinct_columns[0]
        base, mask, column_bytes = self._one_row_access(window, ty, columns, e)
        if writers:
            first_row = e.setp("eq", self.row_base, e.index(0))
            mask = e.andi(mask, e.broadcast(first_row, len(columns)))
        return base, e.dense(i32, [0] * len(columns)), mask, column_bytes

    @staticmethod
    def _require_row_window(op, window: Window) -> None:
        """A [1, N] register tile (a column vector) moves to or from a [1, N] window (its one row) or, stored or
        added, a 1-D window [N] (`tile_base.columns_into_row`)."""
        if not (len(window.shape) == 1 or (len(window.shape) == 2 and window.shape[0] == 1)):
            refuse(op, f"a [1, N] register tile moves to or from a [1, N] window, got {list(window.shape)}")

    def _broadcast_from_shared(self, op: tile.LoadBroadcastOp, row: SharedTile, columns: list[int], vector_type,
                               e: Emitter) -> SSAValue:
        """The thread's `columns` (offsets from its column base) of a one-row shared tile (`ROW_TILE_ROWS`,
        unswizzled): one `ld.shared.b32` each at the thread's first column, the offsets immediates; a ring stage
        is waited for first (its full barrier), like every first read of a stage."""
        if row.rows != ROW_TILE_ROWS or row.swizzle:
            refuse(op, "a shared row is broadcast from an unswizzled one-row tile [1, N]")
        self._await_stage(op.source, row, e)
        first = e.op(arith.IndexCastOp(e.muli(self.col_base, e.index(row.elt_bytes)), i32))
        first = e.op(arith.AddiOp(row.address, first))
        # each slot of a one-row tile is TMA_SMEM_ALIGNMENT-aligned (_alloc_row_tile) and the thread's first column
        # a multiple of the column terms' multipliers: the printer pairs the columns into ld.shared.v2 with that
        col_step = math.gcd(*(multiplier for _, _, multiplier in facts.ACCUMULATOR_THREAD_TERMS["col"]))
        aligned = math.gcd(facts.TMA_SMEM_ALIGNMENT, col_step * row.elt_bytes)
        return e.op(sm90.LdSharedOp(first, VectorType(vector_type.element_type, [len(columns)]),
                                    [c * row.elt_bytes for c in columns], aligned=aligned))

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        """Each thread loads its registers of the window, masked by the tensor's bounds (0 outside): f32 tiles
        and 16-bit tiles whose rows start on 4 bytes (`rows_aligned`) one 32-bit word per register (a packed
        pair), other 16-bit tiles one `ld.global.u16` per element, whose pairs are then packed (lo | hi << 16)
        into the registers a word load gives: a pair at an odd element of a row is not 4-byte aligned."""
        window = self._get(op.source)
        if not isinstance(window, Window):
            refuse(op, "loads from shared memory are not supported")
        ty = op.result.type
        if self._is_column_vector(ty):  # the window's one row: load_broadcast's access
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e)
            self._set(op.result, e.op(sm90.LdGlobalOp(base, offsets, mask, self._vector_type(op, ty), columns)))
            return
        if not self._words_aligned(window, ty):
            base, offsets, mask, columns = self._window_access(op, window, ty, e, per_element=True)
            elements = e.op(sm90.LdGlobalU16Op(base, offsets, mask, len(columns), columns))
            self._set(op.result, pack_pairs(e, e.shuffle(elements, range(0, len(columns), 2)),
                                            e.shuffle(elements, range(1, len(columns), 2))))
            return
        base, offsets, mask, columns = self._window_access(op, window, ty, e)
        value = e.op(sm90.LdGlobalOp(base, offsets, mask, self._vector_type(op, ty), columns))
        self._set(op.result, value)


def _initializes_accumulators(value: SSAValue) -> bool:
    """Whether every use of `value` is the accumulator of a `tile.mma`, directly or through a `tile.scale` whose
    every use is."""
    uses = [use.operation for use in value.uses]
    if not uses:
        return False
    for user in uses:
        if isinstance(user, tile.ScaleOp):
            if not _initializes_accumulators(user.result):
                return False
        elif not (isinstance(user, tile.MmaOp) and user.acc is value):
            return False
    return True
