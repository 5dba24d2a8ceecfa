"""What a global-memory access is, for the PTX executor's happens-before on global memory (`global_order`): its
kind (`WEAK`, `STRONG_CTA`, `STRONG_GPU`, `ASYNC`, `ASYNC_REDUCE`; `strong_kind` from an instruction's
modifiers) and the bytes it touches when they form a box (`StridedBox`, a TMA box or a strided bulk copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tessera.interpreters.byte_box import box_offsets, box_view
from tessera.interpreters.truth import any_set, equal_arrays

WEAK, STRONG_CTA, STRONG_GPU, ASYNC, ASYNC_REDUCE, STRONG_CLUSTER = 1, 2, 3, 4, 5, 6
"""How an access is made: a weak generic ld/st; a strong generic access of scope .cta, .cluster, or .gpu/.sys;
the async proxy (TMA and bulk copies); a bulk reduction (async proxy, element-wise atomic)."""
CTA, CLUSTER, GPU = 1, 2, 3
"""Scopes, each holding the one before: the threads of the CTA, of its cluster, of the whole launch (.gpu and
.sys alike for one launch)."""
IS_STRONG = np.array([False, False, True, True, False, True, True])
SCOPE = np.array([0, 0, CTA, GPU, 0, GPU, CLUSTER])  # a strong kind's scope (0: not strong)
IS_ASYNC = np.array([False, False, False, False, True, True, False])
IN_FLIGHT = np.iinfo(np.int32).max
"""The epoch recorded for an async-proxy write of global memory (a bulk or TMA store or reduction) until a
cp.async.bulk.wait_group of its thread without .read completes its bulk group: above every clock, so no access is
ordered after it (`global_order`) [memory_model.BULK_WRITE_COMPLETION]."""
PROXY_NAMES = {WEAK: "the generic proxy", STRONG_CTA: "the generic proxy (strong, .cta)",
               STRONG_CLUSTER: "the generic proxy (strong, .cluster)", STRONG_GPU: "the generic proxy (strong)",
               ASYNC: "the async proxy", ASYNC_REDUCE: "the async proxy (bulk reduction)"}


def scope_level(modifiers) -> int:
    """The scope an instruction's modifiers name: .cta, .cluster, else .gpu (the default of ld/st/atom/red;
    membar.gl and .sys, fence.*.gpu and .sys)."""
    return CTA if "cta" in modifiers else CLUSTER if "cluster" in modifiers else GPU


def strong_kind(modifiers) -> int:
    """The kind of an ld/st/atom/red from its modifiers: strong when it has .relaxed/.acquire/.release/
    .acq_rel/.volatile (atom and red always are), of its scope (default .gpu)."""
    return {CTA: STRONG_CTA, CLUSTER: STRONG_CLUSTER, GPU: STRONG_GPU}[scope_level(modifiers)]


def cluster_of(m, ranks: np.ndarray) -> np.ndarray:
    """The linear index of the cluster holding each CTA of grid rank `ranks` (x + X y + X Y z) in the launch's
    cluster shape `m.cluster` (each CTA its own cluster without one)."""
    (gx, gy, _), (cx, cy, cz) = m.grid, m.cluster
    x, y, z = ranks % gx, ranks // gx % gy, ranks // (gx * gy)
    return x // cx + -(-gx // cx) * (y // cy + -(-gy // cy) * (z // cz))


def scope_holds(m, level, ranks: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Whether a scope `level` (per element; 0: none) of a thread of CTA `ranks` holds the threads of CTA `others`
    (grid ranks) [memory_model.MORALLY_STRONG]."""
    level = np.asarray(level)
    same = ranks == others
    if m.cluster_size > 1 and any_set(level == CLUSTER):
        same_cluster = cluster_of(m, ranks) == cluster_of(m, others)
    else:
        same_cluster = same
    return (level >= GPU) | ((level >= CTA) & same) | ((level == CLUSTER) & same_cluster)


@dataclass(frozen=True)
class StridedBox:
    """The global bytes start + sum_k i_k * strides[k] (0 <= i_k < shape[k]), in that row-major order: the
    bytes of a TMA box that lies inside its tensor. Their records are read and written through strided views
    (`view`), with no index array, and `index` lists them where a finding must name a byte."""

    start: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def view(self, array: np.ndarray) -> np.ndarray:
        """The box's elements of the per-byte `array` (a writable view)."""
        return box_view(array, self.start, self.shape, self.strides)

    def index(self) -> np.ndarray:
        """[1, bytes]: the flat positions, in order."""
        return box_offsets(self.start, self.shape, self.strides).reshape(1, -1)

    def hull(self) -> tuple[int, int]:
        """[low, high): the least range holding every byte of the box."""
        reach = [(n - 1) * stride for n, stride in zip(self.shape, self.strides)]
        return self.start + sum(min(r, 0) for r in reach), self.start + sum(max(r, 0) for r in reach) + 1

    def meets(self, other: "StridedBox") -> bool:
        """Whether the two boxes share a byte."""
        (a, wa), (b, wb) = _runs(self), _runs(other)
        if (len(a) > 1 and any_set(np.diff(a) < wa)) or (len(b) > 1 and any_set(np.diff(b) < wb)):
            return bool(np.intersect1d(self.index(), other.index()).size)  # runs that overlap themselves
        last = np.searchsorted(b, a + wa) - 1  # per run of `a`, the last run of `b` starting before its end
        return any_set((last >= 0) & (b[np.maximum(last, 0)] + wb > a))


