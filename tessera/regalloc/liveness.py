"""Liveness of Target IR values over structured control flow, with the holds of asynchronous wgmma operands
(package docstring), and the register-moving ops whose results alias their operands' registers."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from xdsl.dialects import func, scf, vector
from xdsl.dialects.builtin import VectorType
from xdsl.ir import Block, Operation, SSAValue

from tessera.dialects import sm90

from tessera.ir.class_tests import subclass_test
from tessera.regalloc.registers import element_count, register_class


@dataclass
class Liveness:
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
    _elements: list | None = None                   # elements(), once the values are all defined
    _groups: dict = field(default_factory=dict)     # block -> ([position], [op]) of its wgmma commits and waits

    def element(self, value: SSAValue, index: int = 0) -> int:
        """The number of element `index` of `value` (numbered on first sight)."""
        first = self.first.get(value)
        if first is None:
            first = self.first[value] = len(self.value_of)
            self.value_of.extend([value] * element_count(value.type))
        return first + index

    def elements(self) -> list[tuple[SSAValue, range]]:
        """Each value with registers in definition order, with the numbers of its elements (listed once, after
        `run`: the allocator goes over them about eight times)."""
        if self._elements is None or len(self._elements) != len(self.defined):
            first = self.first
            self._elements = [(value, range(first[value], first[value] + element_count(value.type)))
                              for value in self.defined]
        return self._elements

    def run(self) -> None:
        self.counter = 0
        self._block(self.fn.body.blocks.first, 0)
        for op in self.ops:
            if is_wgmma(op):
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
            block = op.parent_block()
            retire, state = self._scan_for_retirement(block, self.position[op], state)  # the ops after `op`
            if retire is not None:
                ranges.append((start, self.position[retire]))
                break
            parent = block.parent_op() if block is not None else None
            if parent is None or isinstance(parent, func.FuncOp):
                ranges.append((start, self.end[block.last_op]))  # never retired: to the end of the kernel
                break
            if isinstance(parent, scf.ForOp | scf.WhileOp):
                ranges.append((start, self.end[parent]))  # through the latch
                trip = None
                if isinstance(parent, scf.ForOp):  # the next trip, from the top of the body
                    trip, _ = self._scan_for_retirement(parent.body.block, 0, state)
                ranges.append((self.position[parent], self.position[trip] if trip is not None else self.end[parent]))
            else:
                ranges.append((start, self.end[block.last_op]))
            op, start = parent, self.end[parent] + 1
        return merge_ranges(ranges)

    def _define(self, value: SSAValue, pos: int) -> None:
        if register_class(value.type) is None or value in self.skip:
            return
        self.element(value)
        self.defined.append(value)
        self.defs[value] = pos

    def _block(self, block: Block, pos: int) -> None:
        for arg in block.args:
            self._define(arg, pos)
        op = block._first_op  # noqa: SLF001 (the links xDSL's iterator follows, without its two calls an op)
        while op is not None:
            self._op(op)
            op = op._next_op  # noqa: SLF001

    def _op(self, op: Operation) -> None:
        self.counter += 1
        start = self.counter
        self.position[op] = start
        self.ops.append(op)
        if _is_commit_or_wait(op):
            found = self._groups.get(op.parent)
            if found is None:
                found = self._groups[op.parent] = ([], [])
            found[0].append(start)
            found[1].append(op)
        defs, skip, uses = self.defs, self.skip, self.uses
        for operand in op._operands:  # noqa: SLF001 (the tuple itself: the `operands` view costs a call each)
            # A value with registers is defined (program order) before it is read: one lookup, mostly.
            if operand in defs or (operand not in skip and register_class(operand.type) is not None):
                uses[operand].append(start)
        for region in op.regions:
            for block in region.blocks:
                self._block(block, start)
        if is_loop(op):
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
        elif op.results and is_if(op):
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


    def _scan_for_retirement(self, block: Block | None, after_position: int,
                             state: tuple[bool, int]) -> tuple[Operation | None, tuple[bool, int]]:
        """Scan the ops of `block` after position `after_position` for the wgmma_wait_group that retires a
        group, given `state` = (its group is committed, groups committed after it). Returns the wait (or None)
        and the state at the end of the scan. Only the block's commits and waits change either, so only those
        are visited (`_groups`, listed as `run` numbers the ops): a scan from each wgmma over every op after it
        was a third of the liveness."""
        committed, after = state
        positions, ops = self._groups.get(block, ((), ()))
        for k in range(bisect.bisect_right(positions, after_position), len(ops)):
            op = ops[k]
            if _is_commit(op):
                committed, after = True, after + 1 if committed else 0
            elif committed and after >= op.pending.value.data:
                return op, (committed, after)
        return None, (committed, after)


def merge_ranges(ranges) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-adjacent ranges covering the same positions."""
    if type(ranges) is list and len(ranges) == 1:  # most values: one range, already merged
        return list(ranges)
    ordered = sorted(ranges)
    if not ordered:
        return []
    # The range being merged is held in two locals, not rebuilt as merged[-1] at each step (2,508 calls a
    # flash d128 compile, 21,250 ranges: 2.9x faster).
    merged: list[tuple[int, int]] = []
    start, end = ordered[0]
    for next_start, next_end in ordered:
        if next_start <= end + 1:
            if next_end > end:
                end = next_end
        else:
            merged.append((start, end))
            start, end = next_start, next_end
    merged.append((start, end))
    return merged


