"""Linear-scan register allocation per class and register space (package docstring), memoized per kernel;
the register groups it allocates come from `groups`."""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, defaultdict
from collections.abc import Callable

from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tessera.dialects import sm90
from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.sm90 import facts

from tessera.regalloc.groups import group_intervals, register_groups
from tessera.regalloc.liveness import Liveness, is_if, is_wgmma, merge_ranges
from tessera.regalloc.pressure import PressurePeak, PressureMap, peak_pressure
from tessera.regalloc.regroup import kernel_changes, regroup
from tessera.regalloc.uniform import DESCRIPTOR_OPS, UNIFORM_DESCRIPTOR_REGISTERS, uniform_descriptors
from tessera.regalloc.registers import (
    CLASS_PREFIX, CLASS_WIDTH, element_count, immediates, register_class,
)


class RegisterBudgetError(DiagnosticException):
    """The values live at the peak need more registers than the budget. `summary` says it in a few words
    (the registers needed and the budget), the message also where the peak is and what is live there."""

    def __init__(self, message: str, summary: str | None = None):
        super().__init__(message)
        self.summary = summary or message


class Allocation:
    """Register names of each value (one per element), the registers used per class, and the pressure.

    The names and counts may be given as a function (`assign`) that returns both, called on first access: a
    pass that asks only for the pressure of a kernel it then changes (warp-specialize's budgets, before
    hoist-invariant-descriptors moves descriptors) never pays for the linear scan and the naming (a quarter of
    an allocation: 20 of 77 ms for the flash d128 forward). The names are worked out from the liveness taken
    when the kernel was allocated, so they are asked for before the kernel changes (`allocate_registers` on a
    changed kernel allocates it again)."""

    def __init__(self, names: dict[SSAValue, list[str]] | None = None, counts: dict[str, int] | None = None,
                 peak: int = 0, peak_position: int = 0, at_peak: PressurePeak | None = None,
                 _pressure_map: PressureMap | None = None, *,
                 assign: Callable[[], tuple[dict, dict]] | None = None,
                 find_peak: Callable[[], PressurePeak] | None = None):
        self._names, self._counts, self._assign = names, counts, assign
        self._peak, self._peak_position, self._at_peak = peak, peak_position, at_peak
        self._find_peak = find_peak
        self._pressure_map = _pressure_map

    def _assigned(self) -> None:
        if self._assign is not None:
            (self._names, self._counts), self._assign = self._assign(), None

    def _peaked(self) -> None:
        # The kernel's peak is found when first asked for: warp-specialize asks only for its regions' peaks
        # (`region_peaks`) of a kernel that hoist-invariant-descriptors then changes.
        if self._find_peak is not None:
            at_peak, self._find_peak = self._find_peak(), None
            self._peak, self._peak_position, self._at_peak = at_peak.registers, at_peak.position, at_peak

    @property
    def peak(self) -> int:
        """The most 32-bit registers per thread live at one position of the kernel (program order)."""
        self._peaked()
        return self._peak

    @property
    def peak_position(self) -> int:
        """The first position where `peak` is reached."""
        self._peaked()
        return self._peak_position

    @property
    def at_peak(self) -> PressurePeak | None:
        """Where the peak is and what is live there (`PressurePeak.describe` says it in words)."""
        self._peaked()
        return self._at_peak

    @property
    def names(self) -> dict[SSAValue, list[str]]:
        """Register names per element; for a constant used only where PTX takes immediates, its immediates
        (`0f3FB8AA3B`, `-7`): such a constant needs no instruction and no register."""
        self._assigned()
        return self._names

    @property
    def counts(self) -> dict[str, int]:
        """Registers used per class (`f`, `r`, `rd`, `p`)."""
        self._assigned()
        return self._counts

    def __repr__(self) -> str:
        return f"Allocation(peak={self.peak}, peak_position={self.peak_position})"

    def __getstate__(self) -> dict:
        self._assigned()  # a copy or a pickle carries the names and the peak, not the functions that work them out
        self._peaked()
        return dict(self.__dict__)

    @property
    def live_at_peak(self) -> list[tuple[str, int]]:
        """(name, registers) of each value live at the peak, most registers first (`at_peak` says more)."""
        return [(v.name.lstrip("%"), v.registers) for v in self.at_peak.live] if self.at_peak else []

    def declarations(self) -> dict[str, int]:
        """Registers to declare per class (`.reg .f32 %f<N>;`)."""
        return dict(self.counts)

    def region_pressure(self, op: Operation) -> list[int]:
        """For each region of `op` (then and else of an `scf.if`, the body of a loop), the peak of 32-bit
        registers live at one position inside it (module docstring); 0 for a region with no ops."""
        if self._pressure_map is None:
            raise ValueError("this allocation carries no liveness (it was not made by allocate_registers)")
        return self._pressure_map.region_pressure(op)

    def region_peaks(self, op: Operation) -> list[PressurePeak]:
        """As `region_pressure`, with where each region's peak is and what is live there."""
        if self._pressure_map is None:
            raise ValueError("this allocation carries no liveness (it was not made by allocate_registers)")
        return self._pressure_map.region_peaks(op)


