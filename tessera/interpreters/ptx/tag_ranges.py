"""A TMA box's asynchrony tags kept as a range in the PTX executor (see `asynchrony`, whose docstring has the
model): `TagRanges`, a base class of `AsyncTracker`.

A shared-memory byte's tag is its state (`PLAIN`, `FLIGHT`, `LANDED`), its copy (in flight) or barrier instance
(landed), and the phase it counts towards (`AsyncTracker.state`, `tag`, `phase`: 9 bytes of bookkeeping per
byte). A copy that fills a range (a TMA box) sets the tags of its whole range at issue and again at landing,
and nothing in a pipelined main loop reads them byte by byte: the refill's check that no byte is in flight and
the wgmma's reads (`landed_ranges`) look at the box as a whole. So such a range's tags are kept as one entry,
`tag_ranges` (a `ByteRanges` of (state, tag, phase)), and written out per byte only where something reads or
writes tags byte by byte (`write_out`): a generic access (ld/st/atom on shared memory), a cp.async, a copy
that fills no range or overlaps a kept one in part, a check that reads per-byte tags, a report.

Invariant: the tags of a byte inside a kept range are the range's, whatever the per-byte arrays hold there
(they are stale until written out); outside every kept range they are the arrays'. Every check decides from
the same tags either way, so it decides and reports the same.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.async_copies import FLIGHT, LANDED
from tessera.interpreters.ptx.byte_ranges import byte_bounds
from tessera.interpreters.truth import any_set


class TagRanges:
    """The tags of whole copied ranges of `AsyncTracker` (its base class: the per-byte tags are `AsyncTracker`'s;
    `reset` empties `tag_ranges`)."""

    def keep_tags(self, span: slice, state: int, tag: int, phase: int = 0) -> None:
        """The bytes of `span` now have the tags (`state`, `tag`, `phase`): kept as one range. A kept range
        inside `span` is dropped, one reaching past it is written out first (its bytes outside keep their tags)."""
        low, high = span.start, span.stop
        if high <= low:
            return
        kept = self.tag_ranges
        if kept.ranges.get(low, (None,))[0] == high:  # the range itself (a box landing, a slot's refill): it alone
            kept.put(low, high, (state, tag, phase))  # meets it (the kept ranges are disjoint)
            return
        for start in kept.meeting(low, high) if kept else ():
            if start < low or kept.ranges[start][0] > high:
                self._write_range(start)
            else:
                kept.pop(start)
        kept.put(low, high, (state, tag, phase))

    def write_out(self, where: np.ndarray | slice | list[slice]) -> None:
        """Something reads or writes the tags of the bytes `where` (an index array, a range, or ranges) byte by
        byte: the kept ranges holding some of them are written into the per-byte arrays and no longer kept. For
        an index array, a range its bounds meet but none of its bytes holds stays kept (the stores of many
        CTAs' lanes: each CTA's bytes lie in its own window, and the bounds span the windows between)."""
        kept = self.tag_ranges
        if not kept:
            return
        if isinstance(where, np.ndarray):  # the range each byte falls in (by its start), if any: one search
            starts = np.array(kept.starts, np.int64)
            stops = np.array([kept.ranges[start][0] for start in kept.starts], np.int64)
            flat = where.reshape(-1)
            at = np.searchsorted(starts, flat, side="right") - 1
            inside = flat < stops[at]
            inside &= at >= 0  # (a byte below every range: `at` -1 read the last stop above)
            if any_set(inside):
                hit = np.zeros(len(starts), bool)
                hit[at[inside]] = True
                for start in starts[hit].tolist():
                    self._write_range(start)
            return
        for low, high in byte_bounds(where):
            for start in kept.meeting(low, high):
                self._write_range(start)

    def flight_in(self, span: slice) -> bool:
        """Whether some byte of the range `span` is `FLIGHT`: from the kept ranges where they cover it, else
        from the bytes (the kept ranges meeting it written out first)."""
        if not self.tagged:
            return False
        cover = self.tag_ranges.covering(span.start, span.stop)
        if cover is not None:
            return any(state == FLIGHT for state, _, _ in cover)
        self.write_out(span)
        return any_set(self.state[span] == FLIGHT)

    def _write_range(self, start: int) -> None:
        """The kept range at `start` written into the per-byte arrays, and no longer kept."""
        stop, (state, tag, phase) = self.tag_ranges.pop(start)
        self.state[start:stop] = state
        self.tag[start:stop] = tag
        if state == LANDED:  # (a byte's phase means something only once it landed)
            self.phase[start:stop] = phase


__all__ = ["TagRanges"]
