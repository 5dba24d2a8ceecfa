"""`hoist-invariant-descriptors`: compute once, before the K/V loops, the wgmma descriptors that no trip changes,
as many as the consumer warpgroups' register budgets leave room for.

Input: warp-specialized Target IR (after `warp-specialize`, before `allocate-registers`). A *loop-invariant
advance* is an `sm90.descriptor_advance` (a k-step's descriptor: its base descriptor plus an offset) inside an
`scf.for` that does not define its base. In the flash forward these are the k-steps of the Q operand of
S = Q K^T: the score mma of every trip reads the same Q slot. Output: the same kernels, the first N distinct
(base, bytes) of them in program order computed once, right after their base's definition, and every advance
of one of those (in the loops and in the peeled trips) replaced by that value; the others stay in the loops.

Why: `rematerialize-constants` re-creates each advance right before its wgmma, so the loop recomputes Q's
k-step descriptors on every trip, and no ptxas hoists them: 12.9 and 13.0 spend a UIADD3.64 on each, 13.4 and
later a UIADD3.64 and a UMOV pair. Computed once, ptxas keeps them in uniform registers across the loop
(docs/performance.md has the SASS figures).

Budgets: a hoisted advance holds a 64-bit register from its base over the loops, where the budget regions
peak. A warp-uniform one (Q's: its address is a shared buffer plus the warpgroup index broadcast from lane 0)
is a uniform descriptor (`tessera.regalloc.uniform`): ptxas keeps it in a uniform register, and the
allocator's per-thread count leaves it out while the uniform file has room. So all candidates are tried
first; where the hoisted kernel is over a region's budget after all (descriptors that are not uniform, or too
many for the uniform file, cost `REGISTERS_PER_DESCRIPTOR` each), N is the spare registers of the tightest
region that runs under a `sm90.setmaxnreg` budget (its budget minus the allocator's peak) over 2, and fewer
are tried down from there. Kernels without budget regions (not warp-specialized) are left unchanged, and
kernels with fewer than 2 spare registers hoist no advance (the flash d128 consumers, 128 x 176 and 128 x 128:
all 7 of Q's advances; the head_dim 64 block-sparse one: none, its rings' descriptors below still are).

Ring buffers: a K/V slot's descriptor is `sm90.make_descriptor` of the ring's address plus the trip's slot
offset, made on every trip (mask, shift, or: five uniform instructions a ring). The pass makes the ring's own
descriptor once, before the outermost loop (one per ring and block, shared by the peeled loops that follow), and
each slot's is that descriptor moved by the slot offset (`sm90.descriptor_offset`: the start field is the
address >> 4, and a slot of a buffer below 2^18 bytes never carries out of it). It costs the budgets the same
(the ring's descriptor is a uniform descriptor) and is kept where the hoisted kernel still fits. The d128
steady loop, ptxas 12.9 / 13.0 / 13.5: 574 / 572 / 607 -> 567 / 569 / 602 at 128 x 176, 453 / 454 / 488 ->
448 / 449 / 470 at 128 x 128 (docs/performance.md). In a loop that runs its first trip itself
(overlap-softmax{fold=true}: `_folds_first_trip`), a slot descriptor whose offset the loop does not change
(Q's, the warpgroup's rows) is made once before the loop, so that Q's k-step advances are loop-invariant as
they were when a peeled first trip made it.

Invariants: every wgmma reads the same descriptor values as before (an advance is pure, and its base is
defined, unchanged, before every use); only where they are computed changes, so results are bitwise equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.dialects import sm90
from tessera.ir.kernel_marks import target_kernels_in
from tessera.regalloc import region_peaks

REGISTERS_PER_DESCRIPTOR = 2
"""32-bit registers per thread a 64-bit descriptor takes in the allocator's count."""
_is_advance, _is_make_descriptor = subclass_test(sm90.DescriptorAdvanceOp), subclass_test(sm90.MakeDescriptorOp)
_is_if, _is_setmaxnreg = subclass_test(scf.IfOp), subclass_test(sm90.SetMaxNRegOp)
"""(Asked of every op of the kernel, several times per compile.)"""


