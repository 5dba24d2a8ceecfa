"""How Tile IR register tiles live in the registers of an sm_90 thread block.

Every 2-D register tile of a lowered kernel is [BM, N] with BM = 64 x (warpgroups): warpgroup w owns rows
64w .. 64w + 63 and holds them in the wgmma accumulator layout (`facts.accumulator_coords`), so a thread
has N/2 elements (`vector<N/2 x f32>`). A row vector [BM] holds, per thread, the two rows that thread's
accumulator elements lie on (`vector<2 x f32>`). A bf16/f16 tile in the accumulator layout is kept packed,
two adjacent columns per 32-bit register (`vector<N/4 x i32>`), which is exactly the register-A operand of a
following wgmma. All positions are derived from the facts module; nothing here restates the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from xdsl.dialects.builtin import VectorType, f32, i32
from xdsl.ir import Attribute

from tessera.sm90 import facts

ROWS_PER_THREAD = 2
"""Accumulator rows a thread holds (rows g and g + 8 of its warp's 16)."""


@dataclass(frozen=True)
class AccumulatorLayout:
    """The accumulator layout of an [BM, n] tile (per thread: n/2 elements)."""

    n: int

    @property
    def lanes(self) -> int:
        return self.n // 2

    @cached_property
    def _coords(self) -> tuple[np.ndarray, np.ndarray]:
        v = np.arange(self.lanes)
        row, col = facts.accumulator_coords(v, 0)
        row0, col0 = facts.accumulator_coords(0, 0)
        return row - row0, col - col0

    @property
    def row_offsets(self) -> list[int]:
        """Row of element v relative to the thread's first row."""
        return [int(r) for r in self._coords[0]]

    @property
    def col_offsets(self) -> list[int]:
        """Column of element v relative to the thread's first column."""
        return [int(c) for c in self._coords[1]]

    @cached_property
    def distinct_columns(self) -> tuple[list[int], list[int]]:
        """The columns this thread's elements lie on, each once (relative to its first column, ascending),
        and for each element the index of its column among them: a row vector repeated on every row (a
        broadcast bias) differs only by column, so a thread needs one register per distinct column (n/4:
        the same two columns on each of its two rows in every 8-column group), not one per element."""
        columns = sorted(set(self.col_offsets))
        return columns, [columns.index(c) for c in self.col_offsets]

    @cached_property
    def row_of_element(self) -> list[int]:
        """Which of the thread's two rows (0 or 1) element v lies on."""
        rows = sorted(set(self.row_offsets))
        assert len(rows) == ROWS_PER_THREAD, "each thread holds exactly two accumulator rows"
        return [rows.index(r) for r in self.row_offsets]

    def packed_pairs(self) -> list[int]:
        """For packed 16-bit pairs: the element whose column starts each pair (2i, 2i+1 must be adjacent)."""
        cols = self.col_offsets
        rows = self.row_offsets
        for i in range(0, self.lanes, 2):
            assert rows[i] == rows[i + 1] and cols[i + 1] == cols[i] + 1, "packed pairs are adjacent columns"
        return list(range(0, self.lanes, 2))

    def vector_type(self, packed: bool = False) -> VectorType:
        return VectorType(i32, [self.lanes // 2]) if packed else VectorType(f32, [self.lanes])


ROW_VECTOR_TYPE = VectorType(f32, [ROWS_PER_THREAD])


def _butterfly_offsets(divisor: int, modulus: int) -> list[int]:
    """The shfl.bfly lane offsets that visit every value of the lane term (lane / divisor) % modulus."""
    offsets, step = [], divisor
    while step < divisor * modulus:
        offsets.append(step)
        step *= 2
    return offsets


def quad_shuffle_offsets() -> list[int]:
    """The shfl.bfly lane offsets that combine the lanes holding the same accumulator row: the lanes that
    differ only in the column term of `facts.ACCUMULATOR_THREAD_TERMS` (lane % 4: offsets 1 and 2)."""
    (divisor, modulus, _), = facts.ACCUMULATOR_THREAD_TERMS["col"]
    return _butterfly_offsets(divisor, modulus)


def warp_rows_shuffle_offsets() -> list[int]:
    """The shfl.bfly lane offsets that combine the lanes of a warp holding the same accumulator columns on other
    rows: the lanes that differ only in the within-warp row term of `facts.ACCUMULATOR_THREAD_TERMS` ((lane / 4)
    % 8: offsets 4, 8 and 16); the warp term (tid / 32) is crossed through shared memory (`col_reductions`)."""
    (divisor, modulus, _), = (t for t in facts.ACCUMULATOR_THREAD_TERMS["row"] if t[0] < facts.WARP_SIZE)
    return _butterfly_offsets(divisor, modulus)


def a_operand_registers(k_slice: int) -> list[int]:
    """Indices into a packed accumulator-layout bf16 tile of the four A registers of K-slice `k_slice`."""
    indices = []
    for lo, hi in facts.a_register_sources(k_slice):
        assert hi == lo + 1 and lo % 2 == 0, "A registers pack adjacent accumulator elements"
        indices.append(lo // 2)
    return indices


def element_type_bytes(element_type: Attribute) -> int:
    return element_type.bitwidth // 8
