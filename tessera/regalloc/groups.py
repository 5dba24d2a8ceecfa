"""Register groups: which values of a kernel share PTX registers (package docstring), as disjoint sets of
elements (`UnionFind`), with each group's live interval and the reads the in-place decisions need."""

from __future__ import annotations

from collections import defaultdict

from xdsl.dialects import arith, func, math, scf
from xdsl.ir import BlockArgument, Operation, SSAValue

from tessera.dialects import sm90

from tessera.regalloc.liveness import Liveness, alias_sources, is_if, is_loop, is_wgmma
from tessera.ir.class_tests import subclass_test
from tessera.regalloc.registers import is_vector, element_count, register_class


def register_groups(fn: func.FuncOp, live: Liveness, constants: dict) -> tuple[UnionFind, dict, dict]:
    """The register groups of `fn` (package docstring: the values that share registers), with the live
    interval and the lowest element of each group's root: views alias their sources, a loop's results its
    carried arguments, then the in-place decisions in program order (an elementwise op's result takes the
    registers of an operand that dies there, a wgmma's result its accumulator's, a loop's carried registers
    an initial value that dies at the loop), a loop body's yielded value its block argument's where those
    are free (`_coalesce_yields`) and an `scf.if` result its branches' yields (`_coalesce_branch_results`).
    `live` has run; `constants` are the values printed as immediates (no registers)."""
    groups = UnionFind()
    union, element = groups.union, live.element
    for op in live.ops:
        pairs = alias_sources(op)
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
    intervals, lowest = group_intervals(live, snapshot)
    reads = _GroupReads(live, snapshot)
    for op in live.ops:  # in program order, so a chain of in-place ops shares one set of registers
        for operand, result in in_place_candidates(op):
            if register_class(operand.type) is None or operand in constants or _is_function_argument(operand, fn):
                continue
            pos = live.position[op]
            roots = groups.run_roots(live.element(operand), element_count(operand.type))
            carried, last_read = reads.loops, reads.last_read
            # (a group no loop carries is read last where its interval ends: most groups; a loop, not a generator
            # in all(): a resumed frame per element)
            dies_here = True
            for r in roots:
                if (last_read(r, pos, intervals) if carried.get(r) else intervals[r][1]) > pos:
                    dies_here = False
                    break
            distinct = len(set(roots)) == len(roots)  # not a broadcast or a shuffle with repeats
            if dies_here and distinct:
                result_first = live.element(result)
                find, merge, parent = groups.find, reads.merge, groups.parent
                for i, r in enumerate(roots):
                    result_root = find(result_first + i)
                    (a, b), (c, d) = intervals[r], intervals[result_root]
                    merged = (a if a < c else c, b if b > d else d)
                    root = find(r)  # groups.union(r, result_root), inline: result_root is a root
                    if root != result_root:
                        parent[result_root] = root
                    intervals.pop(result_root, None)
                    intervals[root] = merged
                    low = lowest.pop(r) if result_root == r else min(lowest.pop(r), lowest.pop(result_root))
                    lowest[root] = low
                    merge(root, r, result_root)
                if not isinstance(op, scf.ForOp):
                    break  # one operand's registers per result
    _coalesce_yields(live, groups, intervals, lowest, reads, constants, fn)
    _coalesce_branch_results(live, groups, intervals, lowest, reads, constants)
    return groups, intervals, lowest


class UnionFind:
    """Disjoint sets of element numbers (`Liveness.element`); `union(a, b)` makes a's root the root of both."""

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


