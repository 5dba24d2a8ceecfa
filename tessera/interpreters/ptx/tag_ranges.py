"""A TMA box's asynchrony tags kept as a range in the PTX executor (see `asynchrony`, whose docstring has the
model): `TagRanges`, a base class of `AsyncTracker`.

A shared-memory byte's tag is its state (`PLAIN`, `FLIGHT`, `LANDED`), its copy (in flight) or barrier instance
(landed), and the phase it counts towards (`AsyncTracker.state`, `tag`, `phase`: 9 bytes of bookkeeping per
byte). A copy that fills a range (a TMA box) sets the tags of its whole range at issue and again at landing,
and nothing in a pipelined main loop reads them byte by byte: the refill's check that no byte is in flight and
the wgmma's reads (`landed_ranges`) look at the box as a whole. So such a range's tags are kept as one entry,
`tag_ranges` (start -> (stop, state, tag, phase)), and written out per byte only where something reads or
writes tags byte by byte (`write_out`): a generic access (ld/st/atom on shared memory), a cp.async, a copy
that fills no range or overlaps a kept one in part, a check that reads per-byte tags, a report.

Invariant: the tags of a byte inside a kept range are the range's, whatever the per-byte arrays hold there
(they are stale until written out); outside every kept range they are the arrays'. The kept ranges are
disjoint. Every check decides from the same tags either way, so it decides and reports the same.
"""

from __future__ import annotations

import bisect

import numpy as np

from tessera.interpreters.ptx.async_copies import FLIGHT, LANDED


class TagRanges:
    """The tags of whole copied ranges of `AsyncTracker` (its base class: the per-byte tags are `AsyncTracker`'s;
    `reset` empties `tag_ranges` and `tag_starts`)."""

    def keep_tags(self, span: slice, state: int, tag: int, phase: int = 0) -> None:
        """The bytes of `span` now have the tags (`state`, `tag`, `phase`): kept as one range. A kept range
        inside `span` is dropped, one reaching past it is written out first (its bytes outside keep their tags)."""
        low, high = span.start, span.stop
        if high <= low:
            return
        ranges, starts = self.tag_ranges, self.tag_starts
        if ranges:
            for start in self._tag_overlaps(low, high):
                if start < low or ranges[start][0] > high:
                    self._write_range(start)
                else:
                    del ranges[start]
                    starts.remove(start)
        if low not in ranges:
            bisect.insort(starts, low)
        ranges[low] = (high, state, tag, phase)

    def write_out(self, where: np.ndarray | slice | list[slice]) -> None:
        """Something reads or writes the tags of the bytes `where` (an index array, a range, or ranges) byte by
        byte: the kept ranges holding some of them (by their bounds) are written into the per-byte arrays and
        no longer kept."""
        if not self.tag_ranges:
            return
        for low, high in byte_bounds(where):
            for start in self._tag_overlaps(low, high):
                self._write_range(start)

    def flight_in(self, span: slice) -> bool:
        """Whether some byte of the range `span` is `FLIGHT`: from the kept ranges where they cover it, else
        from the bytes (the kept ranges meeting it written out first)."""
        if not self.tagged:
            return False
        cover = self.tags_covering(span)
        if cover is not None:
            return any(state == FLIGHT for state, _, _ in cover)
        self.write_out(span)
        return bool((self.state[span] == FLIGHT).any())

    def tags_covering(self, span: slice) -> list[tuple[int, int, int]] | None:
        """(state, tag, phase) of each kept range when kept ranges cover every byte of `span` (non-empty), in
        order; None otherwise (the bytes decide)."""
        ranges = self.tag_ranges
        if not ranges or span.stop <= span.start:
            return None
        covered, found = span.start, []
        starts = self.tag_starts
        for start in starts[max(bisect.bisect_right(starts, covered) - 1, 0):]:
            stop, state, tag, phase = ranges[start]
            if stop <= covered:
                continue
            if start > covered:
                return None
            found.append((state, tag, phase))
            covered = stop
            if covered >= span.stop:
                return found
        return None

    def _tag_overlaps(self, low: int, high: int) -> list[int]:
        """The starts of the kept ranges meeting [low, high)."""
        starts, ranges = self.tag_starts, self.tag_ranges
        found = []
        for start in starts[max(bisect.bisect_right(starts, low) - 1, 0):]:
            if start >= high:
                break
            if ranges[start][0] > low:
                found.append(start)
        return found

    def _write_range(self, start: int) -> None:
        """The kept range at `start` written into the per-byte arrays, and no longer kept."""
        stop, state, tag, phase = self.tag_ranges.pop(start)
        self.tag_starts.remove(start)
        self.state[start:stop] = state
        self.tag[start:stop] = tag
        if state == LANDED:  # (a byte's phase means something only once it landed)
            self.phase[start:stop] = phase


def byte_bounds(where: np.ndarray | slice | list[slice]) -> list[tuple[int, int]]:
    """[low, high) of a range, of each range of a list, or of the bytes of an index array (their hull)."""
    if isinstance(where, list):
        return [(span.start, span.stop) for span in where]
    if isinstance(where, slice):
        return [(where.start, where.stop)]
    if not where.size:
        return []
    return [(int(where.min()), int(where.max()) + 1)]


__all__ = ["TagRanges", "byte_bounds"]
