"""convert-tile-to-sm90, register tiles: the wgmma accumulator layout of [BM, N] tiles, their vector
types, each register's coordinates, fills."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerType,
    VectorType,
    f32,
    i1,
    i32,
)
from xdsl.ir import Operation, SSAValue

from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType, is_fp8
from tessera.ir.walk import walk_ops
from tessera.numerics import numpy_dtype
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import ROW_VECTOR_TYPE, AccumulatorLayout
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import (
    feeds_mma_a_only,
    refuse,
)

ARITHMETIC_OPS = (
    *tile.ELEMENTWISE_OPS, tile.ExpDiffOp, tile.FmaOp, tile.ScaleOp, tile.SaturatingScaleOp, tile.LogOp,
    tile.ExpSubtractOp, tile.Exp2SubtractOp, tile.MulRowsOp, tile.DivRowsOp, tile.SubRowsOp, tile.RowMaxOp,
    tile.RowMinOp, tile.RowSumOp, tile.ColMaxOp, tile.ColMinOp, tile.ColSumOp, tile.MaskCausalOp, tile.MaskBoundsOp,
)
"""The Tile ops that compute with their register tiles' elements, one register per element: on f32 (and i32, i1)
tiles only. A 16-bit or 8-bit register tile is held packed, two or four elements to a 32-bit register (the
A operand of an mma, a value on its way to a store): it is loaded, filled, cast, stored and multiplied by
`tile.mma`, and refused by name as any of these ops' operand or result (`_refuse_packed_arithmetic`)."""