ELEMENTWISE = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.MaximumfOp, arith.MinimumfOp, arith.NegfOp,
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp, math.FmaOp,
    sm90.SelpOp, sm90.Ex2ApproxOp, sm90.RcpApproxOp, sm90.Lg2ApproxOp, sm90.TanhApproxOp, sm90.RsqrtApproxOp,
    sm90.SinApproxOp, sm90.CosApproxOp,
    math.SqrtOp, math.AbsFOp, math.AbsIOp, math.FloorOp, math.CeilOp, math.RoundEvenOp, math.TruncOp,
    arith.MaxSIOp, arith.MinSIOp, arith.FloorDivSIOp, arith.RemSIOp, arith.ShRSIOp,
    arith.DivSIOp, arith.DivUIOp,
)
"""Ops whose register i of the result depends only on register i of each operand: computed in place, the
result may take the registers of an operand that dies there."""
_is_elementwise = subclass_test(ELEMENTWISE)
_is_for = subclass_test(scf.ForOp)
may_compute_in_place = subclass_test((sm90.WgmmaMmaAsyncOp, scf.ForOp, *ELEMENTWISE))


def in_place_candidates(op: Operation) -> list[tuple[SSAValue, SSAValue]]:
    """(operand, result) pairs where the result may take the operand's registers if the operand dies there:
    the accumulator of a wgmma (the instruction reads and writes the same list), a same-typed vector operand
    of an elementwise op, and the initial values of a loop's carried registers."""
    if not may_compute_in_place(op):
        return []
    if isinstance(op, sm90.WgmmaMmaAsyncOp):
        return [(op.acc, op.result)]
    if isinstance(op, scf.ForOp):
        return list(zip(op.iter_args, op.results))
    if _is_elementwise(op) and len(op.results) == 1 and is_vector(op.results[0].type):
        return [(v, op.results[0]) for v in op.operands if v.type == op.results[0].type]
    return []


def _coalesce_yields(live: Liveness, groups: UnionFind, intervals: dict, lowest: dict, reads: _GroupReads,
                     constants: dict, fn: func.FuncOp) -> None:
    """A value a loop body yields takes the registers of the block argument it becomes, where the argument's
    registers are free by then: every value of the argument's group is last read (and last held by an
    in-flight wgmma) in the body before the first value of the yielded value's group is defined, and that
    group lives only inside the body. The latch then moves nothing for it, and the two are not counted at
    once (overlap-softmax's converted P, made at the end of a trip after the previous P.V mma retired, is
    what the next trip's mma reads). Accumulator chains are left alone (`_accumulator_blocks` places them)."""
    accumulators = {root for op in live.ops if is_wgmma(op)
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


def _coalesce_branch_results(live: Liveness, groups: UnionFind, intervals: dict, lowest: dict,
                             reads: _GroupReads, constants: dict) -> None:
    """A result of an `scf.if` takes the registers its branches yield where every branch yields (register by
    register) the same register group and that group is dead where the branches join: then no branch moves
    anything into the result. peel-masked-iterations{branch=true}'s masks are the case: one branch yields the
    score tile, the other its masked form, computed in place (the masking select is the tile's last read), so
    both are one group, read last by the yields."""
    for op in live.ops:
        if not (is_if(op) and op.results and op.false_region.blocks):
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

    def __init__(self, live: Liveness, groups: UnionFind, branch: scf.IfOp, yielded: list, result: SSAValue):
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


def _merge_groups(groups: UnionFind, intervals: dict, lowest: dict, reads: _GroupReads, a, b):
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


class _GroupReads:
    """What the in-place decisions need of each register group, kept per root as groups merge: the loops
    whose carried value the group holds, and the definition and last read of its values other than loop
    results."""

    def __init__(self, live: Liveness, roots: list[int]):
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


def group_intervals(live: Liveness, roots: list[int]) -> tuple[dict, dict]:
    """(first, last) position of each register group, and its lowest element; loop-carried block arguments
    stay live to the end of their loop (the latch writes them). Groups come in the order of their lowest
    element (elements are numbered in definition order). `roots`: each element's root."""
    intervals: dict = {}
    lowest: dict = {}
    for value, elements in live.elements():
        start = live.defs[value]
        read = live.read_end(value)
        end = start if read is None else max(read, start)
        if isinstance(value, BlockArgument) and is_loop(value.owner.parent_op()):
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
