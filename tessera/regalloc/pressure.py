"""Register pressure: the peak of 32-bit registers live at one position, overall and per region of an op
(branch-aware: the regions of an `scf.if` are alternatives; package docstring), and what is live there: each
value with the op that defines it, its source location and its registers (`PressurePeak`), so that a kernel
refused for its pressure says what to change."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.ir import BlockArgument, Operation, Region, SSAValue

from tessera.ir.diagnostics import source_location
from tessera.regalloc.liveness import Liveness, merge_ranges


@dataclass(frozen=True)
class LiveValue:
    """A value live at a pressure peak: its name (`%?` for an unnamed one), the op that defines it (for a
    block argument: what it is), where that op comes from in the Tile IR source (None when unknown), and the
    32-bit registers it holds there."""

    name: str
    op: str
    location: str | None
    registers: int

    def __str__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        unit = "register" if self.registers == 1 else "registers"
        return f"{self.name} ({self.registers} {unit}, {self.op}{where})"


class PressurePeak:
    """The largest number of 32-bit registers live at one position, the op there (name and source location),
    and the values live there, most registers first. `op`, `location` and `live` may be given as a function
    (`details`) that returns them, called on first access: a compile that fits its budget never asks, and
    naming every live value with its source location was a tenth of the register allocation."""

    __slots__ = ("registers", "position", "_details", "_found")

    def __init__(self, registers: int, position: int, op: str | None = None, location: str | None = None,
                 live: tuple[LiveValue, ...] = (), *,
                 details: Callable[[], tuple[str, str | None, tuple[LiveValue, ...]]] | None = None):
        self.registers = registers
        self.position = position
        self._details = details
        self._found = None if details is not None else (op, location, tuple(live))

    def _get(self) -> tuple[str, str | None, tuple[LiveValue, ...]]:
        if self._found is None:
            self._found, self._details = self._details(), None
        return self._found

    @property
    def op(self) -> str:
        """The name of the op at the peak."""
        return self._get()[0]

    @property
    def location(self) -> str | None:
        """Where that op comes from in the Tile IR source (None when unknown)."""
        return self._get()[1]

    @property
    def live(self) -> tuple[LiveValue, ...]:
        """The values live at the peak, most registers first."""
        return self._get()[2]

    def __repr__(self) -> str:
        return f"PressurePeak(registers={self.registers}, position={self.position}, op={self.op!r})"

    def describe(self, limit: int = 12) -> str:
        """`at file:line:col (op): %a (64 registers, op at file:line:col), ...` (the first `limit` values)."""
        where = f"{self.location} ({self.op})" if self.location else self.op
        listing = ", ".join(str(v) for v in self.live[:limit])
        more = f", and {len(self.live) - limit} more" if len(self.live) > limit else ""
        return f"at {where}, live: {listing}{more}"


def peak_pressure(ranges: dict, widths: dict, first: int | None = None, last: int | None = None) -> tuple[int, int]:
    """The largest number of 32-bit registers live at one position (within [first, last] if given), and the
    first position where it is reached, given the registers each group costs (`widths`)."""
    events = defaultdict(int)
    for root, spans in ranges.items():
        for start, end in spans:
            if first is not None and (end < first or start > last):
                continue
            events[start if first is None else max(start, first)] += widths[root]
            events[(end if last is None else min(end, last)) + 1] -= widths[root]
    peak, peak_position, current = 0, first or 0, 0
    for position in sorted(events):
        current += events[position]
        if current > peak:
            peak, peak_position = current, position
    return peak, peak_position


@dataclass
class PressureMap:
    """The liveness behind an allocation, kept to answer `Allocation.region_pressure`. Pressure per region is
    measured on a branch-aware liveness (module docstring), computed on the first question."""

    live: Liveness
    roots: list[int]  # element -> the root of its group (a value's elements are a slice of it)
    ranges: dict
    widths: dict
    _branch_aware: dict | None = None
    _values_of: dict | None = None
    _op_at_position: dict | None = None
    _region_peaks: dict | None = None  # op -> its regions' peaks (the kernel is unchanged while this map is kept)

    def region_pressure(self, op: Operation) -> list[int]:
        return [peak.registers for peak in self.region_peaks(op)]

    def region_peaks(self, op: Operation) -> list[PressurePeak]:
        """The pressure peak of each region of `op` (an empty region: 0 registers, nothing live). Worked out once
        per op: warp-specialize and hoist-invariant-descriptors both ask about the split of the same kernel."""
        if self._region_peaks is None:
            self._region_peaks = {}
        found = self._region_peaks.get(op)
        if found is None:
            found = self._region_peaks[op] = self._find_region_peaks(op)
        return list(found)

    def _find_region_peaks(self, op: Operation) -> list[PressurePeak]:
        if op not in self.live.position:
            raise ValueError(f"{op.name} is not an op of @{self.live.fn.sym_name.data}")
        if self._branch_aware is None:
            self._branch_aware = self._branch_aware_ranges()
        peaks = []
        for span in (self._span(region) for region in op.regions):
            if span is None:
                peaks.append(PressurePeak(0, self.live.position[op], op.name, None, ()))
                continue
            peak, position = peak_pressure(self._branch_aware, self.widths, *span)
            peaks.append(self.describe(peak, position, self._branch_aware))
        return peaks

    def kernel_peak(self) -> PressurePeak:
        """The pressure peak of the whole kernel (program-order liveness, as allocated)."""
        return self.describe(*peak_pressure(self.ranges, self.widths), self.ranges)

    def describe(self, peak: int, position: int, ranges: dict) -> PressurePeak:
        """The `PressurePeak` of `peak` registers at `position`: each register group live there is counted
        for the value of the group that is live there itself (defined at or before `position` and read at or
        after it, or held by a wgmma), the latest defined such value if several are. What is live is found
        when first asked (`PressurePeak`)."""
        return PressurePeak(peak, position, details=lambda: self._details(position, ranges))

    def _details(self, position: int, ranges: dict) -> tuple[str, str | None, tuple[LiveValue, ...]]:
        """(op name, its source location, the values live) at `position` (`describe`)."""
        live = self.live
        if self._values_of is None:
            self._values_of = defaultdict(list)
            for value, elements in live.elements():
                for group in self.roots[elements.start:elements.stop]:
                    self._values_of[group].append(value)
        registers: dict = defaultdict(int)
        for root, spans in ranges.items():
            if any(start <= position <= end for start, end in spans):
                registers[self._value_at(root, position)] += self.widths[root]
        # Values of one name, op and line (the A fragments a lowering shuffles out of one tile) are listed once.
        merged: dict = defaultdict(lambda: [0, 0])
        for value, n in registers.items():
            if n:
                entry = merged[(f"%{value.name_hint or '?'}", *self._origin(value))]
                entry[0] += 1
                entry[1] += n
        found = [LiveValue(name if count == 1 else f"{count} x {name}", op, location, n)
                 for (name, op, location), (count, n) in merged.items()]
        op = self._op_at(position)
        return op.name, source_location(op), tuple(sorted(found, key=lambda v: -v.registers))

    def _value_at(self, root: int, position: int) -> SSAValue:
        live = self.live
        values = self._values_of[root]
        defined = [v for v in values if live.defs[v] <= position] or values

        def covers(value: SSAValue) -> bool:
            read = live.read_end(value)
            held = live.holds.get(value, ())
            return (read is not None and read >= position) or any(a <= position <= b for a, b in held)

        return max([v for v in defined if covers(v)] or defined, key=lambda v: live.defs[v])

    def _origin(self, value: SSAValue) -> tuple[str, str | None]:
        """What defines `value` (an op's name; for a block argument, what the block is) and where from."""
        if isinstance(value, BlockArgument):
            owner = value.owner.parent_op()
            if isinstance(owner, func.FuncOp):
                return "kernel argument", None
            return f"loop-carried value of {owner.name}", source_location(owner)
        return value.owner.name, source_location(value.owner)

    def _op_at(self, position: int) -> Operation:
        """The op at `position` (a loop for the position of its latch)."""
        if self._op_at_position is None:
            self._op_at_position = {p: o for o, p in self.live.position.items()}
            self._op_at_position.update({stop: loop for loop, _, stop in self.live.loops})
        return self._op_at_position.get(position) or self.live.fn

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
        alternatives: dict = {}  # block -> `_alternatives` of its ops
        around_use: dict = {}  # position of a use -> the alternatives of its op's block
        ranges: dict = {}  # root -> the merged spans of its values (one list, shared by a value's elements)
        several: dict = defaultdict(list)  # root -> the spans of each of its values, where it has more than one
        roots, defs, uses, holds, end_of = self.roots, live.defs, live.uses, live.holds, live.end_of
        for value, elements in live.elements():  # every element of a value has the same spans
            defined = defs[value]
            spans = [(defined, defined)]
            for use in uses.get(value, ()):
                around = around_use.get(use)  # (an int key: a block's hash is a Python call)
                if around is None:
                    user = op_at[use]
                    block = user.parent  # every op of a block has the same alternatives
                    around = alternatives.get(block)
                    if around is None:
                        around = alternatives[block] = self._alternatives(user)
                    around_use[use] = around
                reach = [(defined, end_of(defined, use))]
                for others, loop in around:
                    if loop is None or loop[0] <= defined <= loop[1]:
                        for other in others:
                            reach = _subtract(reach, other)
                spans += reach
            held = holds.get(value)
            spans = merge_ranges(spans + held if held else spans)  # once per value, not per element
            for group in roots[elements.start:elements.stop]:
                if group in ranges:
                    several[group] += spans
                else:
                    ranges[group] = spans
        # A group of several values (registers reused in place) merges their spans; most groups have one.
        for group, spans in several.items():
            ranges[group] = merge_ranges(ranges[group] + spans)
        return ranges

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
