"""Per-byte record arrays reused by the CTAs of a launch.

A CTA's units keep records per shared byte and per thread pair (`shared_memory`, `happens_before`, `wgmma`): some
twenty arrays, 19 MB for a 214 KB, 384-thread CTA. Allocating them afresh for every CTA costs a page fault per
4 KB page (about 19 ms a CTA, 8% of a flash attention CTA's simulation); refilling the previous CTA's arrays
costs a tenth of it. A `RecordPool` lends arrays to the units of the CTAs it is given to (`full`), and takes
back every array it lent when the launch says those CTAs are done (`reclaim`): the next CTA's units get them
refilled with their initial values, so each CTA starts from the state a fresh allocation gives. A unit that
knows which part of an array it may have changed says so when it borrows it (`changed`), and only that part is
refilled: a flash attention CTA leaves its generic-write records, its fenced clocks and the producer warpgroup's
wgmma read records as they were lent (11 of a causal 512 x 1 launch's 29 MB of refills). A unit whose records are
read only where it wrote them first (`unset`: shared memory's copy barriers and phases, read only at bytes its
tags say a copy is writing or has written; a global side's fields but its CTA rank, read only where that rank
holds an access) borrows an array as it is, with no refill at all.

A launch of a few CTAs (flash attention at 512 tokens: one batch) never reuses its own pool, so the pools outlive
their launch (`launch_pool`): a launch that ends takes its arrays back and leaves its pool for the next launch,
which refills what it borrows instead of faulting in fresh pages (about 19 ms a launch). One idle pool is kept,
up to `IDLE_POOL_BYTES`; a launch that fails drops its pool (its CTAs' arrays may still be referenced).

The launch's own records (the global-memory race records of its tensors, `global_races`) are lent the same way
for the whole launch (`full(..., launch=True)`): `reclaim` keeps them lent, the launch's end takes them back
(7 MB of fresh pages a launch at 512 tokens before).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

IDLE_POOL_BYTES = 256 << 20
"""The most record memory an idle pool keeps between launches (a larger one is dropped)."""


class RecordPool:
    """Arrays lent to the CTAs of one launch since the last `reclaim`, and the free ones by (shape, dtype), each
    with the bytes of the value it was filled with and the part of it its borrower may have changed."""

    def __init__(self) -> None:
        self._free: dict[tuple, list[tuple[np.ndarray, bytes, object]]] = {}
        self._lent: list[tuple[np.ndarray, bytes, object]] = []
        self._launch: list[tuple[np.ndarray, bytes, object]] = []

    def full(self, shape, value, dtype, launch: bool = False, changed=None) -> np.ndarray:
        """An array of `shape` and `dtype` filled with `value`, as `np.full` gives, lent until `reclaim` (with
        `launch`, until the launch ends: `reclaim(launch=True)`). `changed`: called when the array is taken back,
        the part of it the borrower may have set to something other than `value` (an index of the array; None:
        none of it), so that the next borrower asking for the same value gets it refilled there only (without
        `changed`, all of it is refilled). A free array already holding the value asked for is lent first."""
        key = (tuple(shape) if isinstance(shape, tuple) else (shape,), np.dtype(dtype))
        filled = np.full(1, value, dtype).tobytes()
        free = self._free.get(key)
        if free:
            index = next((i for i in range(len(free) - 1, -1, -1) if free[i][1] == filled), len(free) - 1)
            array, was, dirty = free.pop(index)
            if was != filled or dirty is Ellipsis:
                array.fill(value)
            elif dirty is not None:
                array[dirty] = value
        else:
            array = np.full(shape, value, dtype)
        (self._launch if launch else self._lent).append((array, filled, changed))
        return array

    def unset(self, shape, dtype, launch: bool = False) -> np.ndarray:
        """An array of `shape` and `dtype` whose values are unspecified (as `np.empty` gives), lent until `reclaim`
        (`launch` as `full`'s), for records its borrower reads only where it wrote them first. A free array that
        any `full` would refill whole is lent first; it is taken back as changed everywhere (refilled whole for
        its next `full`)."""
        key = (tuple(shape) if isinstance(shape, tuple) else (shape,), np.dtype(dtype))
        free = self._free.get(key)
        if free:
            index = next((i for i in range(len(free) - 1, -1, -1) if free[i][2] is Ellipsis), len(free) - 1)
            array = free.pop(index)[0]
        else:
            array = np.empty(shape, dtype)
        (self._launch if launch else self._lent).append((array, b"", None))  # no value: a `full` refills it whole
        return array

    def reclaim(self, launch: bool = False) -> None:
        """The CTAs lent arrays so far are done with them (none of their units is used again); with `launch`, so
        is the launch with its own records."""
        for array, filled, changed in self._lent + (self._launch if launch else []):
            dirty = Ellipsis if changed is None else changed()
            self._free.setdefault((array.shape, array.dtype), []).append((array, filled, dirty))
        self._lent = []
        if launch:
            self._launch = []

    @property
    def nbytes(self) -> int:
        """The bytes of every array the pool holds, lent or free."""
        return sum(entry[0].nbytes for entries in (self._lent, self._launch, *self._free.values())
                   for entry in entries)


_idle: list[RecordPool] = []
_idle_lock = threading.Lock()


@contextmanager
def launch_pool(enabled: bool = True) -> Iterator[RecordPool | None]:
    """The pool of one launch (None if not `enabled`: a launch with listeners, which may keep a CTA's state): the
    idle pool an earlier launch left, else a new one. When the launch ends, the pool takes back what it lent and
    is left for the next launch; a launch that raises drops it."""
    if not enabled:
        yield None
        return
    with _idle_lock:
        pool = _idle.pop() if _idle else RecordPool()
    yield pool
    pool.reclaim(launch=True)
    if pool.nbytes <= IDLE_POOL_BYTES:
        with _idle_lock:
            _idle[:] = [pool]


def records(cta, shape, value, dtype, changed=None) -> np.ndarray:
    """A record array for `cta`'s units: from its launch's pool (`cta.pool`; `changed` as `RecordPool.full`
    takes it), else newly allocated."""
    pool = getattr(cta, "pool", None)
    return np.full(shape, value, dtype) if pool is None else pool.full(shape, value, dtype, changed=changed)


def unset_records(cta, shape, dtype) -> np.ndarray:
    """A record array for `cta`'s units whose values are unspecified, for records read only where the unit wrote
    them first: from its launch's pool (`RecordPool.unset`), else newly allocated (`np.empty`)."""
    pool = getattr(cta, "pool", None)
    return np.empty(shape, dtype) if pool is None else pool.unset(shape, dtype)


__all__ = ["IDLE_POOL_BYTES", "RecordPool", "launch_pool", "records", "unset_records"]
