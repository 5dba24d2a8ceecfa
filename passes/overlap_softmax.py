"""`overlap-softmax`: rotate a pipelined attention loop so that each trip's softmax overlaps a tensor-core mma.

FlashAttention-3's intra-warpgroup overlap, written at Tile level. In trip t of the rotated loop the score mma
S_t = Q K_t^T is issued first, then the delayed P.V mma of trip t-1, then the softmax of trip t: the tensor
core works on the mmas while the other units compute exponentials and row reductions. Whatever a P.V mma reads
(the accumulator scaled by its alpha, P converted to bf16/f16) is written at the end of the trip before, once
the previous P.V mma has retired, so nothing but wgmma writes a wgmma's input registers while a group is in
flight (ptxas serializes the wgmmas of a kernel where something does: warning C7513).

Input: a loop in the form `pipeline-loops{stages=N}` writes (see its docstring). The pass looks for an
*accumulator*: an iter_arg whose forward slice in the body holds only pure ops without regions, contains a
`tile.mma`, ends in the `tile.mma` that is yielded at the iter_arg's position, and has no value used outside
it except by that yield. The body is split into

    A_copy = the load section: the ops holding tile.cp_async (the guarded scf.if) and the cp_commit_groups,
    B_core = the accumulator slice, split into
             B_scale = the register ops of the slice that compute the P.V mma's accumulator operand (acc * alpha)
             B_mma   = the rest: the P.V tile.mma,
    B_rel  = the tile.release of the stages B_core reads,
    A_pre  = the other ops up to the first tile.mma outside the slice (S): the trip's index arithmetic, its
             tile.cp_wait_group, the views, S itself,
    A_rest = the other ops after S (the softmax, the releases of the stages only A reads),
    A_sink = the pure ops of A_rest whose results only B_mma and B_rel use (P's conversion to the mma type),
             taken out of A_rest and run last, once the previous P.V mma has retired, so that the converted P
             can take the registers of the previous one instead of being copied into them at the loop's end.

and rewritten, with n = ceildivsi(ub - lb, step), with `fold=false` as

    scf.if n > 0 {
      A_pre(lb) A_rest(lb) A_sink(lb) B_scale(lb) A_copy(lb)                              // trip 0
      scf.for %iv = lb + step to ub step step iter_args(..., carried values) {
        A_pre(iv) B_mma(iv - step) A_rest(iv) B_rel(iv - step) B_scale(iv) A_sink(iv) A_copy(iv)
      }
      B_mma(lb + (n-1) step) B_rel(lb + (n-1) step)                                       // trip n-1
    } else { the loop's initial values }

With `fold=true` (the default) trip 0 is not peeled: the loop runs every trip, and the previous trip's B_mma
and B_rel run under a warp-uniform branch that skips them on the first:

    scf.if n > 0 {
      scf.for %iv = lb to ub step step iter_args(..., the initial values, P_init = tile.fill 0.0) {
        A_pre(iv)
        %first = arith.cmpi eq, %iv, %lb
        (iv - step's indices: the V stage)
        %acc = scf.if %first { yield the accumulator } else { B_mma(iv - step); yield its result }
        A_rest(iv)
        scf.if %first {} else { B_rel(iv - step) }
        B_scale(iv) A_sink(iv) A_copy(iv)
      }
      B_mma(lb + (n-1) step) B_rel(lb + (n-1) step)
    } else { the loop's initial values }

so the key-block body (the softmax, the masks) is printed once instead of twice: at head_dim 128 the PTX
drops from 2,289 to 1,627 lines (a quarter of its wgmma instructions, which ptxas' time follows) for 3-5 more
SASS instructions per steady trip (the compare and the branch; docs/compile-time.md). The accumulator's
iter_arg then carries the accumulator before
B_mma (on trip 0 the initial one, which B_scale(lb) scales, as the peeled trip did). The carried values start
as zero fills that no trip reads (trip 0 skips B_mma); a loop whose carried values are not all register
tiles is rotated the peeled way. The skipping branch comes first so that the accumulator's last read is the
mma, which updates it in place; convert-tile-to-sm90 keeps the score mma's wgmma group in flight across the
branch and retires every group on the skipping path (control.py), so the wait counts after the join, those of
the peeled form, complete at least as much on both paths.

The accumulator's iter_arg of the peeled rotated loop carries the scaled accumulator (B_scale's result, the operand
the next B_mma adds to). When a slice does not split that way (a B_scale op that reads shared memory or holds
an mma, or a B_mma that reads a B_scale value other than its accumulator), B_scale is empty and B_mma is the
whole slice, run at iv - step as before.

Values of A that B_mma uses are *carried* to the next trip as new iter_args when they are register tiles (P)
or other non-address values; index arithmetic, `tile.stage` and `tile.view` are *recomputed* from
iv - step (clones of the body's ops, so a stage index stays `arith.remui %u, %cN` of the use index, which
convert-tile-to-sm90 needs). A_copy now follows the wait, so the wait's pending count drops by the number of
commits in A_copy (one: N-1 becomes N-2) and it still completes the same copies: before the wait of trip t the
loads 0 .. t+N-2 are committed and load t must have landed.

Invariants: every op of the original body runs once per trip, in the same order as before relative to the ops
of its own part (A or B), on the same values, so results are bit-identical; the refill of a ring stage
(A_copy(t) fills the stage of use t-1) follows its release (B_rel(t-1)); every wait completes the same copies
as before. The result is correct for every trip count, 0 and 1 included, and for trip counts that differ
between blocks (causal).

Left alone: loops without an accumulator or without a second tile.mma (GEMM K loops, the loops of
three-pass attention, the statistics loop of two-pass attention), loops with more than one accumulator (the
attention backward's dK and dV: delayed by a trip, each would be live twice, the carried value and the
delayed update's result, 393 registers per thread at head_dim 128 where the unrotated loop needs 255; the
rotation is the forward's overlap of its one P.V mma), and loops already rotated (their copies follow their
wait), so that running the pass twice changes nothing.
Refused (`OverlapSoftmaxError`, "overlap-softmax: <op>: <rule>", before any loop is changed): a loop with an accumulator whose P.V mma
reads a shared tile that the loop refills every trip but that is not a stage of a ring of N >= 2 stages (the
loop is not pipelined, or stages=1: the next trip's copy would overwrite what B still reads); a body that is
not in the pipelined form (not exactly one cp_wait_group, copies with results, a wait after the S mma, a
wait covering fewer groups than A_copy commits); B needing a shared or global view that cannot be recomputed
for the previous trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import Pure
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.diagnostics import located
from tessera.ir.remarks import unpipelined_remark
from tessera.ir.walk import walk_ops
from tessera.analysis.loop_trips import (
    IndexBuilder,
    clone_at_iv,
    defined_in,
    erase_dead_code,
    is_recomputable,
)
from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.interpreters.block_batch import describe_op


class OverlapSoftmaxError(DiagnosticException):
    """A loop overlap-softmax must rotate but cannot; the message names the loop or op and the rule."""


def _refuse(op: Operation, message: str) -> None:
    raise OverlapSoftmaxError(located(op, f"overlap-softmax: {describe_op(op)}: {message}", name_op=False))


def _name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


NO_OVERLAP_ATTR = "tile.no_overlap"
"""A unit attribute on an `scf.for` that keeps this pass from rotating it: its trips keep one score tile in
flight (set by a kernel whose loop cannot afford a second one beside what it computes, a block-sparse
kernel's loop over partial blocks evaluating a mask_mod)."""


@dataclass
class Rotation:
    """How one loop is rotated (see the module docstring)."""

    loop: scf.ForOp
    accumulators: list[int]  # iter_arg positions whose value B_core computes
    scaled: dict[int, SSAValue]  # per accumulator, the value its B_mma adds to (B_scale's result or the iter_arg)
    a_pre: list[Operation]
    b_scale: list[Operation]
    b_mma: list[Operation]
    a_rest: list[Operation]
    a_sink: list[Operation]  # pure ops of A whose results only B_mma/B_rel use (P's conversion)
    b_rel: list[Operation]
    a_copy: list[Operation]
    wait: tile.CpWaitGroupOp
    pending: int  # the wait's pending count once A_copy follows it
    carried: list[SSAValue]  # what B takes from A of the same trip, carried to the next trip
    recomputed: list[SSAValue]  # what B takes from the body that is recomputed from iv - step


def accumulator_slice(loop: scf.ForOp, position: int) -> list[Operation] | None:
    """The forward slice of iter_arg `position` in the body, in body order, if it makes that iter_arg an
    accumulator (see the module docstring); else None."""
    body = loop.body.block
    terminator = body.last_op
    members: set[Operation] = set()
    yielded: set[int] = set()
    work = [body.args[1 + position]]
    while work:
        value = work.pop()
        for use in value.uses:
            user = body.find_ancestor_op_in_block(use.operation)
            if user is terminator:
                yielded.add(use.index)
            elif user not in members:
                if user.regions or not user.has_trait(Pure):
                    return None
                members.add(user)
                work.extend(user.results)
    result = terminator.operands[position]
    if yielded != {position} or not isinstance(result.owner, tile.MmaOp) or result.owner not in members:
        return None
    return [op for op in body.ops if op in members]


def split_scale(body: Block, slices: dict[int, list[Operation]]) -> tuple[list[Operation], dict[int, SSAValue]]:
    """B_scale (in body order) and, per accumulator, the accumulator operand of its final mma; B_scale is empty
    (and the operand is the iter_arg) unless every slice splits as the module docstring says."""
    unsplit = {i: body.args[1 + i] for i in slices}
    scale: list[Operation] = []
    scaled: dict[int, SSAValue] = {}
    for i, ops in slices.items():
        mma = ops[-1]
        part = ops[:-1]
        results = {r for op in part for r in op.results}
        if any(isinstance(op, tile.MmaOp) or any(_is_shared(v) for v in op.operands) for op in part):
            return [], unsplit
        if mma.operands[0] in results or mma.operands[1] in results:
            return [], unsplit
        scaled[i] = mma.operands[2]
        scale += part
    order = {op: k for k, op in enumerate(body.ops)}
    return sorted(scale, key=order.__getitem__), scaled


def _is_shared(value: SSAValue) -> bool:
    return isinstance(value.type, TileType) and value.type.memory_space != MemSpace.REGISTER


def _holds_copies(op: Operation) -> bool:
    return any(isinstance(o, tile.ASYNC_COPY_OPS) for o in op.walk())


def _ring_of(value: SSAValue) -> tuple[SSAValue, int | None]:
    """(the buffer, its stage count) of a shared tile: a ring for a tile.stage, else the tile itself (None)."""
    if isinstance(value.owner, tile.StageOp):
        ring = value.owner.source
        return ring, ring.type.get_shape()[0]
    return value, None


def _same_stage(a: SSAValue, b: SSAValue) -> bool:
    if a is b:
        return True
    sa, sb = a.owner, b.owner
    return isinstance(sa, tile.StageOp) and isinstance(sb, tile.StageOp) and sa.source is sb.source and sa.index is sb.index


def plan_rotation(loop: scf.ForOp) -> Rotation | None:
    """The rotation of `loop`, None when it is left alone; raises OverlapSoftmaxError when it is refused."""
    body = loop.body.block
    terminator = body.last_op
    ops = [op for op in body.ops if op is not terminator]
    slices = {i: s for i in range(len(loop.iter_args)) if (s := accumulator_slice(loop, i)) is not None}
    b_members = {op for s in slices.values() for op in s}
    score_mmas = [op for op in ops if isinstance(op, tile.MmaOp) and op not in b_members]
    if len(slices) != 1 or not score_mmas:
        return None
    b_core = [op for op in ops if op in b_members]
    b_scale, scaled = split_scale(body, slices)
    b_mma = [op for op in b_core if op not in b_scale]
    s_mma = score_mmas[0]
    position = {op: i for i, op in enumerate(ops)}

    # B_core(t-1) runs while trip t's copies are in flight: what it reads must not be refilled meanwhile.
    refilled = {_ring_of(cp.dest)[0] for cp in body.walk() if isinstance(cp, tile.ASYNC_COPY_OPS)}
    b_stages = []
    for op in b_core:
        for operand in op.operands:
            ty = operand.type
            if not isinstance(ty, TileType) or ty.memory_space != MemSpace.SHARED:
                continue
            buffer, stages = _ring_of(operand)
            if stages is not None:
                b_stages.append(operand)
            if buffer not in refilled:
                continue
            if stages is None:
                _refuse(op, f"reads {_name(buffer)}, which this loop refills every trip; the update of trip t-1 "
                            "can only run during trip t from a ring stage: run pipeline-loops{stages=N} with "
                            "N >= 2 first" + unpipelined_remark(op))
            if stages < 2:
                _refuse(op, f"reads a stage of {_name(buffer)}, a {stages}-stage ring: trip t's copy would "
                            "overwrite it while the update of trip t-1 reads it; overlap-softmax needs "
                            "pipeline-loops{stages=N} with N >= 2")

    waits = [op for op in body.walk() if isinstance(op, tile.CpWaitGroupOp)]
    if len(waits) != 1 or waits[0] not in position:
        _refuse(loop, f"needs the pipelined form of pipeline-loops (one tile.cp_wait_group per trip, at the top "
                      f"level of the body), found {len(waits)}")
    (wait,) = waits
    a_copy = [op for op in ops if isinstance(op, tile.CpCommitGroupOp) or _holds_copies(op)]
    if any(position[op] > position[wait] for op in a_copy):
        return None  # the copies already follow the wait: a rotated loop
    for op in a_copy:
        if op.results:
            _refuse(op, "the load section of a pipelined loop has no results")
    if position[wait] > position[s_mma]:
        _refuse(s_mma, "reads shared memory before the trip's tile.cp_wait_group")
    commits = sum(isinstance(op, tile.CpCommitGroupOp) for op in a_copy)
    pending = wait.pending.value.data - commits
    if pending < 0:
        _refuse(wait, f"waits with {wait.pending.value.data} groups pending but the trip commits {commits} "
                      "before it; moving them after the wait needs a pending count of at least that")

    b_rel = [op for op in ops if isinstance(op, tile.ReleaseOp) and any(_same_stage(op.stage, s) for s in b_stages)]
    taken = b_members | set(a_copy) | set(b_rel)
    a_pre = [op for op in ops[: position[s_mma] + 1] if op not in taken]
    a_rest = [op for op in ops[position[s_mma] + 1 :] if op not in taken]
    b_ops = set(b_mma) | set(b_rel)
    a_sink = [op for op in a_rest if op.results and op.has_trait(Pure) and not op.regions
              and all(body.find_ancestor_op_in_block(use.operation) in b_ops for r in op.results for use in r.uses)]
    a_rest = [op for op in a_rest if op not in a_sink]

    accumulator_operands = set(scaled.values())
    b_results = {r for op in b_mma for r in op.results}
    carried: list[SSAValue] = []
    recomputed: list[SSAValue] = []
    for op in b_mma + b_rel:  # B_scale runs in the trip of its A values: nothing of it is carried
        for value in op.operands:
            if value in b_results or value in accumulator_operands or not defined_in(value, body):
                continue
            if value in carried or value in recomputed:
                continue
            if is_recomputable(value, body):
                recomputed.append(value)
            elif isinstance(value.type, TileType) and value.type.memory_space != MemSpace.REGISTER:
                _refuse(op, f"needs {_name(value)} of the previous trip, a {value.type.memory_space.value} tile "
                            "that cannot be recomputed from iv - step (only index arithmetic, tile.stage and "
                            "tile.view can)")
            else:
                carried.append(value)
    return Rotation(loop, sorted(slices), scaled, a_pre, b_scale, b_mma, a_rest, a_sink, b_rel, a_copy, wait,
                    pending, carried, recomputed)


def _clone_into(block: Block, ops: list[Operation], mapping: dict[SSAValue, SSAValue], plan: Rotation) -> None:
    for op in ops:
        clone = op.clone(value_mapper=mapping)
        if op is plan.wait:
            clone.properties["pending"] = IntegerAttr(plan.pending, 64)
        block.add_op(clone)


def _rotated_block(plan: Rotation, inits: list[SSAValue]) -> Block:
    """The rotated loop's body block: the loop's induction variable and iter_args, then the carried values
    (named `<name>_prev`: on trip t they hold what trip t-1's A computed)."""
    body = plan.loop.body.block
    rotated = Block(arg_types=[body.args[0].type, *(v.type for v in inits)])
    for old, new in zip([*body.args, *plan.carried], rotated.args):
        new.name_hint = old.name_hint
    for value in rotated.args[len(body.args) :]:
        value.name_hint = f"{value.name_hint or 'carried'}_prev"
    return rotated


def _b_mapping(plan: Rotation, carried: list[SSAValue], accumulators: list[SSAValue]) -> dict[SSAValue, SSAValue]:
    """B_mma's values: what A gave it, and the scaled accumulators it adds to."""
    mapping = dict(zip(plan.carried, carried))
    mapping.update({plan.scaled[i]: accumulators[i] for i in plan.accumulators})
    return mapping


def _close(plan: Rotation, b: IndexBuilder, trips: SSAValue, any_trip: SSAValue, peeled: Block, rotated: Block,
           lb: SSAValue, inits: list[SSAValue]) -> scf.IfOp:
    """Finish a rotation: the rotated loop from `lb` at the end of `peeled`, then the last trip's B_mma and
    B_rel; `peeled` runs under `scf.if any_trip` (else the loop's initial values) in place of the loop."""
    loop = plan.loop
    body = loop.body.block
    args = body.args[1:]
    results = body.last_op.operands
    acc = set(plan.accumulators)
    new_loop = scf.ForOp(lb, loop.ub, loop.step, inits, rotated)
    new_loop.attributes.update(loop.attributes)
    peeled.add_op(new_loop)

    end = IndexBuilder(InsertPoint.at_end(peeled), b)
    last_iv = end.iv_of_trip(loop, end.sub(trips, end.const(1), "last_trip"), "iv_last")
    loop_results = list(new_loop.results)
    last = _b_mapping(plan, loop_results[len(args) :], loop_results)
    clone_at_iv(plan.recomputed, body, last_iv, end, last)
    _clone_into(peeled, plan.b_mma + plan.b_rel, last, plan)
    peeled.add_op(scf.YieldOp(*(last[v] if i in acc else loop_results[i] for i, v in enumerate(results))))

    if_op = scf.IfOp(any_trip, [r.type for r in loop.results], [peeled], [Block([scf.YieldOp(*loop.iter_args)])])
    for old, new in zip(loop.results, if_op.results):
        new.name_hint = old.name_hint
    for old, new in zip(loop.results, new_loop.results):
        new.name_hint = old.name_hint
    for old, new in zip(plan.carried, new_loop.results[len(args) :]):
        new.name_hint = f"{old.name_hint}_last" if old.name_hint else None
    Rewriter.insert_op(if_op, InsertPoint.before(loop))
    Rewriter.replace_op(loop, [], list(if_op.results))
    erase_dead_code(if_op)
    return if_op


def _loop_entry(plan: Rotation) -> tuple:
    """What both rotations start from: the loop body, its induction variable, iter_args and yielded values, the
    accumulators' positions, and, built before the loop, an `IndexBuilder`, the trip count and `trips > 0`."""
    loop = plan.loop
    body = loop.body.block
    b = IndexBuilder(loop)
    trips = b.trip_count(loop)
    any_trip = b.cmp("sgt", trips, b.const(0), "any_trip")
    return body, body.args[0], body.args[1:], body.last_op.operands, set(plan.accumulators), b, trips, any_trip


def rotate(plan: Rotation) -> scf.IfOp:
    """Replace the loop of `plan` by its rotated form (see the module docstring)."""
    loop = plan.loop
    body, iv, args, results, acc, b, trips, any_trip = _loop_entry(plan)

    peeled = Block()
    first = {iv: loop.lb, **dict(zip(args, loop.iter_args))}
    _clone_into(peeled, plan.a_pre + plan.a_rest + plan.a_sink + plan.b_scale + plan.a_copy, first, plan)

    start = IndexBuilder(InsertPoint.at_end(peeled), b)
    lb = start.add(loop.lb, loop.step, "lb_rotated")
    inits = [first.get(plan.scaled[i]) if i in acc else first.get(v, v) for i, v in enumerate(results)]
    inits += [first.get(v, v) for v in plan.carried]
    rotated = _rotated_block(plan, inits)
    new_iv, new_args, new_carried = rotated.args[0], rotated.args[1 : len(args) + 1], rotated.args[len(args) + 1 :]

    this_trip = {iv: new_iv, **dict(zip(args, new_args))}
    _clone_into(rotated, plan.a_pre, this_trip, plan)
    previous = _b_mapping(plan, list(new_carried), list(new_args))
    inner = IndexBuilder(InsertPoint.at_end(rotated), b)
    clone_at_iv(plan.recomputed, body, inner.sub(new_iv, loop.step, "iv_prev"), inner, previous)
    _clone_into(rotated, plan.b_mma, previous, plan)
    _clone_into(rotated, plan.a_rest, this_trip, plan)
    _clone_into(rotated, plan.b_rel, previous, plan)
    scale = {**this_trip, **{args[i]: previous[results[i]] for i in acc}}
    _clone_into(rotated, plan.b_scale, scale, plan)
    _clone_into(rotated, plan.a_sink, this_trip, plan)
    _clone_into(rotated, plan.a_copy, this_trip, plan)
    yielded = [scale[plan.scaled[i]] if i in acc else this_trip.get(v, v) for i, v in enumerate(results)]
    rotated.add_op(scf.YieldOp(*yielded, *(this_trip.get(v, v) for v in plan.carried)))
    return _close(plan, b, trips, any_trip, peeled, rotated, lb, inits)


def foldable(plan: Rotation) -> bool:
    """Whether `rotate_folded` can rotate `plan`'s loop: every value carried to the next trip is a register
    tile (its first value, never read, is a `tile.fill 0.0`)."""
    return all(isinstance(v.type, TileType) and v.type.memory_space == MemSpace.REGISTER for v in plan.carried)


def rotate_folded(plan: Rotation) -> scf.IfOp:
    """Replace the loop of `plan` by its rotated form with trip 0 run by the loop itself (module docstring,
    `fold=true`): B_mma and B_rel of the previous trip run under `scf.if iv != lb`."""
    loop = plan.loop
    body, iv, args, results, acc, b, trips, any_trip = _loop_entry(plan)

    peeled = Block()
    carried_inits = [tile.FillOp(0.0, v.type) for v in plan.carried]
    for op in carried_inits:
        peeled.add_op(op)
    inits = list(loop.iter_args) + [op.result for op in carried_inits]
    rotated = _rotated_block(plan, inits)
    new_iv, new_args, new_carried = rotated.args[0], rotated.args[1 : len(args) + 1], rotated.args[len(args) + 1 :]

    this_trip = {iv: new_iv, **dict(zip(args, new_args))}
    _clone_into(rotated, plan.a_pre, this_trip, plan)
    inner = IndexBuilder(InsertPoint.at_end(rotated), b)
    first = inner.cmp("eq", new_iv, loop.lb, "first_trip")
    # the previous trip's indices outside the branches, where ptxas can schedule them beside the score mma
    previous = _b_mapping(plan, list(new_carried), list(new_args))
    clone_at_iv(plan.recomputed, body, inner.sub(new_iv, loop.step, "iv_prev"), inner, previous)

    def previous_trip(ops: list[Operation], yielded: list[SSAValue]) -> Block:
        """A block running `ops` for the previous trip, yielding the mapped `yielded`."""
        block = Block()
        _clone_into(block, ops, previous, plan)
        block.add_op(scf.YieldOp(*(previous[v] for v in yielded)))
        return block

    acc_results = [results[i] for i in sorted(acc)]
    skip = Block([scf.YieldOp(*(new_args[i] for i in sorted(acc)))])
    # the skipping branch first: the accumulator's last read is then the mma's, which updates it in place
    update = scf.IfOp(first, [v.type for v in acc_results], [skip], [previous_trip(plan.b_mma, acc_results)])
    rotated.add_op(update)
    updated = dict(zip(sorted(acc), update.results))
    for i, value in updated.items():
        # not the update's own name: the update (`acc_next`) runs in the else branch from trip 1 on, and this
        # result is trip 0's skipped update too (tessera.validation.trace records each `acc_next` as a tile's)
        value.name_hint = f"{results[i].name_hint}_or_skipped" if results[i].name_hint else None
    _clone_into(rotated, plan.a_rest, this_trip, plan)
    if plan.b_rel:
        rotated.add_op(scf.IfOp(first, [], [Block([scf.YieldOp()])], [previous_trip(plan.b_rel, [])]))
    scale = {**this_trip, **{args[i]: updated[i] for i in acc}}
    _clone_into(rotated, plan.b_scale, scale, plan)
    _clone_into(rotated, plan.a_sink, this_trip, plan)
    _clone_into(rotated, plan.a_copy, this_trip, plan)
    yielded = [scale[plan.scaled[i]] if i in acc else this_trip.get(v, v) for i, v in enumerate(results)]
    rotated.add_op(scf.YieldOp(*yielded, *(this_trip.get(v, v) for v in plan.carried)))
    return _close(plan, b, trips, any_trip, peeled, rotated, loop.lb, inits)


@dataclass(frozen=True)
class OverlapSoftmaxPass(ModulePass):
    """Rotate each pipelined loop with an accumulator so that trip t issues its score mma before the delayed
    accumulator update of trip t-1 (see the module docstring)."""

    name = "overlap-softmax"
    fold: bool = True
    """Run trip 0 in the loop (the previous trip's B_mma and B_rel under `scf.if first`: the default) instead of
    peeling its A before the loop (`fold=false`; module docstring)."""
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        loops = [o for o in walk_ops(op) if isinstance(o, scf.ForOp) and NO_OVERLAP_ATTR not in o.attributes]
        for loop in loops:  # every refusal before any change: a refused module is left as it was
            plan_rotation(loop)
        for loop in reversed(loops):  # inner loops first; a loop is planned again once its inner ones changed
            plan = plan_rotation(loop)
            if plan is not None:
                rotate_folded(plan) if self.fold and foldable(plan) else rotate(plan)