def _defines(loop: scf.ForOp, value: SSAValue) -> bool:
    """Whether `value` is defined inside `loop` (its body's arguments included)."""
    owner = value.block if isinstance(value, BlockArgument) else value.owner.parent_block()
    while owner is not None:
        if owner.parent_op() is loop:
            return True
        parent = owner.parent_op()
        owner = parent.parent_block() if parent is not None else None
    return False


def _invariant_in_a_loop(advance: sm90.DescriptorAdvanceOp) -> bool:
    """Whether an `scf.for` around `advance` does not define its base descriptor."""
    op: Operation | None = advance.parent_op()
    while op is not None:
        if isinstance(op, scf.ForOp) and not _defines(op, advance.descriptor):
            return True
        op = op.parent_op()
    return False


def invariant_advances(fn: func.FuncOp) -> list[tuple[SSAValue, int]]:
    """(base, bytes) of each loop-invariant advance of `fn` (module docstring), once each, in program order."""
    keys = [(op.descriptor, op.bytes.value.data) for op in walk_ops(fn)
            if _is_advance(op) and _invariant_in_a_loop(op)]
    return list(dict.fromkeys(keys))


@dataclass
class HoistedDescriptors:
    """What `hoist_descriptors` changed, to keep or to take back: the advances it made (in insertion order)
    and each advance it replaced, detached but kept, with where it was (its block and the op after it, as
    before anything moved) and its uses."""

    made: list[Operation]
    replaced: list[tuple[Operation, Block, Operation, list[tuple[Operation, int]]]]

    def keep(self) -> None:
        """Keep the hoist: the replaced advances are erased."""
        for op, _, _, _ in self.replaced:
            op.erase()

    def undo(self) -> None:
        """Take the hoist back: every replaced advance where it was, read by its uses again, and the hoisted
        ones erased; the kernel is as it was before `hoist_descriptors`."""
        for op, block, following, _ in reversed(self.replaced):  # the op after each is back before it
            block.insert_op_before(op, following)
        for op, _, _, uses in self.replaced:
            for user, index in uses:
                user.operands[index] = op.result
        for op in reversed(self.made):
            Rewriter.erase_op(op)


def hoist_descriptors(fn: func.FuncOp, keys: list[tuple[SSAValue, int]]) -> HoistedDescriptors:
    """Compute the advances `keys` ((base, bytes) of `invariant_advances`) once, right after their bases, and
    make every advance of the same base and bytes use that value. The replaced advances are detached, not
    erased, until the caller keeps or undoes the hoist (`HoistedDescriptors`): `_hoist_advances` tries a
    count in place and takes it back where the budgets refuse it, instead of hoisting into a copy of the
    kernel (a copy of the flash d128 kernel was 4% of its compile)."""
    wanted = set(keys)
    places = [(op, op.parent_block(), op.next_op) for op in walk_ops(fn)
              if _is_advance(op) and (op.descriptor, op.bytes.value.data) in wanted]
    hoisted: dict[tuple[SSAValue, int], SSAValue] = {}
    made: list[Operation] = []
    last: dict[SSAValue, Operation] = {}  # the op the next hoisted advance of a base goes after
    for base, nbytes in keys:
        advance = sm90.DescriptorAdvanceOp(base, nbytes)
        after = last.get(base)
        if after is not None:
            after.parent_block().insert_op_after(advance, after)
        elif isinstance(base, BlockArgument):
            block: Block = base.block
            block.insert_op_before(advance, block.first_op)
        else:
            base.owner.parent_block().insert_op_after(advance, base.owner)
        hoisted[(base, nbytes)] = advance.result
        last[base] = advance
        made.append(advance)
    replaced = []
    for op, block, following in places:
        value = hoisted[(op.descriptor, op.bytes.value.data)]
        value.name_hint = value.name_hint or op.result.name_hint
        replaced.append((op, block, following, [(use.operation, use.index) for use in op.result.uses]))
        op.result.replace_all_uses_with(value)
        op.detach()
    return HoistedDescriptors(made, replaced)


