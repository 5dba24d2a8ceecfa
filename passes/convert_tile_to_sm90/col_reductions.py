"""convert-tile-to-sm90, the column reductions `tile.col_sum`, `tile.col_max`, `tile.col_min`: [BM, N] -> [1, N].

The rows of a register tile are spread over every thread of the block: in the wgmma accumulator layout
(`facts.accumulator_coords`) lane l of warp w holds rows 16 w + (l / 4) + {0, 8} at columns 8 j + 2 (l % 4) +
{0, 1}. A column's values therefore meet in three steps:

    per thread:  its two registers of each of its N/4 distinct columns combined (row 0's with row 1's)
    per warp:    shfl.sync.bfly over the lanes that hold other rows of the same columns (offsets 4, 8, 16:
                 `warp_rows_shuffle_offsets`); every lane of the warp then holds the warp's value
    per block:   lanes 0..3 of each warp store their columns into a scratch shared buffer [warps, N] of 32-bit
                 words (one per op); bar.sync 0 of the block's threads; every thread reads its columns of every
                 warp's row and combines them in warp order, so that every thread holds the same value: the
                 [1, N] column vector's registers (`_is_column_vector`: the thread's distinct columns)

Inside a loop the buffer is written again on the next trip, so a second bar.sync orders this trip's reads before
those writes. The barrier counts the threads that run Tile code (`self.threads`: after `warp-specialize` the
consumers only, whose barrier 0 it keeps). An [BM, 1] column reduces the same way to a [1, 1] tile (one value
for the block, held as a column is: `small_tiles`), and a one-row tile ([1, N], [1, 1]) is its own reduction.
f32 sums are in a fixed order (rows, then lanes, then warps), the same on every thread; max/min are max.NaN /
min.NaN (a NaN in the column wins; +0 the larger zero) and max.s32 / min.s32; i32 sums add.s32 (wrapping).
Refused by name: register tiles the layout does not hold ([BM, N] with N not a legal wgmma N, `_layout`).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, VectorType, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import warp_rows_shuffle_offsets
from tessera.sm90 import facts

WORD_BYTES = 4
"""One f32 or i32 value of the scratch buffer."""

ColReductionOp = tile.ColSumOp | tile.ColMaxOp | tile.ColMinOp


class ColReductionLowering:
    """The column-reduction handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_ColSumOp(self, op: tile.ColSumOp, e: Emitter) -> None:
        self._reduce_columns(op, e.addi if self._integer_columns(op) else e.addf, e)

    def _lower_ColMaxOp(self, op: tile.ColMaxOp, e: Emitter) -> None:
        combine = (lambda a, b: e.op(arith.MaxSIOp(a, b))) if self._integer_columns(op) else e.maxf
        self._reduce_columns(op, combine, e)

    def _lower_ColMinOp(self, op: tile.ColMinOp, e: Emitter) -> None:
        kind = arith.MinSIOp if self._integer_columns(op) else arith.MinimumfOp
        self._reduce_columns(op, lambda a, b: e.op(kind(a, b)), e)

    @staticmethod
    def _integer_columns(op: ColReductionOp) -> bool:
        return isinstance(op.source.type.element_type, IntegerType)

    def _reduce_columns(self, op: ColReductionOp, combine, e: Emitter) -> None:
        """The module docstring's three steps; `combine` is the reduction of two vectors of registers."""
        ty = op.source.type
        x = self._get(op.source)
        if ty.get_shape()[0] == 1:  # one row: each column's only value
            self._set(op.result, x)
            return
        if self._is_column(ty):  # [BM, 1]: the thread's two rows, one column, held by all four lanes of a quad
            columns, writers = [0], 1
            folded = combine(e.shuffle(x, [0]), e.shuffle(x, [1]))
        else:
            layout = self._layout(op, ty)
            columns, index_of = layout.distinct_columns
            rows = layout.row_of_element
            by_row = [[v for k in range(len(columns)) for v in range(layout.lanes)
                       if index_of[v] == k and rows[v] == r] for r in range(2)]
            folded = combine(e.shuffle(x, by_row[0]), e.shuffle(x, by_row[1]))
            writers = facts.ACCUMULATOR_THREAD_TERMS["col"][0][1]  # lanes 0..3: one per column term
        for offset in warp_rows_shuffle_offsets():
            folded = combine(folded, e.op(sm90.ShflSyncOp("bfly", folded, offset)))
        total = self._combine_warps(op, folded, columns, writers, combine, e)
        self._set(op.result, e.shuffle(total, [0, 0]) if self._is_column(ty) else total)

    def _combine_warps(self, op: ColReductionOp, folded: SSAValue, columns: list[int], writers: int, combine,
                       e: Emitter) -> SSAValue:
        """Each warp's `folded` registers (its values of the thread's `columns`, relative to its column base)
        combined over the block's warps through a scratch shared buffer (module docstring)."""
        width = op.source.type.get_shape()[1]
        warps = self.threads // facts.WARP_SIZE
        row_bytes = width * WORD_BYTES
        buffer = self._alloc(e, f"{op.name.removeprefix('tile.')}_scratch", warps * row_bytes, 16, 0)
        word = lambda value: e.op(arith.ConstantOp.from_int_and_width(value, i32))
        index_i32 = lambda value: e.op(arith.IndexCastOp(value, i32))
        # the thread's first column (an [BM, 1] column has one, the same for all)
        own = buffer if width == 1 else e.op(arith.AddiOp(
            buffer, e.op(arith.MuliOp(index_i32(self.col_base), word(WORD_BYTES)))))
        warp = e.op(arith.DivUIOp(self.tid, e.index(facts.WARP_SIZE)))
        lane = e.op(arith.RemUIOp(self.tid, e.index(facts.WARP_SIZE)))
        start = e.op(arith.AddiOp(own, e.op(arith.MuliOp(index_i32(warp), word(row_bytes)))))
        addresses = e.addi(e.broadcast(start, len(columns)), e.dense(i32, [c * WORD_BYTES for c in columns]))
        e.if_(e.cmpi(lane, e.index(writers), "ult"), lambda s: s.op(sm90.StSharedOp(addresses, folded)))
        e.op(sm90.BarSyncOp(0, self.threads))
        result_type = VectorType(folded.type.element_type, [len(columns)])
        total = None
        for w in range(warps):
            part = e.op(sm90.LdSharedOp(own, result_type, [w * row_bytes + c * WORD_BYTES for c in columns]))
            total = part if total is None else combine(total, part)
        if self._enclosing_loop(op) is not None:  # the next trip's stores after every thread's loads
            e.op(sm90.BarSyncOp(0, self.threads))
        return total
