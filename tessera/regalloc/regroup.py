"""The register groups of a kernel that a pass changed only by moving, adding, removing or rewiring plain ops,
taken from its previous allocation instead of decided again.

hoist-invariant-descriptors allocates the kernel warp-specialize allocated, after moving Q's k-step descriptor
advances ahead of the loops and making each ring's slot descriptors from one hoisted descriptor. Deciding the
groups (`tessera.regalloc.groups.register_groups`: views, loop-carried registers, in-place results, coalesced
yields and branch results) is most of a fresh allocation, and the changed kernel's decisions are the previous
ones: each decision compares the positions of the values it is about (their definitions, reads and holds, the
loops and branches around them), and a change that leaves every op it does not touch in the same order moves
no position past another, so only the decisions about the values it touches could differ. Those are none
when the touched values take part in none: this module checks that, and maps the previous groups onto the
changed kernel's element numbers (`regroup`); the intervals, pressure and names are then worked out afresh
from the new liveness, as for any allocation.

The change is read off the two fingerprints the allocator's memo keeps (`kernel_changes`): an op of both
bodies keeps its place when it is on a longest run of ops in the previous order, and every other op of the new
body is *moved*; ops only in the new body are *added*, ops only in the previous one *removed*, and an op whose
operands changed is *rewired* at those operands. An op whose attributes or properties changed is not a change
this module takes (None: allocate afresh).

The touched values are the results and operands of the moved, added and removed ops and the old and new
operands a rewired op changed. The groups carry over when:
- moved, added and removed ops are plain: no regions, not a terminator, not a view (`vector.shuffle`,
  `extract`, `broadcast`), no in-place decision of their own (a wgmma, a loop, an elementwise op with a
  vector result), and not a wgmma commit or wait (which end the holds of in-flight operands);
- a rewired op changed no operand it shares registers with or holds (a wgmma's accumulator or register A, an
  operand an elementwise op may compute in place over) and is not a view, a terminator or an op with regions;
- every touched value with registers is read only by such plain uses, was in a group of its own in the
  previous allocation, and is an op result, a kernel argument or a loop's induction variable (not a
  loop-carried or branch argument);
- a value with registers is new only as an added op's result, and gone only as a removed op's.
Anything else returns None and the kernel is allocated afresh. `tests/test_regalloc_regroup.py` compares the
carried-over allocation with a fresh one, name by name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.traits import IsTerminator

from tessera.dialects import sm90
from tessera.regalloc.groups import ELEMENTWISE, UnionFind, in_place_candidates
from tessera.regalloc.liveness import Liveness, is_register_move
from tessera.regalloc.registers import element_count, is_vector, register_class


@dataclass
class KernelChanges:
    """How a kernel's body differs from the one a previous fingerprint was taken of (module docstring)."""

    moved: list[Operation]
    added: list[Operation]
    removed: list[tuple]
    """The previous fingerprint's entries (op, operands, ...) of the ops no longer in the body."""
    rewired: list[tuple[Operation, tuple, tuple]]
    """(op, previous operands, operands) of the ops whose operands changed."""


def kernel_changes(previous: tuple, current: tuple) -> KernelChanges | None:
    """The change from the body `previous` fingerprints to the one `current` does (`allocate._fingerprint`:
    an entry per op, (op, operands, attributes, properties)); None where an op's attributes or properties
    changed."""
    index = {entry[0]: i for i, entry in enumerate(previous)}
    present, added, rewired = [], [], []
    for entry in current:
        i = index.get(entry[0])
        if i is None:
            added.append(entry[0])
            continue
        before = previous[i]
        if before[2:] != entry[2:]:
            return None
        if before[1] != entry[1]:
            rewired.append((entry[0], before[1], entry[1]))
        present.append(i)
    kept = _longest_increasing(present)
    moved = [previous[i][0] for i in present if i not in kept]
    ops = {entry[0] for entry in current}
    removed = [entry for entry in previous if entry[0] not in ops]
    return KernelChanges(moved, added, removed, rewired)


def _longest_increasing(sequence: list[int]) -> set[int]:
    """The members of a longest increasing subsequence of `sequence` (distinct numbers)."""
    tails: list[int] = []  # tails[k]: position in `sequence` of the last member of the best run of length k + 1
    before = [-1] * len(sequence)
    for position, number in enumerate(sequence):
        low, high = 0, len(tails)
        while low < high:
            middle = (low + high) // 2
            if sequence[tails[middle]] < number:
                low = middle + 1
            else:
                high = middle
        before[position] = tails[low - 1] if low else -1
        if low == len(tails):
            tails.append(position)
        else:
            tails[low] = position
    kept, position = set(), tails[-1] if tails else -1
    while position >= 0:
        kept.add(sequence[position])
        position = before[position]
    return kept


