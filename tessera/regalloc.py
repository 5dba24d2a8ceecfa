"""Register allocation for Target IR: liveness over structured control flow, then linear scan per class.

Every element of every per-thread value is one PTX register of a class (`f32` -> %f, `i32`/`index` ->
.b32 %r, `i64` -> .b64 %rd, `i1` -> .pred %p). Some values share registers instead of being copied:
- `vector.shuffle`, `vector.extract` and `vector.broadcast` results *are* the source's registers (a
  permutation, a selection, a repetition): they cost no instruction;
- a `scf.for` result is the register of its loop-carried block argument (the latch moves each yielded value
  into it);
- a `sm90.wgmma_mma_async` result reuses its accumulator's registers when the accumulator dies there (the
  instruction reads and writes the same `{d...}` list; otherwise the printer copies the accumulator first),
  and an elementwise op's vector result reuses the registers of an operand that dies there (register i of
  the result reads only register i of each operand), so softmax chains run in place; a loop's initial value
  that dies at the loop is computed directly into the carried register.

Liveness: positions number the ops in program order; a value is live from its definition to its last use,
and a value used inside a loop but defined outside it stays live to the end of that loop (it is read again on
every trip); loop-carried registers are live for the whole loop. Linear scan then gives each class exactly as
many registers as are live at once (interval graphs colour optimally), reusing the registers of dead values.
Pressure counts 32-bit registers (a .b64 counts 2; predicates are a separate file and are not counted).

Asynchronous wgmma operands: between a `sm90.wgmma_mma_async` and the `sm90.wgmma_wait_group` that retires its
group, the tensor core still reads the A fragment (register A, the vector operand) and writes the result's
`{d...}` registers, so those registers are *held* until then even where no op reads them any more. The
retiring wait is found by scanning forward from the wgmma over the ops of its block (ops nested in regions are
not looked into): the first `sm90.wgmma_commit_group` closes the wgmma's own group, each later one adds a
group after it, and the first `wgmma_wait_group k` with at least k groups committed after the own group
retires it (`wait_group k` leaves only the k newest groups pending). Where the block ends first, the hold
goes on at the end of the block: to the end of the enclosing loop and, because the next trip runs before any
op after the loop, from the loop's start to the first retiring wait of the next trip (or over the whole
loop if the next trip has none), then on after the enclosing op in its block, outwards to the end of the
kernel. A hold may therefore be two ranges with a hole (an A fragment made late in a loop body and retired
early in the next trip); linear scan keeps the register reserved for the later range and lets values that
die before it use the hole. Only the result's registers are held for the accumulator: an accumulator that
dies at the wgmma shares them (see above), one that does not is copied into them before the wgmma is issued.
The accumulator chain's in-place decisions are made before the holds are added (a later wgmma of the chain
may take the registers of a pending result: the tensor core orders its own accesses).

Register spaces: the regions that run under a register budget of their own (the branches of an `scf.if` that
begin with `sm90.setmaxnreg`: warp-specialize's producer and consumer warpgroups) are allocated from disjoint
PTX registers. A value defined inside such a region gets a register of that region's space; every other value
(the prologue before the split, anything after it) one of the kernel's own space, and a register group takes
the space of its earliest definition. Each space is a linear scan of its own, and the spaces are numbered one
after the other per class (`%r0..` the kernel's, then the first region's, then the next one's), so no PTX
register is written in two budget regions: the only names both branches mention are values defined before the
split that both read. ptxas 13.3 and later need this: they behave as if a virtual register were one
allocation unit across the whole kernel, so that a name the 24-register producer and the 240-register
consumers both write has to fit the producer's budget. With the names shared (one scan over both branches
hands them out), the flash kernels' consumers were left with about 184 registers under ptxas 13.3 to 13.5
whatever their setmaxnreg said: ptxas spilled (292 bytes for head_dim 128, also in the producer, which
uses a dozen registers) and serialized the wgmmas (C7512). Renaming the producer's registers in that PTX,
and nothing else, removed both; ptxas 12.1 to 13.2 assemble both forms without a spill (under 13.0 the
main loop's SASS is the same length, 497 and 602 instructions).

Pressure per region: `Allocation.region_pressure(op)` gives, for each region of `op` (the producer and the
consumer branch of a warp-specialized `scf.if`, a loop body), the peak of 32-bit registers live at one
position inside it, so that a pass can size each branch's setmaxnreg budget. It is measured on a liveness
that knows the regions of an `scf.if` are alternatives, which program order (and so the allocation above)
does not: a value is live inside one region only while a read of it can still follow, in that region or
after the if; reads only in another region of the if do not count, unless a loop around the if that the
value is defined outside of leads there on a later trip. Held wgmma operands count as above.
`region_pressure(fn, op)` answers the same without a budget check.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, math, scf, vector
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr
from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, VectorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tessera.dialects import sm90
from tessera.sm90 import facts

CLASS_PREFIX = {"f32": "%f", "acc": "%fa", "b32": "%r", "b64": "%rd", "pred": "%p"}

IMMEDIATE_OPERANDS = {
    **{op: (1,) for op in (
        arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp, arith.DivSIOp,
        arith.DivUIOp, arith.RemSIOp, arith.RemUIOp, arith.MinSIOp, arith.MaxSIOp, arith.MinUIOp,
        arith.MaxUIOp, arith.CeilDivSIOp, arith.CeilDivUIOp, arith.AddfOp, arith.SubfOp, arith.MulfOp,
        arith.MaximumfOp, arith.MinimumfOp, arith.CmpiOp, sm90.SetpOp)},
    math.FmaOp: (1, 2),
    sm90.SelpOp: (1, 2),
}
"""Operand positions where PTX takes an immediate (the b and c sources of ALU instructions)."""
CLASS_WIDTH = {"f32": 1, "acc": 1, "b32": 1, "b64": 2, "pred": 0}
"""32-bit registers each class costs (predicates live in their own file)."""


class RegisterBudgetError(DiagnosticException):
    """The values live at the peak need more registers than the budget."""


def _subclass_test(classes: type | tuple[type, ...]) -> Callable[[object], bool]:
    """`isinstance(x, classes)`, decided once per concrete type: xDSL's attribute and op classes are ABCs,
    whose isinstance is slow when the answer is no, and the allocator asks it of every value and op."""
    known: dict[type, bool] = {}

    def test(x: object) -> bool:
        kind = type(x)
        answer = known.get(kind)
        if answer is None:
            answer = known[kind] = issubclass(kind, classes)
        return answer

    return test


_is_vector = _subclass_test(VectorType)
_is_f32 = _subclass_test(Float32Type)
_is_index = _subclass_test(IndexType)
_is_integer = _subclass_test(IntegerType)


def register_class(ty: Attribute) -> str | None:
    element = ty.element_type if _is_vector(ty) else ty
    if _is_f32(element):
        return "f32"
    if _is_index(element):
        return "b32"
    if _is_integer(element):
        return {1: "pred", 32: "b32", 64: "b64"}.get(element.width.data)
    return None  # tensor maps and other parameters are not registers


def element_count(ty: Attribute) -> int:
    return ty.get_shape()[0] if _is_vector(ty) else 1


@dataclass
class Allocation:
    """Register names of each value (one per element), the registers used per class, and the pressure."""

    names: dict[SSAValue, list[str]]
    """Register names per element; for a constant used only where PTX takes immediates, its immediates
    (`0f3FB8AA3B`, `-7`): such a constant needs no instruction and no register."""
    counts: dict[str, int]
    peak: int
    peak_position: int
    live_at_peak: list[tuple[str, int]] = field(default_factory=list)
    _pressure_map: _PressureMap | None = field(default=None, repr=False, compare=False)

    def declarations(self) -> dict[str, int]:
        """Registers to declare per class (`.reg .f32 %f<N>;`)."""
        return dict(self.counts)

    def region_pressure(self, op: Operation) -> list[int]:
        """For each region of `op` (then and else of an `scf.if`, the body of a loop), the peak of 32-bit
        registers live at one position inside it (module docstring); 0 for a region with no ops."""
        if self._pressure_map is None:
            raise ValueError("this allocation carries no liveness (it was not made by allocate_registers)")
        return self._pressure_map.region_pressure(op)


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

    def roots(self, count: int) -> list[int]:
        """The root of each element 0 .. count - 1."""
        return [self.find(x) for x in range(count)]

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def immediate_text(value: float | int, ty: Attribute) -> str:
    """PTX immediate syntax: 0fXXXXXXXX for f32 (exact bits), decimal for integers."""
    element = ty.element_type if isinstance(ty, VectorType) else ty
    if isinstance(element, Float32Type):
        import struct

        return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]
    return str(int(value))


def immediates(fn: func.FuncOp) -> dict[SSAValue, list[str]]:
    """Constants every use of which is an operand position that takes a PTX immediate."""
    found = {}
    for op in fn.walk():
        if not isinstance(op, arith.ConstantOp) or register_class(op.result.type) in (None, "pred"):
            continue
        uses = list(op.result.uses)
        if uses and all(use.index in IMMEDIATE_OPERANDS.get(type(use.operation), ()) for use in uses):
            attr = op.value
            if isinstance(attr, DenseIntOrFPElementsAttr):
                values = list(attr.get_values())
            elif isinstance(attr, IntegerAttr | FloatAttr):
                values = [attr.value.data]
            else:
                continue
            found[op.result] = [immediate_text(v, op.result.type) for v in values]
    return found


@dataclass
class _Liveness:
    """Positions of ops and the definitions, uses and holds of values. Every element of a value is defined,
    read and held at the same positions, so those are kept per value; an element is a number (`element`),
    element i of a value being its first element's number + i, so that the allocator's sets and maps of
    elements hash integers."""

    fn: func.FuncOp
    position: dict = field(default_factory=dict)   # op -> position
    ops: list = field(default_factory=list)        # the ops of the kernel's body in program order (as walk())
    loops: list = field(default_factory=list)      # (op, start, end) of scf.for / scf.while
    defined: list = field(default_factory=list)    # values with registers, in definition order
    value_of: list = field(default_factory=list)   # element number -> its value
    first: dict = field(default_factory=dict)      # value -> number of its element 0
    defs: dict = field(default_factory=dict)        # value -> position
    uses: dict = field(default_factory=lambda: defaultdict(list))  # value -> positions
    skip: dict = field(default_factory=dict)  # values that are immediates, not registers
    end: dict = field(default_factory=dict)         # op -> last position inside it (its latch for a loop)
    holds: dict = field(default_factory=lambda: defaultdict(list))  # value -> ranges held in flight
    carried: dict = field(default_factory=dict)     # loop-carried block argument -> (start, end) of its scf.for
    _ends: dict = field(default_factory=dict)       # (definition, use) -> end_of
    _read_ends: dict = field(default_factory=dict)  # value -> read_end

    def element(self, value: SSAValue, index: int = 0) -> int:
        """The number of element `index` of `value` (numbered on first sight)."""
        first = self.first.get(value)
        if first is None:
            first = self.first[value] = len(self.value_of)
            self.value_of.extend([value] * element_count(value.type))
        return first + index

    def elements(self) -> Iterator[tuple[SSAValue, range]]:
        """Each value with registers in definition order, with the numbers of its elements."""
        for value in self.defined:
            first = self.first[value]
            yield value, range(first, first + element_count(value.type))

    def run(self) -> None:
        self.counter = 0
        self._block(self.fn.body.blocks.first, 0)
        for op in self.ops:
            if isinstance(op, sm90.WgmmaMmaAsyncOp):
                ranges = self.in_flight(op)
                held = [op.result] + ([op.a] if op.a_in_registers else [])
                for value in held:
                    if register_class(value.type) is None or value in self.skip:
                        continue
                    self.holds[value].extend(ranges)

    def in_flight(self, mma: sm90.WgmmaMmaAsyncOp) -> list[tuple[int, int]]:
        """The positions from `mma` to the wgmma_wait_group that retires its group (module docstring): one
        range, or more where the scan leaves the block (the next trip of a loop, the code after it)."""
        ranges = []
        state = (False, 0)  # (own group committed, groups committed after it)
        op, start = mma, self.position[mma]
        while True:
            retire, state = _scan_for_retirement(op.next_op, state)
            if retire is not None:
                ranges.append((start, self.position[retire]))
                break
            block = op.parent_block()
            parent = block.parent_op() if block is not None else None
            if parent is None or isinstance(parent, func.FuncOp):
                ranges.append((start, self.end[block.last_op]))  # never retired: to the end of the kernel
                break
            if isinstance(parent, scf.ForOp | scf.WhileOp):
                ranges.append((start, self.end[parent]))  # through the latch
                trip = None
                if isinstance(parent, scf.ForOp):  # the next trip, from the top of the body
                    trip, _ = _scan_for_retirement(parent.body.block.first_op, state)
                ranges.append((self.position[parent], self.position[trip] if trip is not None else self.end[parent]))
            else:
                ranges.append((start, self.end[block.last_op]))
            op, start = parent, self.end[parent] + 1
        return _merge_ranges(ranges)

    def _define(self, value: SSAValue, pos: int) -> None:
        if register_class(value.type) is None or value in self.skip:
            return
        self.element(value)
        self.defined.append(value)
        self.defs[value] = pos

    def _block(self, block: Block, pos: int) -> None:
        for arg in block.args:
            self._define(arg, pos)
        for op in block.ops:
            self._op(op)

    def _op(self, op: Operation) -> None:
        self.counter += 1
        start = self.counter
        self.position[op] = start
        self.ops.append(op)
        for operand in op.operands:
            if register_class(operand.type) is not None and operand not in self.skip:
                self.uses[operand].append(start)
        for region in op.regions:
            for block in region.blocks:
                self._block(block, start)
        if isinstance(op, scf.ForOp | scf.WhileOp):
            self.counter += 1
            self.loops.append((op, start, self.counter))
            if isinstance(op, scf.ForOp):
                self.carried.update((arg, (start, self.counter)) for arg in op.body.block.args[1:])
            if isinstance(op, scf.ForOp):  # the latch compares with the bound and adds the step every trip
                for bound in (op.ub, op.step):
                    if register_class(bound.type) is not None and bound not in self.skip:
                        self.uses[bound].append(self.counter)
            for result in op.results:
                self._define(result, start)  # tied to the carried registers, live from the loop's start
        elif isinstance(op, scf.IfOp) and op.results:
            # The results come into being where the branches join (each branch's yield moves its values
            # into them), not at the branch: defining them there would keep them live over both branches.
            self.counter += 1
            for result in op.results:
                self._define(result, self.counter)
        else:
            for result in op.results:
                self._define(result, start)
        self.end[op] = self.counter

    def end_of(self, defined: int, use: int) -> int:
        """A use at `use` keeps a value defined at `defined` live to the end of every loop around the use that
        the value was defined outside of."""
        end = self._ends.get((defined, use))
        if end is None:
            end = use
            for _, start, stop in self.loops:
                if start < use < stop and not (start <= defined < stop):
                    end = max(end, stop)
            self._ends[(defined, use)] = end
        return end

    def read_end(self, value: SSAValue) -> int | None:
        """The last position a read of `value` keeps it live to (`end_of` its last use); None if unread."""
        if value not in self._read_ends:
            defined = self.defs[value]
            self._read_ends[value] = max((self.end_of(defined, u) for u in self.uses.get(value, ())), default=None)
        return self._read_ends[value]


def _scan_for_retirement(op: Operation | None, state: tuple[bool, int]) -> tuple[Operation | None, tuple[bool, int]]:
    """Scan `op` and the ops after it in its block for the wgmma_wait_group that retires a group, given
    `state` = (its group is committed, groups committed after it). Returns the wait (or None) and the state
    at the end of the scan."""
    committed, after = state
    while op is not None:
        if isinstance(op, sm90.WgmmaCommitGroupOp):
            committed, after = True, after + 1 if committed else 0
        elif isinstance(op, sm90.WgmmaWaitGroupOp) and committed and after >= op.pending.value.data:
            return op, (committed, after)
        op = op.next_op
    return None, (committed, after)


def _merge_ranges(ranges) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-adjacent ranges covering the same positions."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def aliases_operand_registers(op: Operation) -> bool:
    """Whether `op`'s result is a view of its operands' registers (a permutation, selection or repetition
    that prints no instruction)."""
    return _alias_sources(op) is not None


def _alias_sources(op: Operation) -> list[tuple[int, tuple[SSAValue, int]]] | None:
    """For a register-moving op, (result element, source element) pairs; None for other ops."""
    if isinstance(op, vector.ShuffleOp):
        n1 = element_count(op.v1.type)
        return [(i, (op.v1, m) if m < n1 else (op.v2, m - n1)) for i, m in enumerate(op.mask.get_values())]
    if isinstance(op, vector.BroadcastOp) and not isinstance(op.source.type, VectorType):
        return [(i, (op.source, 0)) for i in range(element_count(op.vector.type))]
    if isinstance(op, vector.ExtractOp) and not op.dynamic_position and len(op.static_position.get_values()) == 1:
        return [(0, (op.vector, op.static_position.get_values()[0]))]
    return None


def allocate_registers(fn: func.FuncOp, budget: int = facts.MAX_REGISTERS_PER_THREAD) -> Allocation:
    """Allocate PTX registers for a Target IR kernel (module docstring). Raises RegisterBudgetError naming
    the values live at the peak when the pressure exceeds `budget` 32-bit registers per thread."""
    allocation = _allocate(fn)
    if allocation.peak > budget:
        listing = ", ".join(f"%{name} ({n})" for name, n in allocation.live_at_peak[:12])
        from tessera.diagnostics import source_location

        loc = source_location(fn)
        raise RegisterBudgetError(
            f"{loc + ': ' if loc else ''}@{fn.sym_name.data}: {allocation.peak} registers per thread are live at once, over the budget of "
            f"{budget}; live at the peak: {listing}"
        )
    return allocation


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


def _fingerprint(fn: func.FuncOp) -> tuple:
    """Every op of `fn`'s body with its operands, attributes and properties (but those of `_NOT_READ` ops),
    compared by identity and value: equal fingerprints mean the same body as the allocator sees it (the ops
    are held by the memo, so their identities are not reused). The kernel's own attributes (the summary
    allocate-registers writes) do not take part."""
    return tuple((op, tuple(op.operands)) if isinstance(op, _NOT_READ) else
                 (op, tuple(op.operands), tuple(op.attributes.items()), tuple(op.properties.items()))
                 for op in fn.body.walk())


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
    for op in live.ops:
        pairs = _alias_sources(op)
        if pairs is not None:
            for i, (value, j) in pairs:
                groups.union(live.element(value, j), live.element(op.results[0], i))
        if isinstance(op, scf.ForOp):
            for arg, result in zip(op.body.block.args[1:], op.results):
                for i in range(element_count(arg.type)):
                    groups.union(live.element(arg, i), live.element(result, i))

    intervals, lowest = _intervals(live, groups.find)
    reads = _GroupReads(live, groups.find)
    for op in live.ops:  # in program order, so a chain of in-place ops shares one set of registers
        for operand, result in _in_place_candidates(op):
            if register_class(operand.type) is None or operand in constants or _is_function_argument(operand, fn):
                continue
            pos = live.position[op]
            roots = [groups.find(live.element(operand, i)) for i in range(element_count(operand.type))]
            dies_here = all(reads.last_read(r, pos, intervals) <= pos for r in roots)
            distinct = len(set(roots)) == len(roots)  # not a broadcast or a shuffle with repeats
            if dies_here and distinct:
                for i, r in enumerate(roots):
                    result_root = groups.find(live.element(result, i))
                    merged = (min(intervals[r][0], intervals[result_root][0]), max(intervals[r][1], intervals[result_root][1]))
                    groups.union(r, result_root)
                    intervals.pop(result_root, None)
                    intervals[groups.find(r)] = merged
                    low = lowest.pop(r) if result_root == r else min(lowest.pop(r), lowest.pop(result_root))
                    lowest[groups.find(r)] = low
                    reads.merge(groups.find(r), r, result_root)
                if not isinstance(op, scf.ForOp):
                    break  # one operand's registers per result
    root_of = groups.roots(len(live.value_of)).__getitem__  # the groups are final: each element's root, looked up
    # The merged intervals are those of the final groups; in the order _intervals gives (by lowest element).
    intervals = dict(sorted(intervals.items(), key=lambda item: lowest[item[0]]))
    ranges = _live_ranges(live, root_of, intervals)

    # Linear scan per class and register space (module docstring). wgmma accumulators are allocated as blocks
    # of consecutive registers, element i at base + i: ptxas keeps a wgmma chain asynchronous only when every
    # accumulator list it sees maps consistently onto its registers (otherwise it serializes the wgmmas, C7511).
    blocks = _accumulator_blocks(live, root_of)
    block_of = {root: block for block in blocks for root in block}
    space_of = _register_spaces(fn, live, root_of)
    index_of_root: dict = {}  # root -> (pool, index in the pool); a pool is (class, space)
    used: dict[tuple[str, int], int] = defaultdict(int)  # registers each pool needs
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
        pool = (cls, space_of[roots[0]])
        while active[pool] and active[pool][0][0] < start:
            _, index = heapq.heappop(active[pool])
            free[pool].add(index)
        # Each accumulator block keeps registers of its own: ptxas maps wgmma chains onto physical registers
        # itself, and a register shared by two chains (even at different times) made it serialize them.
        if cls == "acc":
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
    first: dict[tuple[str, int], int] = {}
    for pool in sorted(used, key=lambda p: (p[1], p[0])):
        first[pool] = counts[pool[0]]
        counts[pool[0]] += used[pool]
    names_of_root = {root: f"{CLASS_PREFIX[pool[0]]}{first[pool] + index}" for root, (pool, index) in index_of_root.items()}

    names = dict(constants)
    for value, elements in live.elements():
        names[value] = [names_of_root[root_of(element)] for element in elements]
    for op in live.ops:  # aliasing results that are not in `elements` order still get their names
        for result in op.results:
            if result not in names and register_class(result.type) is not None and result not in constants:
                names[result] = [names_of_root[groups.find(live.element(result, i))]
                                 for i in range(element_count(result.type))]

    root_names: dict = {}
    for value, elements in live.elements():  # name a register group after its first named value
        if value.name_hint:
            for element in elements:
                root_names.setdefault(root_of(element), value.name_hint)
    widths = {root: CLASS_WIDTH[register_class(live.value_of[root].type)] for root in ranges}
    peak, peak_position, at_peak = _pressure(ranges, root_names, widths)
    return Allocation(names, dict(counts), peak, peak_position, at_peak, _PressureMap(live, root_of, ranges, widths))


def budget_regions(fn: func.FuncOp) -> list[Region]:
    """The regions of `fn` that run under a register budget of their own, in program order: the branches of
    an `scf.if` whose block holds an `sm90.setmaxnreg` (warp-specialize's producer and consumer branches)."""
    return [region for op in fn.walk() if isinstance(op, scf.IfOp) for region in op.regions
            if region.blocks and any(isinstance(inner, sm90.SetMaxNRegOp) for inner in region.block.ops)]


def _register_spaces(fn: func.FuncOp, live: _Liveness, root_of) -> dict:
    """The register space of each register group (module docstring): 0 for the kernel's, k for the k-th
    budget region; a group takes the space of its earliest-defined value."""
    number = {region: k + 1 for k, region in enumerate(budget_regions(fn))}
    earliest: dict = {}  # root -> the earliest-defined value of its group
    for value, elements in live.elements():
        position = live.defs[value]
        for element in elements:
            root = root_of(element)
            if root not in earliest or position < live.defs[earliest[root]]:
                earliest[root] = value
    spaces = {}
    for root, value in earliest.items():
        region = value.owner.parent if isinstance(value, BlockArgument) else value.owner.parent_region()
        while region is not None and region not in number:
            region = region.parent_region()
        spaces[root] = number.get(region, 0)
    return spaces


ELEMENTWISE = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.MaximumfOp, arith.MinimumfOp, arith.NegfOp,
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp, math.FmaOp,
    sm90.SelpOp, sm90.Ex2ApproxOp, sm90.RcpApproxOp, sm90.Lg2ApproxOp,
)
"""Ops whose register i of the result depends only on register i of each operand: computed in place, the
result may take the registers of an operand that dies there."""
_is_elementwise = _subclass_test(ELEMENTWISE)