def _outermost_loop(op: Operation) -> scf.ForOp | None:
    """The outermost `scf.for` around `op` (None outside loops)."""
    outermost, parent = None, op.parent_op()
    while parent is not None:
        if isinstance(parent, scf.ForOp):
            outermost = parent
        parent = parent.parent_op()
    return outermost


def _slot_descriptor(op: Operation) -> tuple[sm90.SharedBufferOp, SSAValue] | None:
    """(buffer, offset) of a `sm90.make_descriptor` of `buffer + offset` inside a loop: a ring slot's
    descriptor made on every trip; None for any other."""
    if not _is_make_descriptor(op) or _outermost_loop(op) is None:
        return None
    address = op.address
    if isinstance(address, BlockArgument) or not isinstance(address.owner, arith.AddiOp):
        return None
    for buffer, offset in (address.owner.operands, reversed(address.owner.operands)):
        if not isinstance(buffer, BlockArgument) and isinstance(buffer.owner, sm90.SharedBufferOp):
            return buffer.owner, offset
    return None


def _ring_key(op: sm90.MakeDescriptorOp, buffer: sm90.SharedBufferOp) -> tuple:
    """What one hoisted ring descriptor serves: the block of the outermost loop, the buffer and the encoding."""
    return (id(_outermost_loop(op).parent_block()), buffer.sym.data, buffer.offset.value.data, op.lbo.value.data,
            op.sbo.value.data, op.swizzle.value.data)


def _slot_rings(fn: func.FuncOp) -> set[tuple]:
    """The ring descriptors `hoist_slot_descriptors` would make (`_ring_key`s)."""
    return {_ring_key(op, found[0]) for op in walk_ops(fn) if (found := _slot_descriptor(op)) is not None}


def hoist_slot_descriptors(fn: func.FuncOp) -> int:
    """Make each ring buffer's descriptor once, before the outermost loop that makes its slots' descriptors,
    and each slot's (`sm90.make_descriptor` of buffer + offset in a loop) that descriptor moved by the offset
    (`sm90.descriptor_offset`); the number of descriptors rewritten. One hoisted descriptor per buffer,
    encoding and block serves every loop of that block after it (the peeled loops of one K/V loop)."""
    hoisted: dict[tuple, SSAValue] = {}
    fixed: dict[tuple, sm90.DescriptorOffsetOp] = {}
    count = 0
    for op in [o for o in walk_ops(fn) if _slot_descriptor(o) is not None]:
        buffer, offset = _slot_descriptor(op)
        loop = _outermost_loop(op)
        block = loop.parent_block()
        key = _ring_key(op, buffer)
        if key not in hoisted:
            base = buffer.clone()
            descriptor = sm90.MakeDescriptorOp(base.result, op.lbo.value.data, op.sbo.value.data,
                                               op.swizzle.value.data)
            descriptor.result.name_hint = f"{buffer.sym.data}_descriptor"
            block.insert_ops_before([base, descriptor], loop)
            hoisted[key] = descriptor.result
        address = op.address.owner
        if _defines(loop, offset) or not _folds_first_trip(loop):
            moved = sm90.DescriptorOffsetOp(hoisted[key], offset)
            moved.result.name_hint = op.result.name_hint
            Rewriter.replace_op(op, moved)
        else:  # the same slot on every trip of a folded loop (Q's): made once, before the loop
            if (key, offset) not in fixed:
                fixed[(key, offset)] = sm90.DescriptorOffsetOp(hoisted[key], offset)
                fixed[(key, offset)].result.name_hint = op.result.name_hint
                block.insert_op_before(fixed[(key, offset)], loop)
            op.result.replace_all_uses_with(fixed[(key, offset)].result)
            Rewriter.erase_op(op)
        count += 1
        if not address.results[0].uses:
            Rewriter.erase_op(address)
            if not buffer.result.uses:
                Rewriter.erase_op(buffer)
    return count