def _decides(op: Operation) -> bool:
    """Whether the groups depend on where `op` is: regions, a terminator, a view, an in-place decision, or a
    wgmma commit or wait (read off its class and result types: a removed op has lost its operands)."""
    if op.regions or is_register_move(op) or op.has_trait(IsTerminator):
        return True
    if isinstance(op, sm90.WgmmaMmaAsyncOp | sm90.WgmmaCommitGroupOp | sm90.WgmmaWaitGroupOp | scf.ForOp):
        return True  # (commits and waits end the holds of the wgmma operands: `Liveness.in_flight`)
    return isinstance(op, ELEMENTWISE) and len(op.results) == 1 and is_vector(op.results[0].type)


def _shared_operands(op: Operation) -> list[SSAValue]:
    """The operands of `op` whose registers a decision is about: those it may compute in place over, and a
    wgmma's register A (held while the wgmma is in flight)."""
    shared = [operand for operand, _ in in_place_candidates(op)]
    if isinstance(op, sm90.WgmmaMmaAsyncOp) and op.a_in_registers:
        shared.append(op.a)
    return shared


def _plain_use(value: SSAValue) -> bool:
    """Every read of `value` is one no decision is about."""
    for use in value.uses:
        user = use.operation
        if user.regions or is_register_move(user) or user.has_trait(IsTerminator):
            return False
        if any(shared is value for shared in _shared_operands(user)):
            return False
    return True


def regroup(fn: func.FuncOp, live: Liveness, constants: dict, previous: Liveness, previous_roots: list[int],
            changes: KernelChanges) -> UnionFind | None:
    """The register groups of `fn` (whose liveness `live` has run; `constants`: its immediates) as those of
    the previous allocation (`previous`, its liveness, and `previous_roots`, each element's root), when
    `changes` leaves every decision as it was (module docstring); None otherwise."""
    touched: set[SSAValue] = set()
    for op in changes.moved + changes.added:
        if _decides(op):
            return None
        touched.update(op.results)
        touched.update(op.operands)
    for entry in changes.removed:
        if _decides(entry[0]):
            return None
        touched.update(entry[0].results)
        touched.update(entry[1])
    for op, before, after in changes.rewired:
        if len(before) != len(after) or op.regions or is_register_move(op) or op.has_trait(IsTerminator):
            return None
        shared = _shared_operands(op)
        for old, new in zip(before, after):
            if old is not new:
                if any(s is new for s in shared):
                    return None
                touched.update((old, new))

    numbered = previous.elements()
    if len(previous.value_of) != (numbered[-1][1].stop if numbered else 0):
        return None  # elements numbered outside the definitions (`Liveness.element` on first sight): not mapped
    added = {result for op in changes.added for result in op.results}
    removed = {result for entry in changes.removed for result in entry[0].results}
    if any(value not in previous.first and value not in added for value in live.defined):
        return None
    if any(value not in live.first and value not in removed for value in previous.defined):
        return None

    sizes = None
    for value in touched:
        if register_class(value.type) is None or (value in constants and value not in previous.first):
            continue
        if value in live.first:
            if isinstance(value, BlockArgument) and not _kernel_argument_or_index(value, fn):
                return None
            if not _plain_use(value):
                return None
        first = previous.first.get(value)
        if first is not None:
            sizes = sizes or Counter(previous_roots)
            if any(sizes[previous_roots[e]] != 1 for e in range(first, first + element_count(value.type))):
                return None

    # Each element points at its group's root, as the previous roots map onto the new numbers: a root stays a
    # root (the decisions, made in the same order, make the same unions), an added op's result is its own.
    old_to_new = [-1] * len(previous.value_of)
    new_first = live.first
    for value, elements in previous.elements():
        first = new_first.get(value)
        if first is not None:
            old_to_new[elements.start:elements.stop] = range(first, first + len(elements))
    parent = list(range(len(live.value_of)))
    for value, elements in live.elements():
        first = previous.first.get(value)
        if first is not None:
            roots = previous_roots[first:first + len(elements)]
            parent[elements.start:elements.stop] = [old_to_new[r] for r in roots]
    if -1 in parent:
        return None  # (a group whose root's value is gone: not a change the checks above let through)
    groups = UnionFind()
    groups.parent = parent
    return groups


def _kernel_argument_or_index(value: BlockArgument, fn: func.FuncOp) -> bool:
    """A kernel argument, or an `scf.for`'s induction variable (not loop-carried: live over its loop whatever
    reads it)."""
    if value.owner is fn.body.blocks.first:
        return True
    return value.index == 0 and isinstance(value.owner.parent_op(), scf.ForOp)
