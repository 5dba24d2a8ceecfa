"""Linear-scan register allocation per class and register space (package docstring), memoized per kernel."""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, defaultdict
from collections.abc import Callable

from xdsl.dialects import arith, func, math, scf
from xdsl.ir import BlockArgument, Operation, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tessera.dialects import sm90
from tessera.ir.walk import walk_ops
from tessera.sm90 import facts

from tessera.regalloc.liveness import _Liveness, _alias_sources, _is_if, _is_loop, _is_wgmma, _merge_ranges
from tessera.regalloc.pressure import PressurePeak, _PressureMap, _peak
from tessera.regalloc.uniform import DESCRIPTOR_OPS, UNIFORM_DESCRIPTOR_REGISTERS, uniform_descriptors
from tessera.regalloc.registers import (
    CLASS_PREFIX, CLASS_WIDTH, _is_vector, _subclass_test, element_count, immediates, register_class,
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
                 _pressure_map: _PressureMap | None = None, *,
                 assign: Callable[[], tuple[dict, dict]] | None = None):
        self._names, self._counts, self._assign = names, counts, assign
        self.peak = peak
        self.peak_position = peak_position
        self.at_peak = at_peak
        """Where the peak is and what is live there (`PressurePeak.describe` says it in words)."""
        self._pressure_map = _pressure_map

    def _assigned(self) -> None:
        if self._assign is not None:
            (self._names, self._counts), self._assign = self._assign(), None

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
        self._assigned()  # a copy or a pickle carries the names, not the function that works them out
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


