"""Tile IR ops `tile.causal_bias_table` and `tile.causal_bias`, part of the `tile` dialect (`tile.py` registers
them and re-exports them as `tile.CausalBiasTableOp`, `tile.CausalBiasOp`): the causal diagonal's mask added
to a score tile by the tensor core (`mask-causal-by-mma`), with the facts the ops, their lowering and the
interpreters share.

Why a table: the causal mask hides element (R, c) of a score tile where c - R > D, a threshold per row AND
column (`tile.mask_causal`). An additive mask of that shape is S += A . B with A a (permuted) identity and B
the rows' masks, K = 64 per warpgroup of 64 rows (the staircase has full rank). Each k16 slice's B is a window
of one static table (row x, element i: -H where x - i > 0, else +0) whose start moves with D, and its A a fixed
window of an identity kept after it, so the table is written once per block and only B's descriptor moves (`mask_causal_by_mma.py`, the lowering's
`causal_bias.py`).

Why -H and not -inf: A has zeros, and 0 x -inf = NaN. H = 2^100 is exact in bf16; a score S with
|S| < 2^75 = 2^(100 - 25) becomes exactly -H: Hopper's block FMA aligns every term to the largest exponent
(100) and truncates each to a multiple of 2^(100 - 25) (`tessera.sm90.wgmma_numerics`: 23 + 2 fraction bits),
so S contributes 0; an f32 add rounding to nearest gives -H too (S lies within half an ulp of H's binade
below, 2^75). A masked score -H never wins a row's maximum over a visible (finite, |S| < 2^75) one, and
exp(-H c - m) is exactly 0, so a row that has seen a visible key ends bitwise as under the select; a row
that has seen none would not (its maximum would be -H c, its p 1), which is why the rewrite keeps the select
for blocks whose first row sees no key (`mask_causal_by_mma.py`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float32Type, IndexType
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import VarConstraint, IRDLOperation, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from tessera.dialects.tile_base import TILE, require_space, tile_type
from tessera.dialects.tile_types import MemSpace
from tessera.ir.diagnostics import require

CAUSAL_BIAS_LOG2 = 100
"""log2 H: the bias of a hidden score is -H = -2^100 (exact in bf16; the module docstring's bounds)."""

CAUSAL_BIAS_BF16 = 0xF180
"""-2^100 in bf16: sign 1, biased exponent 100 + 127 = 0xE3, fraction 0."""

SCORE_BOUND_LOG2 = CAUSAL_BIAS_LOG2 - 25
"""A hidden score becomes exactly -H for |S| < 2^75 (the block FMA's alignment: 23 + 2 bits below H)."""

TABLE_COLUMNS = 8
"""Elements of one table row: one 16-byte core-matrix row of bf16 (the no-swizzle K-major layout's unit)."""

WARP_ROWS = 16
"""Rows of a warpgroup's score tile one warp holds (one k16 slice of A has its ones in one warp's rows)."""

WARPGROUP_ROWS = 64
"""Rows of a score tile one warpgroup holds (wgmma's M)."""

A_ROWS = 120
"""The rows after the bias windows that hold A: an 8 x 8 identity at `A_IDENTITY_ROW` .. + 7 (row
A_IDENTITY_ROW + i has its one at element i) between zeros; slice p's A (K-major, no swizzle, LBO = SBO =
128: element (m, 8 j + i) at row m + 8 j, element i) starts at `a_window_row(p)`, so that its one of row
m = 16 p + 8 (1 - j) + i sits at K index 8 j + i (`slice_position`). The windows span rows 0 .. 48 + 71."""

A_IDENTITY_ROW = 56
"""The A region's row holding the identity's first one: slice 3's window starts at row 0 of the region."""


def table_rows(rows: int, keys: int) -> int:
    """Rows of the table of an [M, N] score tile: the bias windows (x spans [-(M + N - 9), M + N - 1] over the
    offsets `window_offset` gives: 2 (M + N) - 9 rows, padded by one to an even count), then `A_ROWS`."""
    return 2 * (rows + keys) - 8 + A_ROWS


def bias_rows(table: int) -> int:
    """The rows of a table of `table` rows that hold the bias windows (the rest hold A)."""
    return table - A_ROWS


def table_origin(table: int) -> int:
    """The row holding x = 0 of a table of `table` rows (`table_rows`: M + N - 9)."""
    return bias_rows(table) // 2 - 5


def a_window_row(table: int, warp: int) -> int:
    """The row where slice `warp`'s A window starts: its row 16 p + 8 + i, element i, is the identity's."""
    return bias_rows(table) + A_IDENTITY_ROW - WARP_ROWS * warp - TABLE_COLUMNS


def table_values(table: int) -> np.ndarray:
    """The table's [table, 8] elements (float64): the bias windows' -H where x - i > 0, A's identity, zeros."""
    x = np.arange(table)[:, None] - table_origin(table)
    element = np.arange(TABLE_COLUMNS)[None, :]
    bias = np.where(x - element > 0, -2.0 ** CAUSAL_BIAS_LOG2, 0.0)
    identity = np.arange(table)[:, None] - bias_rows(table) - A_IDENTITY_ROW == element
    return np.where(np.arange(table)[:, None] < bias_rows(table), bias, identity.astype(np.float64))


def window_offset(d, warpgroup, warp, rows: int, keys: int):
    """e = D' + 64 w + 16 p with D' = D clamped to [-M, N - 1]: at or below -M every element of the [M, N]
    tile is hidden (c - R >= -(M - 1) > D), at or above N - 1 none (c - R <= N - 1 <= D), so the clamp
    changes no mask, and it bounds e to [-M, N - 1 + M - 16]: one clamp a trip, the slices 16 rows apart."""
    return np.clip(d, -rows, keys - 1) + WARPGROUP_ROWS * warpgroup + WARP_ROWS * warp


def window_row(column, chunk, e, origin: int):
    """The table row a k16 slice with offset `e` reads for score column `column`, K chunk `chunk` (0/1):
    x = c + 8 j - 8 - e, plus the origin."""
    return column + TABLE_COLUMNS * chunk - TABLE_COLUMNS - e + origin


def slice_position(row_in_warpgroup):
    """(warp p, chunk j, element i) of a warpgroup row R = 16 p + 8 (1 - j) + i: the K index 16 p + 8 j + i
    where A's one of row R sits (each chunk's eight ones serve the rows eight lower, so that row R's mask
    reads element i of row x with x - i > 0 <=> c - R > D)."""
    p, within = row_in_warpgroup // WARP_ROWS, row_in_warpgroup % WARP_ROWS
    return p, 1 - within // TABLE_COLUMNS, within % TABLE_COLUMNS


@irdl_op_definition
class CausalBiasTableOp(IRDLOperation):
    """`tile.causal_bias_table %t : !tile.tile<Rx8xbf16, shared>`: write the causal bias table into %t
    (`table_values`): in its first R - 120 rows (`bias_rows`) element (r, i) becomes -H = -2^100 where
    r - i > O and +0 elsewhere, O = (R - 120) / 2 - 5 (`table_origin`): row r holds g(x) for x = r - O,
    g(x)[i] = -H iff x - i > 0; in its last 120 rows (`A_ROWS`), +0 but for an 8 x 8 identity of 1.0 (A's
    slices). An [M, N] score tile's table has R = 2 (M + N) - 8 + 120 rows.

    Invariants: %t is a plain, unswizzled shared tile of 16-byte rows (the no-swizzle K-major layout wgmma reads
    through descriptors with LBO = SBO = 128), written by this op alone, once, before any `tile.causal_bias`
    reads it. The op is collective (every thread of the block runs it) and publishes what it writes: after it
    the tensor core reads the table with no `tile.barrier` in between. Refused by the verifier: a tile that is
    not a 2-D shared bf16 tile of 8 columns, unswizzled, with an even number of rows of at least 144 (the A rows
    and 24)."""

    name = "tile.causal_bias_table"
    table = operand_def(TILE)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$table attr-dict `:` type($table)"

    def __init__(self, table: SSAValue | Operation):
        super().__init__(operands=[table])

    @property
    def origin(self) -> int:
        """The row holding x = 0 (`table_origin`)."""
        return table_origin(tile_type(self.table).get_shape()[0])

    def verify_(self) -> None:
        ty = tile_type(self.table)
        require_space(self, "operand", ty, MemSpace.SHARED)
        require(ty.rank == 2 and ty.get_shape()[1] == TABLE_COLUMNS and isinstance(ty.element_type, BFloat16Type),
                self, f"the causal bias table is [rows, {TABLE_COLUMNS}] of bf16 (16-byte rows), got {ty}")
        require(not ty.swizzle_bytes, self,
                f"the causal bias table is unswizzled (no-swizzle K-major rows), got swizzle {ty.swizzle_bytes}")
        rows = ty.get_shape()[0]
        require(rows >= 24 + A_ROWS and rows % 2 == 0, self,
                f"the causal bias table has 2 (M + N) + 112 rows for an [M, N] score tile, got {rows}")


@irdl_op_definition
class CausalBiasOp(IRDLOperation):
    """`%r = tile.causal_bias %s, %t, %q0, %k0, %seq_q, %seq_k : !tile.tile<MxNxf32, register>,
    !tile.tile<(2M+2N+112)x8xbf16, shared>`: the causal mask of `tile.mask_causal` added by the tensor core:
    r[i, j] = s[i, j] + b[i, j], b = -H = -2^100 where k0 + j > q0 + i + seq_k - seq_q, else +0, each sum
    rounded to f32 (so -H exactly where |s| < 2^75; the module docstring).

    How the lowering computes it (and the Tile interpreter, which reads the same table elements): with
    D = q0 + seq_k - seq_q - k0, warpgroup w's row R = 16 p + 8 (1 - j) + i takes b[R, c] from table row
    `window_row(c, j, e, O)`, element i, e = `window_offset(D, w, p, M, N)`: four k16 wgmmas per warpgroup, A a
    permuted identity read from the table's last rows (`a_window_row`), B the table through a descriptor whose
    start moves with e.

    Invariants: %t was written by `tile.causal_bias_table` (published); M is a multiple of 64 and N of 8 (a
    wgmma's N, up to 256); the op reads %s as an accumulator: the lowering chains its wgmmas onto the group
    that produces %s (an accumulate branch, convert-tile-to-sm90's control.py). Refused by the verifier: a
    score tile that is not f32 [M, N] in registers with M % 64 == 0 and N % 8 == 0, or a table that is not
    [2 (M + N) + 112, 8] of bf16."""

    name = "tile.causal_bias"
    T: ClassVar = VarConstraint("T", TILE)
    acc = operand_def(T)
    table = operand_def(TILE)
    q_start = operand_def(IndexType)
    k_start = operand_def(IndexType)
    seq_q = operand_def(IndexType)
    seq_k = operand_def(IndexType)
    result = result_def(T)
    traits = traits_def(MemoryReadEffect())
    assembly_format = ("$acc `,` $table `,` $q_start `,` $k_start `,` $seq_q `,` $seq_k attr-dict `:` type($acc) "
                       "`,` type($table)")

    def __init__(self, acc, table, q_start, k_start, seq_q, seq_k):
        super().__init__(operands=[acc, table, q_start, k_start, seq_q, seq_k],
                         result_types=[SSAValue.get(acc).type])

    def verify_(self) -> None:
        ty = tile_type(self.acc)
        require_space(self, "score", ty, MemSpace.REGISTER)
        require(isinstance(ty.element_type, Float32Type) and ty.rank == 2, self,
                f"the score tile is an f32 [rows, keys] accumulator, got {ty}")
        rows, keys = ty.get_shape()
        require(rows % WARPGROUP_ROWS == 0 and keys % 8 == 0 and 8 <= keys <= 256, self,
                f"the score tile is [64 m, 8 n] (wgmma's M, its N up to 256), got [{rows}, {keys}]")
        table = tile_type(self.table)
        require_space(self, "table", table, MemSpace.SHARED)
        require(table.rank == 2 and table.get_shape() == (table_rows(rows, keys), TABLE_COLUMNS)
                and isinstance(table.element_type, BFloat16Type), self,
                f"the table of a [{rows}, {keys}] score tile is [{table_rows(rows, keys)}, {TABLE_COLUMNS}] of bf16, "
                f"got {table}")