@lru_cache(maxsize=1024)
def _runs(box: StridedBox) -> tuple[np.ndarray, int]:
    """(first bytes, ascending; length): the box as runs of consecutive bytes, a row of its innermost dimension
    each where that dimension's stride is 1, else a byte each (kept: a grid's boxes recur in every launch)."""
    if box.strides and box.strides[-1] == 1:
        starts, width = box_offsets(box.start, box.shape[:-1], box.strides[:-1]), box.shape[-1]
    else:
        starts, width = box_offsets(box.start, box.shape, box.strides), 1
    starts = np.sort(starts)
    starts.setflags(write=False)
    return starts, width


def put_at(array: np.ndarray, where, value) -> None:
    """array[where] = value, `where` an index or a `StridedBox`."""
    if isinstance(where, StridedBox):
        where.view(array)[...] = value
    else:
        array[where] = value


class Words:
    """The bytes of an access [lanes, k] (flat positions) as aligned k-byte words, k = 2, 4, 8 or 16: row i of
    the index is word `numbers[i]`, the bytes k * numbers[i] .. k * numbers[i] + k - 1. A per-byte table (1-D,
    contiguous, of a multiple of k entries) viewed as one item per word (the k entries' bits as one integer or
    complex of 4, 8 or 16 bytes) is read and written one element a word (`get`, `put`): the same entries as by the
    bytes' index, in a quarter of the elements for a st.global.b32 (NumPy's scatter of rows is slower than one of
    the bytes: these are plain elements)."""

    def __init__(self, numbers: np.ndarray, k: int):
        self.numbers, self.k = numbers, k

    @property
    def size(self) -> int:
        """The bytes: n * k."""
        return len(self.numbers) * self.k

    @staticmethod
    def aligned(offsets: np.ndarray, k: int, size: int) -> "Words | None":
        """The words of an access of k bytes at each of the flat positions `offsets` [n], each a multiple of k (its
        alignment checked), where `of` would find them in its index (k = 2, 4, 8 or 16, two lanes or more, a table of
        `size` entries holding whole words), without that index; else None."""
        if k not in _BYTES or size % k or len(offsets) < 2:
            return None
        return Words(offsets // k, k)

    def index(self) -> np.ndarray:
        """The bytes' flat positions [n, k], as `of` was given them."""
        return self.numbers[:, None] * self.k + _BYTES[self.k]

    def bounds(self) -> tuple[int, int]:
        """[low, high): the least range holding every byte."""
        return int(self.numbers.min()) * self.k, (int(self.numbers.max()) + 1) * self.k

    @staticmethod
    def of(index: np.ndarray, size: int) -> "Words | None":
        """The words of `index` [n, k] where each row is one aligned word (a plain st.global.b32, .v2, .v4) and a
        table of `size` entries holds whole words, else None."""
        n, k = index.shape
        if k not in _BYTES or size % k or n < 2:
            return None
        first = index[:, 0]
        if any_set(first % k) or not equal_arrays(index, first[:, None] + _BYTES[k]):
            return None
        return Words(first // k, k)

    def _items(self, table: np.ndarray) -> np.ndarray | None:
        item = _WORD_ITEMS.get(self.k * table.itemsize)
        return None if item is None else table.view(item)

    def get(self, table: np.ndarray) -> np.ndarray:
        """table[index]: [n, k]."""
        items = self._items(table)
        if items is None:
            return table.reshape(-1, self.k)[self.numbers]
        return items[self.numbers].view(table.dtype).reshape(-1, self.k)

    def put(self, table: np.ndarray, values) -> None:
        """table[index] = values (a scalar, or [n, 1]: one value a word)."""
        items = self._items(table)
        if items is None:
            table.reshape(-1, self.k)[self.numbers] = values
            return
        filled = np.empty((1 if np.ndim(values) == 0 else len(self.numbers), self.k), table.dtype)
        filled[...] = np.asarray(values, table.dtype)  # (cast once a word, then spread over its k entries)
        items[self.numbers] = filled.view(items.dtype)[:, 0]

    def store(self, buffer: np.ndarray, data: np.ndarray) -> None:
        """buffer[index] = data: the bytes `data` [n, k] (uint8) into the byte `buffer`, a word an item (in lane
        order, as the bytes' index assigns them)."""
        item = _WORD_ITEMS[self.k]
        whole = buffer[:len(buffer) - len(buffer) % self.k].view(item)
        whole[self.numbers] = np.ascontiguousarray(data).view(item).reshape(-1)


_BYTES = {k: np.arange(k, dtype=np.int64) for k in (2, 4, 8, 16)}
_WORD_ITEMS = {2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64), 16: np.dtype(np.complex128)}
"""A word's entries as one item, by their bytes (complex128: copied by fancy indexing as raw bits)."""


def is_uniform(values: np.ndarray) -> bool:
    """Whether every element of `values` (not empty) is the same."""
    return bool(values.min() == values.max())