class _UnionFind:
    """Disjoint sets of element numbers (`_Liveness.element`); `union(a, b)` makes a's root the root of both."""

    def __init__(self):
        self.parent: list[int] = []

    def find(self, x: int) -> int:
        parent = self.parent
        if x >= len(parent):
            parent.extend(range(len(parent), x + 1))
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def run_roots(self, first: int, count: int) -> list[int]:
        """The roots of elements first .. first + count - 1 (a value's elements): `find` of each, without a call
        for the elements that are roots or point at their root."""
        parent, find = self.parent, self.find
        if first + count > len(parent):
            find(first + count - 1)  # numbers every element up to there
        found = []
        for x in range(first, first + count):
            p = parent[x]
            found.append(p if parent[p] == p else find(x))
        return found

    def roots(self, count: int) -> list[int]:
        """The root of each element 0 .. count - 1 (a snapshot: later unions do not change it)."""
        if count:
            self.find(count - 1)  # numbers every element up to count - 1
        parent = self.parent
        # Most elements are roots or point at their root: only the others walk (and compress) their path.
        return [p if parent[p] == p else self.find(x) for x, p in enumerate(parent[:count])]

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


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
allocate the same kernel; the memo hands back the allocation while the kernel is unchanged."""


_NOT_READ = (sm90.SetMaxNRegOp,)
"""Ops whose attributes and properties the allocator never reads: a setmaxnreg's budget does not change the
allocation, so that warp-specialize can size its budgets from the allocation of the kernel holding the
setmaxnreg ops and then set them, and allocate-registers finds that allocation in the memo."""
_is_not_read = _subclass_test(_NOT_READ)
_is_setmaxnreg = _subclass_test(sm90.SetMaxNRegOp)
_is_descriptor_op = _subclass_test(DESCRIPTOR_OPS)


def _fingerprint(fn: func.FuncOp) -> tuple:
    """Every op of `fn`'s body with its operands, attributes and properties (but those of `_NOT_READ` ops),
    compared by identity and value: equal fingerprints mean the same body as the allocator sees it (the ops
    are held by the memo, so their identities are not reused). The kernel's own attributes (the summary
    allocate-registers writes) do not take part. (An op's operand tuple is read directly: xDSL replaces it
    whenever an operand changes, and its `operands` view costs a Python call per operand; a compile takes five
    fingerprints of its kernel.)"""
    return tuple((op, op._operands) if _is_not_read(op) else  # noqa: SLF001
                 (op, op._operands,  # noqa: SLF001
                  tuple(op.attributes.items()) if op.attributes else (),
                  tuple(op.properties.items()) if op.properties else ())
                 for op in walk_ops(fn.body))


def _allocate(fn: func.FuncOp) -> Allocation:
    fingerprint = _fingerprint(fn)
    entry = _MEMO.get(id(fn))
    if entry is not None and entry[0] is fn and entry[1] == fingerprint:
        _MEMO.move_to_end(id(fn))
        return entry[2]
    allocation = _allocate_fresh(fn)
    _MEMO[id(fn)] = (fn, fingerprint, allocation)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return allocation


def _allocate_fresh(fn: func.FuncOp) -> Allocation:
    constants = immediates(fn)
    live = _Liveness(fn, skip=constants)
    live.run()
    groups = _UnionFind()
    union, element = groups.union, live.element
    for op in live.ops:
        pairs = _alias_sources(op)
        if pairs is not None:
            result_first, source, source_first = element(op.results[0]), None, 0
            for i, (value, j) in pairs:
                if value is not source:  # (a shuffle reads one or two values)
                    source, source_first = value, element(value)
                union(source_first + j, result_first + i)
        elif _is_for(op):
            for arg, result in zip(op.body.block.args[1:], op.results):
                first_arg, first_result = element(arg), element(result)
                for i in range(element_count(arg.type)):
                    union(first_arg + i, first_result + i)

    # The groups do not change until the in-place decisions below: both read one snapshot of the roots.
    snapshot = groups.roots(len(live.value_of))
    intervals, lowest = _intervals(live, snapshot)
    reads = _GroupReads(live, snapshot)
    for op in live.ops:  # in program order, so a chain of in-place ops shares one set of registers
        for operand, result in _in_place_candidates(op):
            if register_class(operand.type) is None or operand in constants or _is_function_argument(operand, fn):
                continue
            pos = live.position[op]
            roots = groups.run_roots(live.element(operand), element_count(operand.type))
            carried = reads.loops
            # (a group no loop carries is read last where its interval ends: most groups)
            dies_here = all((reads.last_read(r, pos, intervals) if carried.get(r) else intervals[r][1]) <= pos
                            for r in roots)
            distinct = len(set(roots)) == len(roots)  # not a broadcast or a shuffle with repeats
            if dies_here and distinct:
                result_first = live.element(result)
                find, merge = groups.find, reads.merge
                for i, r in enumerate(roots):
                    result_root = find(result_first + i)
                    (a, b), (c, d) = intervals[r], intervals[result_root]
                    merged = (a if a < c else c, b if b > d else d)
                    groups.union(r, result_root)
                    intervals.pop(result_root, None)
                    root = find(r)
                    intervals[root] = merged
                    low = lowest.pop(r) if result_root == r else min(lowest.pop(r), lowest.pop(result_root))
                    lowest[root] = low
                    merge(root, r, result_root)
                if not isinstance(op, scf.ForOp):
                    break  # one operand's registers per result
    _coalesce_yields(live, groups, intervals, lowest, reads, constants, fn)
    _coalesce_branch_results(live, groups, intervals, lowest, reads, constants)
    root_list = groups.roots(len(live.value_of))  # the groups are final: each element's root
    root_of = root_list.__getitem__
    # The merged intervals are those of the final groups; in the order _intervals gives (by lowest element).
    intervals = dict(sorted(intervals.items(), key=lambda item: lowest[item[0]]))
    ranges = _live_ranges(live, root_of, intervals)
    widths = {root: CLASS_WIDTH[register_class(live.value_of[root].type)] for root in ranges}
    uniform_roots = _roots_made_of(live, root_list, ranges, uniform_descriptors(fn))
    if uniform_roots and _peak({r: ranges[r] for r in uniform_roots}, widths)[0] <= UNIFORM_DESCRIPTOR_REGISTERS:
        widths.update({root: 0 for root in uniform_roots})  # in URx, not per-thread
    parameters = set(fn.body.block.args)
    widths.update({root: 0 for root in _roots_made_of(live, root_list, ranges, parameters)})  # in the constant bank
    pressure = _PressureMap(live, root_list, ranges, widths)
    at_peak = pressure.kernel_peak()

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
            spans = _merge_ranges(r for root in block for r in ranges[root])
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

    return Allocation(peak=at_peak.registers, peak_position=at_peak.position, at_peak=at_peak, _pressure_map=pressure,
                      assign=assign)


def _descriptor_roots(live: _Liveness, roots: list[int]) -> set[int]:
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


def _roots_made_of(live: _Liveness, roots: list[int], ranges: dict, values: set) -> set[int]:
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
    return [region for op in walk_ops(fn) if _is_if(op) for region in op.regions
            if region.blocks and any(_is_setmaxnreg(inner) for inner in region.block.ops)]


def _register_spaces(fn: func.FuncOp, live: _Liveness, roots: list[int]) -> dict:
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


ELEMENTWISE = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.MaximumfOp, arith.MinimumfOp, arith.NegfOp,
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp, math.FmaOp,
    sm90.SelpOp, sm90.Ex2ApproxOp, sm90.RcpApproxOp, sm90.Lg2ApproxOp, sm90.TanhApproxOp, sm90.RsqrtApproxOp,
    math.SqrtOp, math.AbsFOp, math.AbsIOp, math.FloorOp, math.CeilOp, math.RoundEvenOp, math.TruncOp,
    arith.MaxSIOp, arith.MinSIOp, arith.FloorDivSIOp, arith.RemSIOp, arith.ShRSIOp,
    arith.DivSIOp, arith.DivUIOp,
)
"""Ops whose register i of the result depends only on register i of each operand: computed in place, the
result may take the registers of an operand that dies there."""
_is_elementwise = _subclass_test(ELEMENTWISE)
_is_for = _subclass_test(scf.ForOp)
_may_compute_in_place = _subclass_test((sm90.WgmmaMmaAsyncOp, scf.ForOp, *ELEMENTWISE))


def _in_place_candidates(op: Operation) -> list[tuple[SSAValue, SSAValue]]:
    """(operand, result) pairs where the result may take the operand's registers if the operand dies there:
    the accumulator of a wgmma (the instruction reads and writes the same list), a same-typed vector operand
    of an elementwise op, and the initial values of a loop's carried registers."""
    if not _may_compute_in_place(op):
        return []
    if isinstance(op, sm90.WgmmaMmaAsyncOp):
        return [(op.acc, op.result)]
    if isinstance(op, scf.ForOp):
        return list(zip(op.iter_args, op.results))
    if _is_elementwise(op) and len(op.results) == 1 and _is_vector(op.results[0].type):
        return [(v, op.results[0]) for v in op.operands if v.type == op.results[0].type]
    return []