SPILL_ATTR = "sm90.spilled_registers"
"""On a Target IR kernel that `allocate-registers{spill=true}` let exceed the register budget: how many of its
peak's 32-bit registers per thread are past the budget, left to ptxas (which spills them to local memory)."""


def allocate_registers(fn: func.FuncOp, budget: int | None = None) -> Allocation:
    """Allocate PTX registers for a Target IR kernel (module docstring). Raises RegisterBudgetError naming
    the values live at the peak when the pressure exceeds `budget` 32-bit registers per thread. The default
    budget is 255 (`facts.MAX_REGISTERS_PER_THREAD`), or none for a kernel carrying `SPILL_ATTR` (its spills
    were accepted once, by `allocate-registers{spill=true}`: re-allocating it to print or run it does not
    refuse it again)."""
    allocation = _allocate(fn)
    if budget is None:
        budget = allocation.peak if SPILL_ATTR in fn.attributes else facts.MAX_REGISTERS_PER_THREAD
    if allocation.peak > budget:
        from tessera.ir.diagnostics import source_location

        loc = source_location(fn)
        raise RegisterBudgetError(
            f"{loc + ': ' if loc else ''}@{fn.sym_name.data}: {allocation.peak} registers per thread are live at once, over the budget of "
            f"{budget}; the peak is {allocation.at_peak.describe()}",
            summary=f"{allocation.peak} registers per thread, over the budget of {budget}",
        )
    return allocation


def region_peaks(fn: func.FuncOp, op: Operation) -> list[PressurePeak]:
    """`Allocation.region_peaks(op)` of `fn`'s allocation, with no budget check."""
    return _allocate(fn).region_peaks(op)


def region_pressure(fn: func.FuncOp, op: Operation) -> list[int]:
    """`Allocation.region_pressure(op)` of `fn`'s allocation, with no budget check (so that a pass can say
    which region is over budget)."""
    return _allocate(fn).region_pressure(op)


_MEMO: OrderedDict[int, tuple[func.FuncOp, tuple, Allocation]] = OrderedDict()
_MEMO_SIZE = 4
"""The last allocations, by kernel: warp-specialize's budgets, allocate-registers and the PTX printer each
allocate the same kernel; the memo hands back the allocation while the kernel is unchanged, and where a pass
changed it (hoist-invariant-descriptors) the new allocation takes the previous one's register groups when the
change leaves them as they were (`tessera.regalloc.regroup`)."""


_NOT_READ = (sm90.SetMaxNRegOp,)
"""Ops whose attributes and properties the allocator never reads: a setmaxnreg's budget does not change the
allocation, so that warp-specialize can size its budgets from the allocation of the kernel holding the
setmaxnreg ops and then set them, and allocate-registers finds that allocation in the memo."""
_is_not_read = subclass_test(_NOT_READ)
_is_setmaxnreg = subclass_test(sm90.SetMaxNRegOp)
_is_descriptor_op = subclass_test(DESCRIPTOR_OPS)


def _fingerprint(fn: func.FuncOp) -> tuple:
    """Every op of `fn`'s body with its operands, attributes and properties (but those of `_NOT_READ` ops),
    compared by identity and value: equal fingerprints mean the same body as the allocator sees it (the ops
    are held by the memo, so their identities are not reused). The kernel's own attributes (the summary
    allocate-registers writes) do not take part. (An op's operand tuple is read directly: xDSL replaces it
    whenever an operand changes, and its `operands` view costs a Python call per operand; a compile takes five
    fingerprints of its kernel; a list built and made a tuple, not a generator resumed once an op.)"""
    return tuple([(op, op._operands) if _is_not_read(op) else  # noqa: SLF001
                  (op, op._operands,  # noqa: SLF001
                   tuple(op.attributes.items()) if op.attributes else (),
                   tuple(op.properties.items()) if op.properties else ())
                  for op in walk_ops(fn.body)])


