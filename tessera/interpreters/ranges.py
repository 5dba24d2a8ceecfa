"""Index arrays as slices where they are consecutive, and told distinct without a sort: shared by the PTX
executor and the CTA simulator.

Both simulators keep their state as NumPy arrays over threads (lanes) and address the threads of one instruction,
a warpgroup or a CTA with index arrays. Where those indices are consecutive (the usual: a warpgroup, a CTA's
consumers), a slice selects the same elements as a view, so reading and writing through it costs no gather or
scatter. Where a store's byte positions lie in a narrow span (a tile's rows), marking them in a table over it
tells whether two threads write one byte in a linear pass (`marked`).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.truth import all_set


def consecutive(lanes: np.ndarray):
    """`lanes` (ascending, distinct, not empty) as a slice where they are consecutive (a view: no copy), else as
    they are."""
    first, last = int(lanes[0]), int(lanes[-1])
    return slice(first, last + 1) if last - first + 1 == len(lanes) and (len(lanes) < 2 or lanes[1] > first) \
        else lanes


def lane_block(lanes: np.ndarray, threads: int) -> tuple[slice, slice] | None:
    """(CTA slots, threads within each) where `lanes` (ascending, distinct; lane = slot * `threads` + thread) are
    the same consecutive threads of consecutive CTAs (a batch's consumer warpgroups), so that an array over lanes
    viewed as [slot, thread, ...] (`reshape(-1, threads, ...)`) holds them as a block, a view; else None."""
    n = len(lanes)
    first, last = int(lanes[0]), int(lanes[-1])
    slot, offset = divmod(first, threads)
    block = None
    if last - first + 1 == n:
        if offset + n <= threads:
            block = slice(slot, slot + 1), slice(offset, offset + n)
        elif offset == 0 and n % threads == 0:
            block = slice(slot, slot + n // threads), slice(0, threads)
    else:
        run = int(np.argmax(np.diff(lanes) != 1)) + 1  # the first CTA's lanes
        ctas = n // run
        if ctas * run == n and offset + run <= threads and last == (slot + ctas - 1) * threads + offset + run - 1:
            rows = lanes.reshape(ctas, run)  # each row consecutive (ascending, distinct: it spans run - 1), a CTA on
            if all_set(rows[:, -1] - rows[:, 0] == run - 1) and all_set(np.diff(rows[:, 0]) == threads):
                block = slice(slot, slot + ctas), slice(offset, offset + run)
    return block


def distinct_ascending(values: np.ndarray) -> np.ndarray:
    """The distinct values of a non-decreasing array (a CTA slot or warp per lane of lanes that ascend), ascending:
    `np.unique` without its sort or hash table (some twenty times the time on a thousand lanes)."""
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def as_slice(positions) -> slice | np.ndarray:
    """`positions` (not empty, in any order: a plan's gather) as a slice where each is one more than the one
    before it, else as an int64 array. `consecutive` is the cheaper test for indices known to ascend."""
    positions = np.asarray(positions, np.int64)
    if all_set(np.diff(positions) == 1):
        return slice(int(positions[0]), int(positions[0]) + len(positions))
    return positions


def marked(positions: np.ndarray, low: int, high: int) -> np.ndarray:
    """A table over [low, high) (which holds every one of `positions`) with `positions` marked True: they are
    distinct where as many are marked as there are positions. A linear pass, where a sort takes n log n (some 15
    times the time at 4,096 positions over a span of 30 times that); the caller bounds the span."""
    marks = np.zeros(high - low, bool)
    marks[positions - low] = True
    return marks


__all__ = ["as_slice", "consecutive", "distinct_ascending", "lane_block", "marked"]