def _coalesce_yields(live: _Liveness, groups: _UnionFind, intervals: dict, lowest: dict, reads: _GroupReads,
                     constants: dict, fn: func.FuncOp) -> None:
    """A value a loop body yields takes the registers of the block argument it becomes, where the argument's
    registers are free by then: every value of the argument's group is last read (and last held by an
    in-flight wgmma) in the body before the first value of the yielded value's group is defined, and that
    group lives only inside the body. The latch then moves nothing for it, and the two are not counted at
    once (overlap-softmax's converted P, made at the end of a trip after the previous P.V mma retired, is
    what the next trip's mma reads). Accumulator chains are left alone (`_accumulator_blocks` places them)."""
    accumulators = {root for op in live.ops if _is_wgmma(op)
                    for root in groups.run_roots(live.element(op.result), element_count(op.result.type))}
    held_by_root: dict[int, set] = defaultdict(set)  # root -> the values of its group that wgmma holds
    for value in live.holds:
        for root in groups.run_roots(live.element(value), element_count(value.type)):
            held_by_root[root].add(value)
    for loop, start, stop in live.loops:
        if not isinstance(loop, scf.ForOp):
            continue
        body = loop.body.block
        for arg, value in zip(body.args[1:], _terminator_operands(body)):
            if (register_class(arg.type) is None or arg in constants or value in constants or arg.type != value.type
                    or _is_function_argument(value, fn) or value not in live.first):
                continue
            count = element_count(arg.type)
            arg_roots = groups.run_roots(live.element(arg), count)
            value_roots = groups.run_roots(live.element(value), count)
            if (len(set(arg_roots)) != count or len(set(value_roots)) != count or set(arg_roots) & set(value_roots)
                    or (set(arg_roots) | set(value_roots)) & accumulators
                    or any(reads.loops.get(r) for r in value_roots)):
                continue
            first_def = min(intervals[r][0] for r in value_roots)
            if not (start < first_def and all(intervals[r][1] <= stop for r in value_roots)):
                continue
            held = {member for r in arg_roots for member in held_by_root.get(r, ())}
            busy = [read for defined, read in (pair for r in arg_roots for pair in reads.reads.get(r, ()))
                    if start <= defined <= stop]
            busy += [end for member in held for begin, end in live.holds[member] if begin <= stop and start <= end]
            if max(busy, default=start) >= first_def:
                continue
            for a, v in zip(arg_roots, value_roots):
                root = _merge_groups(groups, intervals, lowest, reads, a, v)
                held_by_root[root] = held_by_root.pop(a, set()) | held_by_root.pop(v, set())