def _allocate(fn: func.FuncOp) -> Allocation:
    fingerprint = _fingerprint(fn)
    entry = _MEMO.get(id(fn))
    previous = None
    if entry is not None and entry[0] is fn:
        if entry[1] == fingerprint:
            _MEMO.move_to_end(id(fn))
            return entry[2]
        # The same kernel, changed by a pass (hoist-invariant-descriptors): its groups may carry over.
        changes = kernel_changes(entry[1], fingerprint)
        if changes is not None and entry[2]._pressure_map is not None:  # noqa: SLF001
            previous = (entry[2]._pressure_map.live, entry[2]._pressure_map.roots, changes)  # noqa: SLF001
    allocation = _allocate_fresh(fn, previous)
    _MEMO[id(fn)] = (fn, fingerprint, allocation)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return allocation


def _allocate_fresh(fn: func.FuncOp, previous: tuple | None = None) -> Allocation:
    """An allocation of `fn` worked out from its liveness; its register groups decided afresh, or carried
    over from `previous` ((liveness, roots, `KernelChanges`) of the allocation of `fn` before a pass changed
    it) where `tessera.regalloc.regroup` shows that the change leaves every decision as it was."""
    constants = immediates(fn)
    live = Liveness(fn, skip=constants)
    live.run()
    groups = regroup(fn, live, constants, *previous) if previous is not None else None
    if groups is not None:
        intervals, lowest = group_intervals(live, groups.roots(len(live.value_of)))
    else:
        groups, intervals, lowest = register_groups(fn, live, constants)
    root_list = groups.roots(len(live.value_of))  # the groups are final: each element's root
    root_of = root_list.__getitem__
    # The merged intervals are those of the final groups; in the order group_intervals gives (by lowest element).
    intervals = dict(sorted(intervals.items(), key=lambda item: lowest[item[0]]))
    ranges = _live_ranges(live, root_of, intervals)
    widths = {root: CLASS_WIDTH[register_class(live.value_of[root].type)] for root in ranges}
    uniform_roots = _roots_made_of(live, root_list, ranges, uniform_descriptors(fn))
    uniform_peak = peak_pressure({r: ranges[r] for r in uniform_roots}, widths)[0] if uniform_roots else 0
    if uniform_peak <= UNIFORM_DESCRIPTOR_REGISTERS:
        widths.update({root: 0 for root in uniform_roots})  # in URx, not per-thread
    parameters = set(fn.body.block.args)
    widths.update({root: 0 for root in _roots_made_of(live, root_list, ranges, parameters)})  # in the constant bank
    pressure = PressureMap(live, root_list, ranges, widths)

    def assign() -> tuple[dict, dict]:
        """The linear scan and the names (module docstring), run when the names are first asked for."""

        # Linear scan per class and register space (module docstring). wgmma accumulators are allocated as blocks
        # of consecutive registers, element i at base + i: ptxas keeps a wgmma chain asynchronous only when every
        # accumulator list it sees maps consistently onto its registers (otherwise it serializes the wgmmas, C7511).
        blocks = _accumulator_blocks(live, root_of)
        block_of = {root: block for block in blocks for root in block}
        space_of = _register_spaces(fn, live, root_list)
        descriptor_roots = _descriptor_roots(live, root_list)
        index_of_root: dict = {}  # root -> (pool, index in the pool); a pool is (class, space, descriptor)
        used: dict[tuple[str, int, bool], int] = defaultdict(int)  # registers each pool needs
        units = []  # (start, end, roots, ranges) in allocation order: a block is one unit
        for block in blocks:
            spans = merge_ranges(r for root in block for r in ranges[root])
            units.append((spans[0][0], spans[-1][1], block, spans))
        for root, spans in ranges.items():
            if root not in block_of:
                units.append((spans[0][0], spans[-1][1], (root,), spans))
        units.sort(key=lambda u: (u[0], u[1], _stable_key(live, u[2][0])))
        active: dict[tuple, list] = defaultdict(list)  # heaps of (end of the first range, register index)
        free: dict[tuple, set] = defaultdict(set)      # free register indices
        reserved: dict[tuple, dict] = defaultdict(dict)  # register index -> later ranges of a unit with holes
        for start, _, roots, spans in units:
            cls = register_class(live.value_of[roots[0]].type)
            if roots[0] in block_of:
                cls = "acc"  # accumulators get a pool of their own (see above)
            descriptor = roots[0] in descriptor_roots
            pool = (cls, space_of[roots[0]], descriptor)
            while active[pool] and active[pool][0][0] < start:
                _, index = heapq.heappop(active[pool])
                free[pool].add(index)
            # Each accumulator block keeps registers of its own: ptxas maps wgmma chains onto physical registers
            # itself, and a register shared by two chains (even at different times) made it serialize them. Each
            # wgmma descriptor too (`_descriptor_roots`).
            if cls == "acc" or descriptor:
                base = used[pool]
            else:
                holes = reserved[pool]
                base = _lowest_free_run(free[pool], used[pool], len(roots),
                                        lambda index: not _overlap(holes.get(index, ()), spans))
            for k, root in enumerate(roots):
                free[pool].discard(base + k)
                heapq.heappush(active[pool], (spans[0][1], base + k))
                if len(spans) > 1:  # free in the hole, reserved again for the later ranges
                    reserved[pool].setdefault(base + k, []).extend(spans[1:])
                index_of_root[root] = (pool, base + k)
            used[pool] = max(used[pool], base + len(roots))

        # Per class, the spaces are numbered one after the other: the kernel's from 0, then each budget region's.
        counts: dict[str, int] = defaultdict(int)
        first: dict[tuple[str, int, bool], int] = {}
        for pool in sorted(used, key=lambda p: (p[1], p[0], p[2])):
            first[pool] = counts[pool[0]]
            counts[pool[0]] += used[pool]
        names_of_root = {root: f"{CLASS_PREFIX[pool[0]]}{first[pool] + index}" for root, (pool, index) in index_of_root.items()}

        names = dict(constants)
        for value, elements in live.elements():
            names[value] = list(map(names_of_root.__getitem__, root_list[elements.start:elements.stop]))
        for op in live.ops:  # aliasing results that are not in `elements` order still get their names
            for result in op.results:
                if result not in names and register_class(result.type) is not None and result not in constants:
                    names[result] = [names_of_root[groups.find(live.element(result, i))]
                                     for i in range(element_count(result.type))]

        return names, dict(counts)

    return Allocation(_pressure_map=pressure, assign=assign, find_peak=pressure.kernel_peak)


