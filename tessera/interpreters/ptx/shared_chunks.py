"""Where the bytes of a shared-memory operand lie, as the asynchrony records want them: the 16-byte chunks every
swizzle keeps together (a core matrix row, `facts.SWIZZLE_CHUNK_BYTES`), and whether a set of byte offsets is one
dense range (`dense_range`), whole chunks in order (`chunks_in_order`) or lies in a set of chunks (`chunk_set`).
A TMA box (`bulk_copy`) and a wgmma descriptor's operand (`wgmma_operands`) are described so, once per value.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts

CHUNK = facts.SWIZZLE_CHUNK_BYTES
"""The bytes every swizzle keeps together (a core matrix row): a descriptor's bytes are whole such chunks."""


CHUNK_ITEM = np.dtype(f"V{CHUNK}")
"""One chunk as one item: a gather or scatter of chunks by this view moves 16-byte items (NumPy's item copy),
some ten times faster than rows of 16 uint8 (its generic row loop), with the same bytes."""


def as_chunks(buffer: np.ndarray) -> np.ndarray:
    """The contiguous uint8 `buffer` (a multiple of `CHUNK` bytes) as one `CHUNK_ITEM` per chunk: a view."""
    return buffer.view(CHUNK_ITEM)


def chunks_in_order(offsets: np.ndarray) -> np.ndarray | None:
    """The chunk numbers c (bytes 16c to 16c + 15) whose bytes, in order, are `offsets`, when they are, else
    None: the operand is then gathered, and its asynchrony records written, a chunk at a time."""
    if offsets.size % CHUNK:
        return None
    rows = offsets.reshape(-1, CHUNK)
    if any_set(rows[:, 0] % CHUNK) or not equal_arrays(rows, rows[:, :1] + np.arange(CHUNK)):
        return None
    chunks = rows[:, 0] // CHUNK
    chunks.setflags(write=False)
    return chunks


def chunk_set(offsets: np.ndarray) -> np.ndarray | slice:
    """The 16-byte chunks (byte // 16) the offsets lie in, ascending, as a range where they are consecutive: the
    columns of the wgmma read records (`wgmma_read_tracking.WgmmaReadTracking.wgmma_reads`). A descriptor reads whole chunks
    (its addresses and strides are 16-byte units, a core matrix row is one chunk)."""
    chunks = np.unique(offsets // CHUNK)
    if len(chunks) and int(chunks[-1]) - int(chunks[0]) + 1 == len(chunks):
        return slice(int(chunks[0]), int(chunks[-1]) + 1)
    chunks.setflags(write=False)
    return chunks


def dense_range(offsets: np.ndarray) -> tuple[int, int] | None:
    """(low, high) when `offsets` are the bytes [low, high) each once, in some order (a swizzled tile), else
    None: the asynchrony records of such bytes are read and written as one range (`asynchrony`)."""
    if not offsets.size:
        return None
    low, high = int(offsets.min()), int(offsets.max()) + 1
    if high - low != offsets.size or np.bincount(offsets - low, minlength=high - low).max() != 1:
        return None
    return low, high