def _in_place_candidates(op: Operation) -> list[tuple[SSAValue, SSAValue]]:
    """(operand, result) pairs where the result may take the operand's registers if the operand dies there:
    the accumulator of a wgmma (the instruction reads and writes the same list), a same-typed vector operand
    of an elementwise op, and the initial values of a loop's carried registers."""
    if isinstance(op, sm90.WgmmaMmaAsyncOp):
        return [(op.acc, op.result)]
    if isinstance(op, scf.ForOp):
        return list(zip(op.iter_args, op.results))
    if _is_elementwise(op) and len(op.results) == 1 and _is_vector(op.results[0].type):
        return [(v, op.results[0]) for v in op.operands if v.type == op.results[0].type]
    return []


def _accumulator_blocks(live: _Liveness, root: Callable[[int], int]) -> list[tuple]:
    """The register groups of each wgmma accumulator, in element order, one block per distinct chain;
    a group that would sit at two different positions (or in two blocks) is left to ordinary allocation."""
    blocks: dict[tuple, None] = {}
    for op in live.ops:
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
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
    # A run starts at a free index or at one beyond those used so far: try those in order.
    for base in itertools.chain(sorted(i for i in free if i < count), itertools.count(count)):
        if all((base + k in free or base + k >= count) and usable(base + k) for k in range(length)):
            return base


