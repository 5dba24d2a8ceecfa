"""Byte sets that are regular boxes, so that per-byte records are read and written as strided views.

Shared by both simulators: the CTA simulator's `ByteBox` below, and the PTX executor's
`global_accesses.StridedBox`, which is built on `box_offsets` and `box_view`.

The simulator keeps its records per byte (who wrote a shared byte and when, which CTA last read a global byte, ...)
and addresses them with flat index arrays. A TMA copy touches its bytes as a box: in shared memory a contiguous
range (the swizzle only permutes 16-byte chunks inside each 128-byte line), in global memory rows of the tensor at
its strides. Reading or writing a record through a NumPy view of that box (a slice, or `as_strided`) costs a
strided copy; through an index array, a gather or scatter ten times slower.

`ByteBox` is the flat index array itself (same values, same order: every other use of the offsets, a message
naming the first bad byte, a mask selecting some of them, is unchanged), carrying `box` = (start, shape, strides
in elements) such that its offsets are start + sum(index * strides) over the row-major indices of `shape`.
`take(records, where)` and `put(records, where, values)` read and write a 1-D record array at `where`, through the
view when `where` is a `ByteBox` and by indexing otherwise; anything derived from a `ByteBox` (a slice, a mask
selection, arithmetic) is a plain index array again.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


class ByteBox(np.ndarray):
    """Flat byte offsets that form a box (module docstring); `box` is (start, shape, strides) or None."""

    box: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None

    def __array_finalize__(self, obj) -> None:
        self.box = None  # a derived array (a selection, a slice, a sum) is an ordinary index array


@lru_cache(maxsize=256)
def byte_box(start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> ByteBox:
    """The offsets start + sum(i_k * strides[k]) for the row-major indices i of `shape` (no two equal: the
    strides must not make the box overlap itself), as a `ByteBox`: read-only, and kept (a ring of stages lands
    and reads the same boxes at every trip)."""
    where = box_offsets(start, shape, strides).view(ByteBox)
    where.flags.writeable = False
    if len(shape) > 1 and strides[-1] == 1 and all(strides[k] == shape[k + 1] * strides[k + 1]
                                                     for k in range(len(shape) - 1)):
        shape, strides = (int(np.prod(shape)),), (1,)  # a contiguous range
    where.box = (int(start), tuple(int(e) for e in shape), tuple(int(s) for s in strides))
    return where


def box_offsets(start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The flat offsets start + sum(i_k * strides[k]) for the row-major indices i of `shape`, [prod(shape)]."""
    offsets = np.asarray(start, np.int64)
    for extent, stride in zip(shape, strides):
        offsets = offsets[..., None] + np.arange(extent, dtype=np.int64) * stride
    return offsets.reshape(-1)


def box_view(records: np.ndarray, start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The box's elements of the 1-D `records` (strides in elements) as a writable view of `shape`."""
    if len(shape) == 1 and strides[0] == 1:
        return records[start:start + shape[0]]
    item = records.itemsize
    if records.ndim == 1 and records.flags.c_contiguous:  # a view of its buffer: as as_strided, at a fifth of the
        # cost, and checked to lie inside it
        return np.ndarray(shape, records.dtype, records, start * item, tuple(s * item for s in strides))
    return np.lib.stride_tricks.as_strided(records[start:], shape, tuple(s * item for s in strides))


def _view(records: np.ndarray, box: tuple) -> np.ndarray:
    return box_view(records, *box)


def take(records: np.ndarray, where: np.ndarray) -> np.ndarray:
    """`records[where]` (a copy) for a 1-D record array."""
    box = getattr(where, "box", None)
    if box is None:
        return records[where]
    return _view(records, box).flatten()


def look(records: np.ndarray, where: np.ndarray) -> np.ndarray:
    """`records[where]` (1-D, as `take`'s) to read at once and let go: a view of `records` where `where` is a
    `ByteBox` whose box is a contiguous range or another box whose view reshapes without a copy (a later write
    of `records` shows through it), else a copy. A check that only tests the bytes' records (a TMA copy's 16-45 KB
    box) so costs no copy of them."""
    box = getattr(where, "box", None)
    if box is None:
        return records[where]
    return _view(records, box).reshape(-1)


def put(records: np.ndarray, where: np.ndarray, values) -> None:
    """`records[where] = values` for a 1-D record array (`values` a scalar or one value per offset)."""
    box = getattr(where, "box", None)
    if box is None:
        records[where] = values
        return
    view = _view(records, box)
    view[...] = values if np.ndim(values) == 0 else np.reshape(values, view.shape)


__all__ = ["ByteBox", "box_offsets", "box_view", "byte_box", "look", "put", "take"]
