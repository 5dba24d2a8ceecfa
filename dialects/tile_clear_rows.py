"""Tile IR ops `tile.clear_rows` and `tile.key_bias`, part of the `tile` dialect (`tile.py` registers them and
re-exports them as `tile.ClearRowsOp`, `tile.KeyBiasOp`): a shared key tile's rows by whether they lie past the
sequence's keys (zeroed; or, for the bias tile of `mask-by-mma`, +0 inside and -inf past).

Why an op of its own: a copy of a key block may read rows past the sequence's keys (a paged cache's page past
`cache_seqlens`, the next packed sequence's rows). The score masks hide those keys (P = 0), but P.V still
multiplies their V rows by 0, and 0 x NaN = NaN, 0 x inf = NaN: a NaN or inf there (a cache made with
`torch.empty`, another sequence's values) would reach O. FlashAttention-2 zeroes such rows; no select on P's
registers can (the P.V mma reads V from shared memory), so the rows themselves are cleared before the mma.
"""

from __future__ import annotations

from xdsl.dialects.builtin import BFloat16Type, Float16Type, IndexType
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from tessera.dialects.tile_base import TILE, require_space, tile_type
from tessera.dialects.tile_types import MemSpace
from tessera.ir.diagnostics import require


class _KeyRowsOp(IRDLOperation):
    """Base of `tile.OP %t, %k0, %seq_k : type`: an op on the rows of a 2-D shared tile %t whose row r holds key
    k0 + r, by whether that key lies before %seq_k."""

    tile = operand_def(TILE)
    k_start = operand_def(IndexType)
    seq_k = operand_def(IndexType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$tile `,` $k_start `,` $seq_k attr-dict `:` type($tile)"

    def __init__(self, tile: SSAValue | Operation, k_start: SSAValue | Operation, seq_k: SSAValue | Operation):
        super().__init__(operands=[tile, k_start, seq_k])

    @property
    def rows(self) -> int:
        """R, the tile's rows: the keys it holds."""
        return tile_type(self.tile).get_shape()[0]

    def _verify_key_rows(self, what: str):
        """The tile's type, after refusing one that is not a 2-D shared tile (`what` the op does to its rows)."""
        ty = tile_type(self.tile)
        require_space(self, "operand", ty, MemSpace.SHARED)
        require(ty.rank == 2, self, f"{what}, got rank {ty.rank}")
        return ty


@irdl_op_definition
class ClearRowsOp(_KeyRowsOp):
    """`tile.clear_rows %t, %k0, %seq_k : !tile.tile<RxCxT, shared>`: zero the rows of shared tile %t that hold
    keys at or past %seq_k.

    Row r of the [R, C] tile holds key k0 + r (the convention of `tile.mask_bounds`, whose columns are those
    keys): every element of a row with k0 + r >= seq_k becomes +0; the other rows are unchanged. With
    k0 + R <= seq_k it changes nothing (`peel-masked-iterations` drops it on such trips, as it drops the masks).

    Invariants: %t is a plain shared tile or a ring stage (`tile.stage`) whose copy has been published (after
    the `tile.cp_wait_group` and `tile.barrier` that cover it, or the covering wait of a ring stage) and, for
    a stage, not yet released. The op is collective: every thread of the block runs it with the same operands,
    and it publishes its zeros itself: after it, every thread of the block and the tensor core (`tile.mma`
    operands) read the cleared rows, with no `tile.barrier` in between. It must not run while a `tile.mma`
    that reads %t is in flight on an earlier key block's contents (the builders clear a key block before its
    P.V mma). Refused by the verifier: a tile that is not a 2-D shared tile."""

    name = "tile.clear_rows"
    def verify_(self) -> None:
        self._verify_key_rows("clears the rows of a [rows, columns] shared tile (or ring stage)")


@irdl_op_definition
class KeyBiasOp(_KeyRowsOp):
    """`tile.key_bias %t, %k0, %seq_k : !tile.tile<RxCxT, shared>`: write the additive mask of key block k0 into
    shared tile %t: row r (key k0 + r) becomes +0 in every column where k0 + r < seq_k, and -inf where
    k0 + r >= seq_k.

    The tile is the B operand of an mma that adds the bounds mask with the tensor core (`mask-by-mma`):
    S += ones[M, C] . %t^T adds, to score column r, the sum of C equal terms 1 x bias[r], exactly +0 or -inf
    (every column of a row is the same, so no 0 x inf arises), which is `tile.mask_bounds` wherever the score is
    finite. Invariants: %t is a plain (unstaged) 2-D shared tile; the op is collective (every thread of the
    block runs it with the same operands) and publishes what it writes, as `tile.clear_rows` does: after it,
    `tile.mma` reads the tile with no `tile.barrier` in between; and it orders itself after every earlier read
    of the tile (an earlier masked trip's bias mma: the lowering waits for the thread's own wgmma groups, then
    a barrier). Refused by the verifier: a tile that is not a 2-D shared tile of a 16-bit float type (wgmma's
    bf16/f16 operands; -inf is exact in both); by the lowering, an unswizzled one."""

    name = "tile.key_bias"
    def verify_(self) -> None:
        ty = self._verify_key_rows("writes the bias of a [keys, columns] shared tile")
        require(isinstance(ty.element_type, BFloat16Type | Float16Type), self,
                f"the bias tile is a wgmma B operand of bf16 or f16, got {ty.element_type}")