def _descriptor_roots(live: Liveness, roots: list[int]) -> set[int]:
    """The register groups holding a wgmma descriptor (`sm90.make_descriptor`, `descriptor_advance`,
    `descriptor_offset`): each gets PTX registers no other group is given. ptxas 13.3 and later treat a virtual
    register as one allocation unit across the kernel (module docstring), and HGMMA reads its descriptors from
    uniform registers: a descriptor whose name another value (a per-thread address, another descriptor) also
    holds is computed on the vector datapath and moved over by R2UR, or its k-step advances take a UMOV pair
    each. The d128 keys-on-rows backward's single-stage loop under ptxas 13.5: 720 SASS instructions with the
    names shared (112 R2UR), 534 with a name per descriptor; 12.9 and 13.0 give 527 and 528 either way.
    (`roots`: each element's root; a value's elements are a slice of it.)"""
    held = set()
    for value, elements in live.elements():
        if _is_descriptor_op(value.owner):
            held.update(roots[elements.start:elements.stop])
    return held


def _roots_made_of(live: Liveness, roots: list[int], ranges: dict, values: set) -> set[int]:
    """The register groups that hold only `values` (a group that shares its registers with any other value is
    not one): those made of uniform descriptors (`tessera.regalloc.uniform`), which ptxas keeps in uniform
    registers, or of kernel parameters, which ptxas reads from the constant bank where they are used.
    (`roots`: each element's root; a value's elements are a slice of it.)"""
    if not values:
        return set()
    held, shared = set(), set()  # groups holding an element of one of `values` / of any other value
    for value, elements in live.elements():
        (held if value in values else shared).update(roots[elements.start:elements.stop])
    return {root for root in held - shared if root in ranges}