def _overlap(ranges_a, ranges_b) -> bool:
    return any(a <= d and c <= b for a, b in ranges_a for c, d in ranges_b)


class _GroupReads:
    """What the in-place decisions need of each register group, kept per root as groups merge: the loops
    whose carried value the group holds, and the last read of its values other than loop results."""

    def __init__(self, live: _Liveness, root: Callable[[int], int]):
        self.loops: dict[int, set] = defaultdict(set)  # root -> (start, end) of the loops it is carried by
        self.last: dict[int, int] = {}                 # root -> last read (0 if none)
        for value, elements in live.elements():
            loop = live.carried.get(value)
            read = None if isinstance(value.owner, scf.ForOp) else live.read_end(value)
            for element in elements:
                group = root(element)
                if loop is not None:
                    self.loops[group].add(loop)
                if read is not None:
                    self.last[group] = max(self.last.get(group, 0), read)

    def merge(self, root: int, a: int, b: int) -> None:
        """Groups `a` and `b` became one group with root `root`."""
        loops = self.loops.pop(a, set()) | self.loops.pop(b, set())
        last = max(self.last.pop(a, 0), self.last.pop(b, 0))
        if loops:
            self.loops[root] = loops
        if last:
            self.last[root] = last

    def last_read(self, root: int, pos: int, intervals: dict) -> int:
        """The last position at which the group is read, as seen from an op at `pos`. Inside the body of a
        loop whose carried value the group holds, the group is free after its last read in the body: the
        latch writes the next trip's value into it, and the loop result is read only after the loop.
        Anywhere else the group is live to the end of its interval."""
        if not any(start < pos < stop for start, stop in self.loops.get(root, ())):
            return intervals[root][1]
        return self.last.get(root, 0)


