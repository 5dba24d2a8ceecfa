"""Bank-conflict ways of shared accesses, against values worked out by hand from the bank model.

Shared memory: 32 banks x 4 B; 16-byte accesses are served 8 threads per wavefront. Reading one 16-byte chunk
of 8 consecutive rows (ldmatrix / tensor-core operand) of a row-major tile with R-byte rows: without swizzle
all 8 chunks sit in the same bank quad when R is a multiple of 128 (8 ways); an S-byte XOR swizzle spreads
them over S/16 quads when R == S (conflict-free), and over S/16 / (R/S) quads when R > S."""

import pytest
from xdsl.dialects.builtin import bf16, f16, f32

from tessera.analysis.bank_conflicts import AccessPattern, conflict_ways
from tessera.dialects.tile_types import TileType

CASES = [
    # (shape, element type, swizzle, ways reading 8-row chunks)
    ((128, 64), bf16, 0, 8),
    ((128, 64), bf16, 32, 4),
    ((128, 64), bf16, 64, 2),
    ((128, 64), bf16, 128, 1),   # 128-byte rows: the canonical SW128 atom
    ((128, 128), bf16, 128, 2),  # 256-byte rows: only 4 distinct XOR patterns over 8 rows
    ((64, 32), f16, 64, 1),
    ((64, 16), bf16, 32, 1),
    ((64, 16), bf16, 0, 2),      # 32-byte rows: rows r and r+4 share a quad
    ((64, 32), f32, 128, 1),
]


@pytest.mark.parametrize("shape,element,swizzle,ways", CASES)
def test_row_group_chunks(shape, element, swizzle, ways):
    assert conflict_ways(TileType(shape, element, "shared"), AccessPattern.ROW_GROUP_CHUNKS, swizzle) == ways


@pytest.mark.parametrize("shape,element,swizzle,_", CASES)
def test_row_vectors_never_conflict(shape, element, swizzle, _):
    """8 threads reading 128 contiguous bytes of one row hit 8 distinct quads, swizzled or not (a swizzle only
    permutes chunks within a 128-byte line)."""
    assert conflict_ways(TileType(shape, element, "shared"), AccessPattern.ROW_VECTORS, swizzle) == 1


def test_rows_not_made_of_vectors_are_refused():
    with pytest.raises(ValueError, match="not made of 16-byte vectors"):
        conflict_ways(TileType((8, 4), bf16, "shared"), AccessPattern.ROW_VECTORS)
