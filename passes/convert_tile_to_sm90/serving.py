"""convert-tile-to-sm90, serving: the ops of packed (varlen) and paged attention, `tile.load_index` (one
element of an i32 table, read by every thread) and `tile.store_global_rows` (a store that stops at a row)."""

from __future__ import annotations

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import IndexType, UnitAttr, i1, i32
from xdsl.ir import Block

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.passes.convert_tile_to_sm90.common import INVARIANT_ATTR, _refuse


class ServingLowering:
    """The serving handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_LoadIndexOp(self, op: tile.LoadIndexOp, e: Emitter) -> None:
        """Every thread loads the same 4 bytes (a broadcast the L1 cache serves once per warp) with
        `ld.global.b32`: address = table + 4 x (row-major flat index), then converts it to an index."""
        if not isinstance(op.source.owner, Block):
            _refuse(op, "tile.load_index must read a kernel argument")
        arg = op.source.index
        indices = [self._get(i) for i in op.indices]
        dims = [self._dim_value(arg, d, e) for d in range(len(indices))]
        flat = e.i64(0)
        for index, dim in zip(indices, dims):
            flat = e.addi(e.muli(flat, e.to_i64(dim)), e.to_i64(index))
        base = e.addi(self.entry_args[self.pointer_args[arg]], e.muli(flat, e.i64(4)))
        word = e.op(sm90.LdGlobalOp(base, e.dense(i32, [0]), e.dense(i1, [1]), vector.VectorType(i32, [1])))
        word.owner.attributes[INVARIANT_ATTR] = UnitAttr()  # an input: the producer warpgroup may read it too
        scalar = e.op(vector.ExtractOp(word, [0], i32))
        self._set(op.result, e.op(arith.IndexCastOp(scalar, IndexType())))

    def _lower_StoreGlobalRowsOp(self, op: tile.StoreGlobalRowsOp, e: Emitter) -> None:
        """`tile.store_global`'s predicated `st.global`s (a column tile's, e.g. the LSE, by one lane of each
        quad), with the row bound min(tensor rows, row0 + rows)."""
        window = self._get(op.dest)
        row_end = e.addi(window.indices[-2], self._get(op.rows))
        base, offsets, mask, columns = self._window_access(op, window, op.value.type, e, row_end=row_end)
        mask = self._column_writers(op.value.type, mask, columns, e)
        e.op(sm90.StGlobalOp(base, offsets, self._get(op.value), mask, columns))
