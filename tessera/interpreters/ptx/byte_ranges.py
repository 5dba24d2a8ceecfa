"""Disjoint ranges of `Machine.shared` bytes with a value each, found by bisection (`ByteRanges`): how the PTX
executor keeps what one asynchronous copy did to a whole range (`AsyncTracker.landed_ranges`, the boxes that
landed whole; `AsyncTracker.tag_ranges`, a box's tags not written per byte), and `byte_bounds`, the bounds of
the bytes an access names."""

from __future__ import annotations

import bisect

import numpy as np

from tessera.interpreters.truth import all_set


class ByteRanges:
    """Disjoint ranges [start, stop), each with a value: `ranges` (start -> (stop, value)) and `starts`, their
    starts ascending. A shared memory holds a handful of them (a ring's slots in each CTA of a batch)."""

    __slots__ = ("ranges", "starts")

    def __init__(self):
        self.ranges: dict[int, tuple[int, object]] = {}
        self.starts: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.starts)

    def put(self, start: int, stop: int, value) -> None:
        """Keep [start, stop) with `value`, replacing the range at `start` (the caller dropped any other it meets)."""
        if start not in self.ranges:
            bisect.insort(self.starts, start)
        self.ranges[start] = (stop, value)

    def pop(self, start: int) -> tuple[int, object]:
        """(stop, value) of the range at `start`, no longer kept."""
        del self.starts[bisect.bisect_left(self.starts, start)]
        return self.ranges.pop(start)

    def meeting(self, low: int, high: int) -> list[int]:
        """The starts of the ranges holding a byte of [low, high), ascending."""
        starts, ranges, found = self.starts, self.ranges, []
        for start in starts[max(bisect.bisect_right(starts, low) - 1, 0):]:
            if start >= high:
                break
            if ranges[start][0] > low:
                found.append(start)
        return found

    def covering(self, low: int, high: int) -> list | None:
        """The values of the ranges, in order, when together they hold every byte of [low, high) (non-empty);
        else None."""
        starts = self.starts
        if high <= low or not starts:
            return None
        first = max(bisect.bisect_right(starts, low) - 1, 0)
        stop, value = self.ranges[starts[first]]
        if starts[first] <= low and stop >= high:  # (one range holds them all: a K step inside one box)
            return [value]
        covered, found, ranges = low, [], self.ranges
        for start in starts[first:]:
            stop, value = ranges[start]
            if stop <= covered:
                continue
            if start > covered:
                return None
            found.append(value)
            covered = stop
            if covered >= high:
                return found
        return None

    def holding(self, low: int, high: int) -> tuple | None:
        """The ranges that together hold every byte of [low, high) (non-empty), in order, as their (stop, value)
        entries, else None: the ranges whose values `covering` returns."""
        starts = self.starts
        i = bisect.bisect_right(starts, low) - 1
        if i < 0:
            return None
        ranges = self.ranges
        entry = ranges[starts[i]]
        if entry[0] >= high:  # (one range holds them all: a K step inside one box)
            return (entry,)
        if entry[0] <= low:
            return None
        found = [entry]
        for start in starts[i + 1:]:
            if start != entry[0]:  # a gap (the ranges are disjoint)
                return None
            entry = ranges[start]
            found.append(entry)
            if entry[0] >= high:
                return tuple(found)
        return None

    def forget(self, bounds: list[tuple[int, int]]) -> None:
        """The ranges holding a byte of some [low, high) of `bounds` are no longer kept."""
        if self.starts:
            for low, high in bounds:
                for start in self.meeting(low, high):
                    self.pop(start)


def with_range(ranges: list[tuple[int, int]], low: int, high: int, limit: int = 64) -> list[tuple[int, int]]:
    """`ranges` ([low, high) each, disjoint) with [low, high) added, merged with those it meets; past `limit` ranges,
    the one range holding them all (a bound of where something may be: `GlobalOrder.touched`,
    `HappensBefore.w_spans`)."""
    kept = []
    for lo, hi in ranges:
        if lo <= high and hi >= low:
            low, high = min(lo, low), max(hi, high)
        else:
            kept.append((lo, hi))
    kept.append((low, high))
    return kept if len(kept) <= limit else [(min(lo for lo, _ in kept), max(hi for _, hi in kept))]


def meets_any(ranges: list[tuple[int, int]], low: int, high: int) -> bool:
    """Whether [low, high) meets one of `ranges`."""
    return any(lo < high and hi > low for lo, hi in ranges)


def byte_bounds(where: np.ndarray | slice | list[slice]) -> list[tuple[int, int]]:
    """[low, high) of a range, of each range of a list, or of the bytes of an index array (their hull)."""
    if isinstance(where, list):
        return [(span.start, span.stop) for span in where]
    if isinstance(where, slice):
        return [(where.start, where.stop)]
    if not where.size:
        return []
    return [(int(where.min()), int(where.max()) + 1)]


def cta_hulls(flat: np.ndarray, size: int) -> list[slice] | None:
    """The hull [lowest, highest byte] of each CTA's bytes of `flat` (flat shared bytes, windows of `size`
    bytes), as ranges in CTA order: for the bytes of an access of a batch's CTAs row by row (each byte's CTA
    non-decreasing, at most 16 CTAs); None otherwise. A hull holds its CTA's bytes and no other CTA's: a range
    holding no record of a kind holds none at a byte of `flat` (a check's fast path; a hull holding one decides
    nothing, the bytes do)."""
    cta = flat // max(size, 1)
    step = cta[1:] - cta[:-1]
    if not len(cta) or not all_set(step >= 0):
        return None
    starts = np.flatnonzero(step)  # (each CTA's first byte but the first's, one before)
    if len(starts) > 16:
        return None
    starts = [0, *(starts + 1).tolist()]
    lows, highs = np.minimum.reduceat(flat, starts).tolist(), np.maximum.reduceat(flat, starts).tolist()
    return [slice(low, high + 1) for low, high in zip(lows, highs)]


__all__ = ["ByteRanges", "byte_bounds", "cta_hulls", "meets_any", "with_range"]