def _folds_first_trip(loop: scf.ForOp) -> bool:
    """Whether `loop`'s body holds an update branch (overlap-softmax's fold: one path issues and commits a wgmma
    group, the other issues none). Its first trip runs in the loop, so no peeled trip before it makes the
    descriptors every trip reads (Q's), which cse used to let the loop reuse: `hoist_slot_descriptors` makes
    them once before the loop instead. Other loops keep their per-trip slot descriptors as they were."""
    for op in loop.body.block.ops:
        if isinstance(op, scf.IfOp) and op.false_region.blocks:
            issues = [any(isinstance(o, sm90.WgmmaMmaAsyncOp) for o in r.block.ops) for r in op.regions]
            commits = [any(isinstance(o, sm90.WgmmaCommitGroupOp) for o in r.block.ops) for r in op.regions]
            if sorted(issues) == [False, True] and commits[issues.index(True)]:
                return True
    return False


def _budget_splits(fn: func.FuncOp) -> list[scf.IfOp]:
    """The `scf.if` ops whose branches run under budgets of their own (each opens with `sm90.setmaxnreg`)."""
    return [op for op in walk_ops(fn) if _is_if(op)
            and any(_is_setmaxnreg(inner) for region in op.regions if region.blocks
                    for inner in region.block.ops)]


def spare_registers(fn: func.FuncOp) -> int | None:
    """The fewest registers left between a budget region's allocator peak and its `sm90.setmaxnreg` budget
    (negative when one is over); None for a kernel without budget regions."""
    spare = None
    for split in _budget_splits(fn):
        for region, peak in zip(split.regions, region_peaks(fn, split)):
            budgets = [op.count.value.data for op in region.block.ops if isinstance(op, sm90.SetMaxNRegOp)] \
                if region.blocks else []
            if budgets:
                spare = budgets[0] - peak.registers if spare is None else min(spare, budgets[0] - peak.registers)
    return spare


@dataclass(frozen=True)
class HoistInvariantDescriptorsPass(ModulePass):
    """Hoist loop-invariant wgmma descriptor advances out of the K/V loops where the budgets allow (module
    docstring)."""

    name = "hoist-invariant-descriptors"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in target_kernels_in(op):
            spare = spare_registers(kernel)  # warp-specialize's allocation, from the allocator's memo
            if spare is None or spare < 0:
                continue
            rings = _slot_rings(kernel)
            if rings and spare >= REGISTERS_PER_DESCRIPTOR * len(rings):
                # Fits even if the rings' descriptors were counted 2 each (they are uniform: 0 while the uniform
                # file has room), and a slot's descriptor_offset lives where its make_descriptor did.
                hoist_slot_descriptors(kernel)
            elif rings:
                candidate = kernel.clone()
                hoist_slot_descriptors(candidate)
                if spare_registers(candidate) >= 0:
                    Rewriter.replace_op(kernel, candidate)
                    kernel = candidate
                else:
                    candidate.erase()
            keys = invariant_advances(kernel) if spare >= REGISTERS_PER_DESCRIPTOR else []
            if keys:
                _hoist_advances(kernel, keys, spare)


def _hoist_advances(kernel: func.FuncOp, keys: list[tuple[SSAValue, int]], spare: int) -> None:
    """Hoist as many of the advances `keys` as the kernel's budgets allow (module docstring), in place; none
    where none fits. Each count is tried in place, its allocation then being the one allocate-registers finds
    in the allocator's memo, and undone where it does not fit."""
    # Each hoisted descriptor is live over the loops, where the peaks are: it takes its registers from the spare
    # ones; fewer are tried where the allocation says the first count does not fit. First all of them: ptxas
    # keeps warp-uniform ones in uniform registers, which the allocator does not count against the budget
    # (tessera.regalloc.uniform) while the uniform file has room for them.
    counts = [len(keys)] + list(range(min(len(keys) - 1, spare // REGISTERS_PER_DESCRIPTOR), 0, -1))
    for count in counts:
        hoist = hoist_descriptors(kernel, invariant_advances(kernel)[:count])
        if spare_registers(kernel) >= 0:
            hoist.keep()
            return
        hoist.undo()