def _is_function_argument(value: SSAValue, fn: func.FuncOp) -> bool:
    return isinstance(value, BlockArgument) and value.owner is fn.body.blocks.first


def _stable_key(live: _Liveness, element: int) -> tuple:
    """(name hint, index) of an element: an order of groups that does not depend on object identities."""
    value = live.value_of[element]
    return (value.name_hint or "", element - live.first[value])


def _intervals(live: _Liveness, root: Callable[[int], int]) -> tuple[dict, dict]:
    """(first, last) position of each register group, and its lowest element; loop-carried block arguments
    stay live to the end of their loop (the latch writes them). Groups come in the order of their lowest
    element (elements are numbered in definition order)."""
    intervals: dict = {}
    lowest: dict = {}
    for value, elements in live.elements():
        start = live.defs[value]
        read = live.read_end(value)
        end = start if read is None else max(read, start)
        if isinstance(value, BlockArgument) and isinstance(value.owner.parent_op(), scf.ForOp | scf.WhileOp):
            loop = value.owner.parent_op()
            end = max(end, next(stop for op, _, stop in live.loops if op is loop))
        for element in elements:
            group = root(element)
            if group in intervals:
                s, e = intervals[group]
                intervals[group] = (min(s, start), max(e, end))
            else:
                intervals[group] = (start, end)
                lowest[group] = element
    return intervals, lowest


def _live_ranges(live: _Liveness, root: Callable[[int], int], intervals: dict) -> dict:
    """The positions each register group is live at, as merged ranges: its interval, and the ranges its
    elements are held by in-flight wgmma groups (`_Liveness.in_flight`)."""
    ranges = {root: [interval] for root, interval in intervals.items()}
    for value, held in live.holds.items():
        first = live.element(value)
        for i in range(element_count(value.type)):
            ranges[root(first + i)].extend(held)
    return {root: _merge_ranges(spans) for root, spans in ranges.items()}


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
