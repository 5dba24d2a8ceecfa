"""Per-byte record arrays reused by the CTAs of a launch.

A CTA's units keep records per shared byte and per thread pair (`shared_memory`, `happens_before`, `wgmma`): some
twenty arrays, 19 MB for a 214 KB, 384-thread CTA. Allocating them afresh for every CTA costs a page fault per
4 KB page (about 19 ms a CTA, 8% of a flash attention CTA's simulation); refilling the previous CTA's arrays
costs a tenth of it. A `RecordPool` lends arrays to the units of the CTAs it is given to (`full`), and takes
back every array it lent when the launch says those CTAs are done (`reclaim`): the next CTA's units get them
refilled with their initial values, so each CTA starts from the state a fresh allocation gives.
"""

from __future__ import annotations

import numpy as np


class RecordPool:
    """Arrays lent to the CTAs of one launch since the last `reclaim`, and the free ones by (shape, dtype)."""

    def __init__(self) -> None:
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lent: list[np.ndarray] = []

    def full(self, shape, value, dtype) -> np.ndarray:
        """An array of `shape` and `dtype` filled with `value`, as `np.full` gives, lent until `reclaim`."""
        key = (tuple(shape) if isinstance(shape, tuple) else (shape,), np.dtype(dtype))
        free = self._free.get(key)
        if free:
            array = free.pop()
            array.fill(value)
        else:
            array = np.full(shape, value, dtype)
        self._lent.append(array)
        return array

    def reclaim(self) -> None:
        """The CTAs lent arrays so far are done with them (none of their units is used again)."""
        for array in self._lent:
            self._free.setdefault((array.shape, array.dtype), []).append(array)
        self._lent = []


def records(cta, shape, value, dtype) -> np.ndarray:
    """A record array for `cta`'s units: from its launch's pool (`cta.pool`), else newly allocated."""
    pool = getattr(cta, "pool", None)
    return np.full(shape, value, dtype) if pool is None else pool.full(shape, value, dtype)


__all__ = ["RecordPool", "records"]