class RegisterTileLowering:
    """The RegisterTile handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    # -- register tiles --------------------------------------------------------------------------------------
    def _refuse_packed_arithmetic(self) -> None:
        """Refuse, at its line, the first `ARITHMETIC_OPS` op of the kernel with a 16-bit or 8-bit register tile
        among its operands and results: its lowering would compute on the packed registers as if they held one
        f32 each (silently wrong numbers, or an op the CTA simulator and the PTX printer cannot run). The Tile
        interpreter computes such ops in their own precision; below Tile IR the kernel casts to f32 first."""
        for op in walk_ops(self.fn):
            if not isinstance(op, ARITHMETIC_OPS):
                continue
            for value in (*op.operands, *op.results):
                ty = value.type
                if isinstance(ty, TileType) and ty.memory_space == MemSpace.REGISTER and (
                        is_fp8(ty.element_type) or isinstance(ty.element_type, BFloat16Type | Float16Type)):
                    per_register = 4 if is_fp8(ty.element_type) else 2
                    refuse(op, f"{op.name} computes on f32 or i32 register tiles, and a {ty.element_type} register "
                               f"tile is held packed, {per_register} elements to a 32-bit register: tile.cast it "
                               "to f32 first (and back before a store)")

    def _layout(self, op: Operation, ty: TileType) -> AccumulatorLayout:
        shape = ty.get_shape()
        if len(shape) != 2:
            refuse(op, f"expected a 2-D register tile, got {ty}")
        n = shape[1]
        try:
            facts.wgmma_shape(n, "bf16", "f32")
        except ValueError:
            refuse(op, f"register tiles need a column count that is a legal wgmma N (8..256 step 8), got {n}")
        return AccumulatorLayout(n)

    @staticmethod
    def _is_column(ty: TileType) -> bool:
        """An [BM, 1] tile: held like a row vector (each thread its two rows)."""
        return ty.rank == 2 and ty.get_shape()[1] == 1

    @staticmethod
    def _is_column_vector(ty: TileType) -> bool:
        """A [1, N] tile (one value per column): held as the values of the thread's distinct columns of an
        [BM, N] accumulator-layout tile (`AccumulatorLayout.distinct_columns`: N/4 registers, the same on each of
        its rows), repeated onto an [BM, N] operand's registers by a shuffle, which costs no instruction and no
        register (`_broadcast_operand`)."""
        return ty.rank == 2 and ty.get_shape()[0] == 1 and ty.get_shape()[1] > 1

    def _vector_type(self, op: Operation, ty: TileType) -> VectorType:
        """The registers of this thread's share of a register tile: one per element of an f32, i32 or i1 tile
        (an [BM, N] tile its accumulator-layout elements, a row vector or column its two rows, a column vector its
        distinct columns); a 16-bit tile packs those of its f32 counterpart in pairs (small_tiles.py)."""
        element = ty.element_type
        small = isinstance(element, IntegerType) and element.width.data in (1, 32)  # i32 values, i1 predicates
        half = isinstance(element, BFloat16Type | Float16Type)
        if ty.rank == 1 or self._is_column(ty):
            if small:
                return VectorType(element, ROW_VECTOR_TYPE.get_shape())
            if half:
                return VectorType(i32, [ROW_VECTOR_TYPE.get_shape()[0] // 2])
            if not isinstance(element, Float32Type):
                refuse(op, f"row vectors must be f32, bf16, f16, i32 or i1, got {element}")
            return ROW_VECTOR_TYPE
        layout = self._layout(op, ty)
        if self._is_column_vector(ty):
            if half:
                return VectorType(i32, [len(layout.distinct_columns[0]) // 2])
            if not (small or isinstance(element, Float32Type)):
                refuse(op, f"column vectors [1, N] must be f32, bf16, f16, i32 or i1, got {element}")
            return VectorType(element, [len(layout.distinct_columns[0])])
        if isinstance(element, Float32Type):
            return layout.vector_type()
        if small:
            return VectorType(element, [layout.lanes])
        if isinstance(element, BFloat16Type | Float16Type):
            return layout.vector_type(packed=True)
        refuse(op, f"register tiles of {element} are not supported")

    def _lower_FillOp(self, op: tile.FillOp, e: Emitter) -> None:
        """An f32 (or i32, i1) tile is one register per element; a 16-bit or 8-bit one (the first, never-read value of a
        P that overlap-softmax{fold=true} carries) is packed, two or four equal elements per 32-bit register,
        as the A operand of an mma holds them (`_lower_CastOp`, `sm90.cvt_pack_fp8`: with every element equal,
        the 8-bit key order does not matter), and a 16-bit vector as `_vector_type` says."""
        ty = op.result.type
        element = ty.element_type
        if is_fp8(element) and ty.rank == 2:
            if not feeds_mma_a_only(op.result):  # stored, it would be written as the byte pairs of a cast
                refuse(op, "an 8-bit register fill is lowered as the A operand of an 8-bit tile.mma (four equal "
                           "bytes a register), directly or through loop-carried values: fill f32 and tile.cast "
                           "it to store it")
            per_register = 4
        elif isinstance(element, BFloat16Type | Float16Type):
            per_register = 2
        else:
            vt = self._vector_type(op, ty)
            if isinstance(vt.element_type, IntegerType):  # i32 values, i1 predicates: the verifier's whole number
                self._set(op.result, e.splat(vt.element_type, int(op.value.value.data), vt.get_shape()[0]))
                return
            if not isinstance(element, Float32Type):
                refuse(op, f"fills of {element} register tiles are not supported (fill f32, then tile.cast)")
            self._set(op.result, e.splat(f32, op.value.value.data, vt.get_shape()[0]))
            return
        width = 32 // per_register
        bits = int(np.array(op.value.value.data, dtype=numpy_dtype(element)).view(f"uint{width}"))
        word = sum(bits << (width * k) for k in range(per_register))
        lanes = self._layout(op, ty).lanes // 4 if per_register == 4 else self._vector_type(op, ty).get_shape()[0]
        self._set(op.result, e.splat(i32, word - (1 << 32) if word >= 1 << 31 else word, lanes))

    def _thread_offsets(self, op, ty: TileType, pairs: bool = False) -> tuple[list[int], list[int]]:
        """Per register of this thread's share of an [BM, N] tile (or of an [BM, 1] column, or per packed
        pair): its row and column relative to the thread's first element."""
        if self._is_column(ty):
            rows = sorted(set(AccumulatorLayout(8).row_offsets))
            return rows, [0] * len(rows)
        layout = self._layout(op, ty)
        elements = layout.packed_pairs() if pairs else list(range(layout.lanes))
        rows, cols = layout.row_offsets, layout.col_offsets  # each a new list: made once, not once per element
        return [rows[v] for v in elements], [cols[v] for v in elements]

    def _origin(self, e: Emitter, row0: SSAValue, col0: SSAValue, column: bool = False) -> tuple[SSAValue, SSAValue]:
        """The absolute (row, col) of this thread's first element of a tile whose corner is (row0, col0)."""
        return e.addi(row0, self.row_base), (col0 if column else e.addi(col0, self.col_base))

    @staticmethod
    def _all_true(e: Emitter, lanes: int) -> SSAValue:
        """The mask of an access through a window promised `in_bounds`: every register (a constant, so that
        the accesses print without a predicate to compute)."""
        return e.dense(i1, [1] * lanes)

    @staticmethod
    def _below(e: Emitter, limit: SSAValue, offsets: list[int]) -> SSAValue:
        """Per register: offsets[i] < limit (a scalar threshold against constant offsets, so a mask costs
        one setp per register and no vector of coordinates)."""
        return e.setp("gt", e.broadcast(limit, len(offsets)), e.dense(IndexType(), offsets))

    @staticmethod
    def _lead_limit(e: Emitter, window, dims: list[SSAValue], limit: SSAValue) -> SSAValue:
        """`limit` (an end of the rows the access may reach), or 0 where a leading index of the window (a batch,
        a head) lies outside its tensor: every element is then masked, with scalar instructions only. Windows
        whose leading indices are known to lie inside (`Window.lead_inside`) keep `limit`."""
        if window.lead_inside:
            return limit
        for index, dim in zip(window.indices[:len(window.indices) - len(window.shape)], dims):
            limit = e.op(arith.SelectOp(e.cmpi(index, dim, "ult"), limit, e.index(0)))
        return limit

    @staticmethod
    def _not_before(e: Emitter, start: SSAValue, offsets: list[int]) -> SSAValue:
        """Per register: start + offsets[i] >= 0, i.e. offsets[i] > -1 - start (one setp per register): the
        mask, beside `_below`'s, of a window that may start before its tensor (`Window.starts_inside` false, its
        first row at t - 3, say), whose elements before the tensor are outside it as those past its end are."""
        before = e.broadcast(e.op(arith.SubiOp(e.index(-1), start)), len(offsets))
        return e.setp("lt", before, e.dense(IndexType(), offsets))