def budget_regions(fn: func.FuncOp) -> list[Region]:
    """The regions of `fn` that run under a register budget of their own, in program order: the branches of
    an `scf.if` whose block holds an `sm90.setmaxnreg` (warp-specialize's producer and consumer branches)."""
    return [region for op in walk_ops(fn) if is_if(op) for region in op.regions
            if region.blocks and any(_is_setmaxnreg(inner) for inner in region.block.ops)]


def _register_spaces(fn: func.FuncOp, live: Liveness, roots: list[int]) -> dict:
    """The register space of each register group (module docstring): 0 for the kernel's, k for the k-th
    budget region; a group takes the space of its earliest-defined value (of those defined at one position,
    the first in definition order). `roots`: each element's root; a value's elements are a slice of it."""
    number = {region: k + 1 for k, region in enumerate(budget_regions(fn))}
    # Latest definitions first, so that the earliest value of each group is the last one written.
    by_position = sorted(live.elements(), key=lambda item: live.defs[item[0]])  # stable: ties in definition order
    earliest: dict = {}  # root -> the earliest-defined value of its group
    for value, elements in reversed(by_position):
        earliest.update(dict.fromkeys(roots[elements.start:elements.stop], value))
    spaces = {}
    space_of_region: dict = {}  # the region a value is defined in -> its space (many values share a region)
    for root, value in earliest.items():
        start = value.owner.parent if isinstance(value, BlockArgument) else value.owner.parent_region()
        space = space_of_region.get(start)
        if space is None:
            region = start
            while region is not None and region not in number:
                region = region.parent_region()
            space = space_of_region[start] = number.get(region, 0)
        spaces[root] = space
    return spaces


def _accumulator_blocks(live: Liveness, root: Callable[[int], int]) -> list[tuple]:
    """The register groups of each wgmma accumulator, in element order, one block per distinct chain;
    a group that would sit at two different positions (or in two blocks) is left to ordinary allocation."""
    blocks: dict[tuple, None] = {}
    for op in live.ops:
        if is_wgmma(op):
            first = live.element(op.result)
            blocks[tuple(root(first + i) for i in range(element_count(op.result.type)))] = None
    position: dict = {}
    for block in blocks:
        for k, root in enumerate(block):
            position.setdefault(root, set()).add((block, k))
    return [b for b in blocks if len(set(b)) == len(b) and all(len(position[r]) == 1 for r in b)]


def _lowest_free_run(free: set, count: int, length: int, usable=lambda index: True) -> int:
    """The lowest index i such that i .. i + length - 1 are all free or beyond the registers used so far,
    and `usable` (not reserved for a later range that overlaps)."""
    if length == 1:  # most units: the least usable free index (no sort), else the first usable one beyond
        best = None
        for index in free:
            if index < count and (best is None or index < best) and usable(index):
                best = index
        if best is None:
            best = count
            while not usable(best):
                best += 1
        return best
    # A run starts at a free index or at one beyond those used so far: try those in order.
    for base in itertools.chain(sorted(i for i in free if i < count), itertools.count(count)):
        if all((base + k in free or base + k >= count) and usable(base + k) for k in range(length)):
            return base


def _overlap(ranges_a, ranges_b) -> bool:
    return any(a <= d and c <= b for a, b in ranges_a for c, d in ranges_b)


def _stable_key(live: Liveness, element: int) -> tuple:
    """(name hint, index) of an element: an order of groups that does not depend on object identities."""
    value = live.value_of[element]
    return (value.name_hint or "", element - live.first[value])


def _live_ranges(live: Liveness, root: Callable[[int], int], intervals: dict) -> dict:
    """The positions each register group is live at, as merged ranges: its interval, and the ranges its
    elements are held by in-flight wgmma groups (`Liveness.in_flight`)."""
    ranges = {root: [interval] for root, interval in intervals.items()}
    held_roots = set()  # only these have more than their interval to merge
    for value, held in live.holds.items():
        first = live.element(value)
        for i in range(element_count(value.type)):
            ranges[root(first + i)].extend(held)
            held_roots.add(root(first + i))
    for group in held_roots:
        ranges[group] = merge_ranges(ranges[group])
    return ranges