def _coalesce_branch_results(live: _Liveness, groups: _UnionFind, intervals: dict, lowest: dict,
                             reads: _GroupReads, constants: dict) -> None:
    """A result of an `scf.if` takes the registers its branches yield where every branch yields (register by
    register) the same register group and that group is dead where the branches join: then no branch moves
    anything into the result. peel-masked-iterations{branch=true}'s masks are the case: one branch yields the
    score tile, the other its masked form, computed in place (the masking select is the tile's last read), so
    both are one group, read last by the yields."""
    for op in live.ops:
        if not (_is_if(op) and op.results and op.false_region.blocks):
            continue
        branches = [_terminator_operands(region.block) for region in op.regions]
        for n, result in enumerate(op.results):
            yielded = [values[n] for values in branches]
            if (register_class(result.type) is None or result in constants
                    or any(v in constants or v not in live.first or v.type != result.type for v in yielded)):
                continue
            join = live.defs[result]
            free_after_join = None
            for i in range(element_count(result.type)):
                roots = {groups.find(live.element(v, i)) for v in yielded}
                target = groups.find(live.element(result, i))
                if len(roots) != 1 or target in roots:
                    continue
                (root,) = roots
                if intervals[root][1] > join:
                    free_after_join = free_after_join or _FreeAfterJoin(live, groups, op, yielded, result)
                    if not free_after_join(reads, root):
                        continue
                _merge_groups(groups, intervals, lowest, reads, root, target)


class _FreeAfterJoin:
    """Whether a register group live past the join of an scf.if (a loop-carried accumulator: overlap-softmax
    {fold=true}'s P.V update, skipped on the first trip) is free while the if's `result` lives: the yielded
    values are last read by the yields, and no other value of the group is live or held by a wgmma in flight
    between the join and the last read of `result` (values made after it, in place, are), so the result may
    take the group's registers. A hold of a yielded value past the join (the update's wgmma group in flight)
    is the result's own, as are those of the wgmma chain in the branch that makes it: the registers are the
    same. What does not depend on the group is worked out once per result."""

    def __init__(self, live: _Liveness, groups: _UnionFind, branch: scf.IfOp, yielded: list, result: SSAValue):
        self.join = join = live.defs[result]
        self.end = end = live.read_end(result) or join
        self.dead = all((live.read_end(v) or 0) <= join for v in yielded)
        self.mine = {(live.defs[v], live.read_end(v)) for v in yielded}
        self.busy: set[int] = set()  # roots of the other values held in flight between the join and the end
        if not self.dead:
            return
        for value, held in live.holds.items():
            if value in yielded or value is result or branch.is_ancestor(value.owner):
                continue
            if any(b < end and e > join for b, e in held):
                self.busy.update(groups.find(live.element(value, i)) for i in range(element_count(value.type)))

    def __call__(self, reads: _GroupReads, root: int) -> bool:
        if not self.dead or root in self.busy:
            return False
        return not any(d < self.end and r > self.join and (d, r) not in self.mine for d, r in reads.reads.get(root, ()))


def _merge_groups(groups: _UnionFind, intervals: dict, lowest: dict, reads: _GroupReads, a, b):
    """Make register groups `a` and `b` (roots) one: their live intervals and lowest registers joined, their
    reads merged; returns the new root."""
    merged = (min(intervals[a][0], intervals[b][0]), max(intervals[a][1], intervals[b][1]))
    low = min(lowest.pop(a), lowest.pop(b))
    intervals.pop(a), intervals.pop(b)
    groups.union(a, b)
    root = groups.find(a)
    intervals[root], lowest[root] = merged, low
    reads.merge(root, a, b)
    return root


def _terminator_operands(block) -> list[SSAValue]:
    return list(block.last_op.operands) if block.last_op is not None else []


def _accumulator_blocks(live: _Liveness, root: Callable[[int], int]) -> list[tuple]:
    """The register groups of each wgmma accumulator, in element order, one block per distinct chain;
    a group that would sit at two different positions (or in two blocks) is left to ordinary allocation."""
    blocks: dict[tuple, None] = {}
    for op in live.ops:
        if _is_wgmma(op):
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


