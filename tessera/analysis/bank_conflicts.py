"""Shared-memory bank conflicts of the ways a thread block touches a shared tile.

Shared memory serves one 128-byte request per cycle (a *wavefront*): 32 banks of 4 bytes. A warp's 16-byte
vector accesses are served 8 threads at a time; a group of 8 whose 16-byte chunks fall into the same bank
quad takes one wavefront per distinct chunk. The "ways" of an access pattern is the largest number of
wavefronts any group of 8 needs (1 = conflict-free).

Two patterns cover Tile IR's shared accesses:
- `ROW_VECTORS`: consecutive 16-byte vectors along a row (copies into shared memory, `tile.load`): 8 threads
  read 128 contiguous bytes of one row.
- `ROW_GROUP_CHUNKS`: the same 16-byte column chunk of 8 consecutive rows, the core-matrix access of
  `ldmatrix` and of the tensor cores reading an operand (`tile.mma`).
Addresses are absolute shared-memory addresses of a buffer that starts on its alignment, swizzled with the
tile's swizzle (`tessera.sm90.facts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from tessera.dialects.tile_types import TileType, element_byte_width
from tessera.sm90.facts import BANK_BYTES, SHARED_BANKS, SWIZZLE_CHUNK_BYTES, swizzle_address

THREADS_PER_WAVEFRONT_GROUP = SHARED_BANKS * BANK_BYTES // SWIZZLE_CHUNK_BYTES
"""Threads whose 16-byte accesses one wavefront can serve (8)."""


class AccessPattern(Enum):
    ROW_VECTORS = "16-byte vectors along a row"
    ROW_GROUP_CHUNKS = "one 16-byte chunk of 8 consecutive rows"


def _groups(pattern: AccessPattern, rows: int, row_bytes: int) -> np.ndarray:
    """Logical byte addresses [groups, 8] of every group of 8 accesses the pattern makes over the tile."""
    chunks_per_row = row_bytes // SWIZZLE_CHUNK_BYTES
    n = THREADS_PER_WAVEFRONT_GROUP
    if pattern is AccessPattern.ROW_VECTORS:
        flat = np.arange(rows * chunks_per_row) * SWIZZLE_CHUNK_BYTES
        return flat[: len(flat) // n * n].reshape(-1, n) if len(flat) >= n else flat[None, :]
    starts = np.arange(0, max(rows - n + 1, 1), n) if rows >= n else np.array([0])
    row_ids = starts[:, None] + np.arange(min(n, rows))[None, :]
    chunk_ids = np.arange(chunks_per_row)
    addresses = row_ids[:, None, :] * row_bytes + chunk_ids[None, :, None] * SWIZZLE_CHUNK_BYTES
    return addresses.reshape(-1, addresses.shape[-1])


def conflict_ways(ty: TileType, pattern: AccessPattern, swizzle: int | None = None) -> int:
    """Wavefronts needed by the worst group of 8 accesses of `pattern` over one stage of the tile (1 = no
    conflict). `swizzle` overrides the tile's own. Rows whose bytes are not a multiple of 16 are refused."""
    shape = ty.get_shape()
    row_bytes = shape[-1] * element_byte_width(ty.element_type)
    if row_bytes % SWIZZLE_CHUNK_BYTES:
        raise ValueError(f"rows of {row_bytes} bytes are not made of 16-byte vectors")
    rows = int(np.prod(shape[-2:-1])) if len(shape) >= 2 else 1
    mode = ty.swizzle_bytes if swizzle is None else swizzle
    physical = swizzle_address(_groups(pattern, rows, row_bytes), mode)
    quads = (physical // SWIZZLE_CHUNK_BYTES) % THREADS_PER_WAVEFRONT_GROUP
    worst = 1
    for group_quads, group_addresses in zip(quads, physical):
        for quad in np.unique(group_quads):
            worst = max(worst, len(np.unique(group_addresses[group_quads == quad])))
    return worst


@dataclass(frozen=True)
class AccessReport:
    """One shared access: which op, which operand, which buffer, the pattern and its conflict ways."""

    op_name: str
    operand: str
    buffer: str
    pattern: AccessPattern
    ways: int

    def __str__(self) -> str:
        verdict = "conflict-free" if self.ways == 1 else f"{self.ways}-way bank conflict"
        return f"{self.op_name} {self.operand} %{self.buffer} ({self.pattern.value}): {verdict}"
