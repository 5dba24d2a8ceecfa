"""Register pressure: the peak of 32-bit registers live at one position, overall and per region of an op
(branch-aware: the regions of an `scf.if` are alternatives; package docstring)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.ir import Operation, Region

from tessera.regalloc.liveness import _Liveness, _merge_ranges


def _pressure(ranges: dict, root_names: dict, widths: dict) -> tuple[int, int, list[tuple[str, int]]]:
    """The largest number of 32-bit registers live at one position, where, and which values (by name), given
    the 32-bit registers each group costs (`widths`)."""
    events = defaultdict(int)
    for root, spans in ranges.items():
        for start, end in spans:
            events[start] += widths[root]
            events[end + 1] -= widths[root]
    peak, peak_position, current = 0, 0, 0
    for position in sorted(events):
        current += events[position]
        if current > peak:
            peak, peak_position = current, position
    at_peak: dict[str, int] = defaultdict(int)
    for root, spans in ranges.items():
        if any(start <= peak_position <= end for start, end in spans):
            at_peak[root_names.get(root) or "?"] += widths[root]
    return peak, peak_position, sorted(at_peak.items(), key=lambda kv: -kv[1])


@dataclass
class _PressureMap:
    """The liveness behind an allocation, kept to answer `Allocation.region_pressure`. Pressure per region is
    measured on a branch-aware liveness (module docstring), computed on the first question."""

    live: _Liveness
    root: Callable[[int], int]  # element -> the root of its group
    ranges: dict
    widths: dict
    _branch_aware: dict | None = None

    def region_pressure(self, op: Operation) -> list[int]:
        if op not in self.live.position:
            raise ValueError(f"{op.name} is not an op of @{self.live.fn.sym_name.data}")
        if self._branch_aware is None:
            self._branch_aware = self._branch_aware_ranges()
        peaks = []
        for span in (self._span(region) for region in op.regions):
            if span is None:
                peaks.append(0)
                continue
            first, last = span
            events = defaultdict(int)
            for root, spans in self._branch_aware.items():
                for start, end in spans:
                    if start <= last and end >= first:
                        events[max(start, first)] += self.widths[root]
                        events[min(end, last) + 1] -= self.widths[root]
            peak = current = 0
            for position in sorted(events):
                current += events[position]
                peak = max(peak, current)
            peaks.append(peak)
        return peaks

    def _span(self, region: Region) -> tuple[int, int] | None:
        """First and last position inside `region`; None if it has no ops."""
        blocks = [block for block in region.blocks if block.first_op is not None]
        if not blocks:
            return None
        return self.live.position[blocks[0].first_op], self.live.end[blocks[-1].last_op]

    def _branch_aware_ranges(self) -> dict:
        """Each group's positions, where a read inside one region of an `scf.if` keeps the value live up to
        it only outside the if's other regions (from those, the read cannot follow), unless a loop around the
        if that the value is defined outside of leads from one region to the other."""
        live = self.live
        op_at = {position: op for op, position in live.position.items()}
        op_at.update({stop: loop for loop, _, stop in live.loops})  # the latch reads the bound and the step
        alternatives: dict = {}
        ranges: dict = defaultdict(list)
        for value, elements in live.elements():  # every element of a value has the same spans
            defined = live.defs[value]
            spans = [(defined, defined)]
            for use in live.uses.get(value, []):
                block = op_at[use].parent_block()  # every op of a block has the same alternatives
                if block not in alternatives:
                    alternatives[block] = self._alternatives(op_at[use])
                reach = [(defined, live.end_of(defined, use))]
                for others, loop in alternatives[block]:
                    if loop is None or loop[0] <= defined <= loop[1]:
                        for other in others:
                            reach = _subtract(reach, other)
                spans += reach
            spans += live.holds.get(value, ())
            for element in elements:
                ranges[self.root(element)] += spans
        return {root: _merge_ranges(spans) for root, spans in ranges.items()}

    def _alternatives(self, op: Operation) -> list[tuple[list, tuple[int, int] | None]]:
        """For each `scf.if` around `op`: the spans of its regions that do not hold `op`, and the span of the
        innermost loop around the if (None if there is none)."""
        found = []
        child, parent = op, op.parent_op()
        while parent is not None and not isinstance(parent, func.FuncOp):
            if isinstance(parent, scf.IfOp):
                others = [self._span(r) for r in parent.regions if not r.is_ancestor(child)]
                loop = parent.parent_op()
                while loop is not None and not isinstance(loop, scf.ForOp | scf.WhileOp | func.FuncOp):
                    loop = loop.parent_op()
                in_loop = isinstance(loop, scf.ForOp | scf.WhileOp)
                found.append(([s for s in others if s is not None],
                              (self.live.position[loop], self.live.end[loop]) if in_loop else None))
            child, parent = parent, parent.parent_op()
        return found


def _subtract(ranges: list[tuple[int, int]], cut: tuple[int, int]) -> list[tuple[int, int]]:
    """`ranges` without the positions of `cut`."""
    a, b = cut
    kept = []
    for start, end in ranges:
        if end < a or start > b:
            kept.append((start, end))
            continue
        if start < a:
            kept.append((start, a - 1))
        if end > b:
            kept.append((b + 1, end))
    return kept