class _GroupReads:
    """What the in-place decisions need of each register group, kept per root as groups merge: the loops
    whose carried value the group holds, and the definition and last read of its values other than loop
    results."""

    def __init__(self, live: _Liveness, roots: list[int]):
        """`roots`: each element's root (a value's elements are a slice of it)."""
        self.loops: dict[int, set] = defaultdict(set)  # root -> (start, end) of the loops it is carried by
        self.reads: dict[int, list] = defaultdict(list)  # root -> (definition, last read) of its read values
        loops, reads, carried, defs = self.loops, self.reads, live.carried, live.defs
        for value, elements in live.elements():
            loop = carried.get(value)
            read = None if _is_for(value.owner) else live.read_end(value)
            if loop is not None:
                for group in roots[elements.start:elements.stop]:
                    loops[group].add(loop)
            if read is not None:
                pair = (defs[value], read)
                for group in roots[elements.start:elements.stop]:
                    reads[group].append(pair)

    def merge(self, root: int, a: int, b: int) -> None:
        """Groups `a` and `b` became one group with root `root`."""
        # The larger of each pair is extended in place (an accumulator chain merges hundreds of times: copying
        # its reads each time was quadratic); the order of the reads does not matter to their readers.
        loops_a, loops_b = self.loops.pop(a, None), self.loops.pop(b, None)
        if loops_a or loops_b:
            if not loops_a or (loops_b and len(loops_b) > len(loops_a)):
                loops_a, loops_b = loops_b, loops_a
            if loops_b:
                loops_a |= loops_b
            self.loops[root] = loops_a
        reads_a, reads_b = self.reads.pop(a, None), self.reads.pop(b, None)
        if reads_a or reads_b:
            if not reads_a or (reads_b and len(reads_b) > len(reads_a)):
                reads_a, reads_b = reads_b, reads_a
            if reads_b:
                reads_a.extend(reads_b)
            self.reads[root] = reads_a

    def last_read(self, root: int, pos: int, intervals: dict) -> int:
        """The last position at which the group is read, as seen from an op at `pos`. Inside the body of a
        loop whose carried value the group holds, the group is free after its last read in the body: the
        latch writes the next trip's value into it, and the loop result is read only after the loop, as are
        the values defined after the loop that share its registers (a shuffle of the result: a row reduction
        of the accumulator). Anywhere else the group is live to the end of its interval."""
        loops = self.loops.get(root)
        stops = [stop for start, stop in loops if start < pos < stop] if loops else None
        if not stops:
            return intervals[root][1]
        bound = min(stops)
        return max((read for defined, read in self.reads.get(root, ()) if defined <= bound), default=0)


def _is_function_argument(value: SSAValue, fn: func.FuncOp) -> bool:
    return isinstance(value, BlockArgument) and value.owner is fn.body.blocks.first


def _stable_key(live: _Liveness, element: int) -> tuple:
    """(name hint, index) of an element: an order of groups that does not depend on object identities."""
    value = live.value_of[element]
    return (value.name_hint or "", element - live.first[value])


def _intervals(live: _Liveness, roots: list[int]) -> tuple[dict, dict]:
    """(first, last) position of each register group, and its lowest element; loop-carried block arguments
    stay live to the end of their loop (the latch writes them). Groups come in the order of their lowest
    element (elements are numbered in definition order). `roots`: each element's root."""
    intervals: dict = {}
    lowest: dict = {}
    for value, elements in live.elements():
        start = live.defs[value]
        read = live.read_end(value)
        end = start if read is None else max(read, start)
        if isinstance(value, BlockArgument) and _is_loop(value.owner.parent_op()):
            loop = value.owner.parent_op()
            end = max(end, next(stop for op, _, stop in live.loops if op is loop))
        groups = roots[elements.start:elements.stop]
        if intervals.keys().isdisjoint(groups) and len(set(groups)) == len(groups):  # most values: new groups
            intervals.update(dict.fromkeys(groups, (start, end)))
            lowest.update(zip(groups, elements))
            continue
        for element, group in zip(elements, groups):
            found = intervals.get(group)
            if found is None:
                intervals[group] = (start, end)
                lowest[group] = element
            elif start < found[0] or end > found[1]:
                intervals[group] = (start if start < found[0] else found[0], end if end > found[1] else found[1])
    return intervals, lowest


def _live_ranges(live: _Liveness, root: Callable[[int], int], intervals: dict) -> dict:
    """The positions each register group is live at, as merged ranges: its interval, and the ranges its
    elements are held by in-flight wgmma groups (`_Liveness.in_flight`)."""
    ranges = {root: [interval] for root, interval in intervals.items()}
    held_roots = set()  # only these have more than their interval to merge
    for value, held in live.holds.items():
        first = live.element(value)
        for i in range(element_count(value.type)):
            ranges[root(first + i)].extend(held)
            held_roots.add(root(first + i))
    for group in held_roots:
        ranges[group] = _merge_ranges(ranges[group])
    return ranges