def aliases_operand_registers(op: Operation) -> bool:
    """Whether `op`'s result is a view of its operands' registers (a permutation, selection or repetition
    that prints no instruction)."""
    return alias_sources(op) is not None


is_loop = subclass_test((scf.ForOp, scf.WhileOp))
is_if = subclass_test(scf.IfOp)
is_register_move = subclass_test((vector.ShuffleOp, vector.BroadcastOp, vector.ExtractOp))
_is_commit = subclass_test(sm90.WgmmaCommitGroupOp)
_is_commit_or_wait = subclass_test((sm90.WgmmaCommitGroupOp, sm90.WgmmaWaitGroupOp))
is_wgmma = subclass_test(sm90.WgmmaMmaAsyncOp)


_MASKS: dict[int, tuple] = {}


def _mask_values(mask) -> tuple[int, ...]:
    """The indices of a shuffle mask attribute, decoded once per attribute object (the lowering makes each
    distinct mask once, and a kernel reuses it hundreds of times); each entry keeps its attribute alive, so
    that its id is not reused while the entry is held."""
    entry = _MASKS.get(id(mask))
    if entry is None or entry[0] is not mask:
        if len(_MASKS) > 4096:  # masks of kernels compiled long ago
            _MASKS.clear()
        entry = _MASKS[id(mask)] = (mask, tuple(mask.get_values()))
    return entry[1]


def alias_sources(op: Operation) -> list[tuple[int, tuple[SSAValue, int]]] | None:
    """For a register-moving op, (result element, source element) pairs; None for other ops."""
    if not is_register_move(op):  # most ops: one lookup, not three ABC isinstance checks that fail
        return None
    if isinstance(op, vector.ShuffleOp):
        n1 = element_count(op.v1.type)
        v1, v2 = op.v1, op.v2
        return [(i, (v1, m) if m < n1 else (v2, m - n1)) for i, m in enumerate(_mask_values(op.mask))]
    if isinstance(op, vector.BroadcastOp) and not isinstance(op.source.type, VectorType):
        return [(i, (op.source, 0)) for i in range(element_count(op.vector.type))]
    if isinstance(op, vector.ExtractOp) and not op.dynamic_position and len(op.static_position.get_values()) == 1:
        return [(0, (op.vector, op.static_position.get_values()[0]))]
    return None
