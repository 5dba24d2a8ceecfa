"""The flash forward's last P.V run by its own loop: the epilogue after an overlap-softmax loop folded into it as
it is printed (docs/compile-time.md, "compile15" and "compile17").

overlap-softmax's folded loop (the default) issues trip j's score mma, then trip j-1's P.V under
`scf.if %first_trip`; after the loop, the epilogue runs the last trip's P.V, a second copy of its wgmmas. The
printer prints the loop so that it runs that P.V itself, with the epilogue's ops printed as comments only:

    for:      A_pre(j)                          (the K wait, the score mma; the pure ops only the masks read
                                                 are left out here)
    pv:       %first_trip, the V slot of j - 1; if !first { V wait, P.V(j - 1) }
              (the pure ops left out above)     wait_group; if j < unmasked trips { ... } else {
                                                   if j == n: bra pv_exit; the masks ... }
              ...; j += 1; if j < n: bra for
              bra pv_dummy                      (j == n: trip n runs only the P.V)
    for_end:  (the code after the loop, the epilogue's ops printed as comments)
              ret
    pv_dummy: wgmma.fence; the score mma's first wgmma (scale-d 0, result unread) on descriptors the loop does
              not write (Q's, the K ring's base); commit; bra pv
    pv_exit:  wait_group 0; the V release of trip n - 1; bra for_end

Each part is what ptxas 12.9, 13.0 and 13.5 need to keep every wgmma asynchronous and the steady trip as long as
it was (compile15 measured each on the PTX by hand): the score wgmma on the path into `pv` gives S's registers
a wgmma definition on every path (C7515/C7514 otherwise); the exit test opens the masked branch, which trip n
always takes, so a steady trip runs no instruction more; the two blocks after `ret`; the sunk ops after `pv`.

The printed form is not structured control flow (the loop is entered a second time in its middle and left from
inside an `scf.if`), so it is the printer's and no pass's. It is chosen only where every condition below holds
(`find_fold`); anywhere else the loop prints as before.

- The loop: `scf.for` with constant lb >= 0 and step 1, in the then-block of an `scf.if` that runs it only when
  ub > lb (`arith.cmpi sgt, %ub, %c` with a constant c >= lb), so trip n = ub is reached; ub computed by
  arithmetic from kernel parameters, constants and the CTA's index, so that ptxas sees the exit test as uniform
  (the paged and varlen forwards load their key counts: left from inside the loop on such a count, ptxas guards
  the loop's shuffles against divergence, 30 to 35 SASS instructions more a steady trip).
- `%first_trip = arith.cmpi eq, %iv, lb` in the body; after it, the update `scf.if %first_trip` with one result:
  its then-branch yields an iter_arg (the accumulator), its else-branch is one wgmma chain from that iter_arg
  over shuffles of another iter_arg (P), committed and yielded; then only wait_groups, constants and the masked
  branch's condition before the masked `scf.if`, whose condition is `arith.cmpi slt, %iv, %unmasked` with
  `%unmasked = maxsi(minsi(x, ub), c)`, c a constant <= lb: trip n (iv = ub >= %unmasked) takes its else-branch;
  after it, the V release `scf.if %first_trip {} else { sm90.mbarrier_arrive %x }`, %x computed after
  `%first_trip`.
  Or no masked branch (`mask-by-mma` adds the masks to S with a wgmma before the update, the loop has no
  branch after it that trip n takes): the exit test is printed on every trip right after the update's
  wait_group (2 SASS instructions a steady trip, where the unfolded loop's duplicate P.V costs ptxas about a
  fifth more time), and no op is sunk.
- Trip n runs from `pv` to the exit test without A_pre: nothing there reads a value A_pre computes (but an
  immediate constant). The sunk ops read only constants, the iv and values from outside the loop.
- The score mma's first wgmma: A_pre's first wgmma, scale-d a constant false, A and B descriptors (not A in
  registers) defined outside the loop or `sm90.descriptor_offset`s of descriptors defined outside it.
- The epilogue: the contiguous run in the loop's block after the reduction of the loop's other results (flash's
  l across the quad; two-pass attention's second loop carries no statistics and is left alone), from
  `arith.subi %ub, 1` to the first `sm90.mbarrier_arrive` after it: pure ops, one V wait (`scf.while` of `mbarrier_try_wait_parity`), one fence,
  a wgmma chain from the loop's accumulator result over shuffles of its P result with the update chain's shuffle
  masks and wgmma properties, one commit, `wgmma_wait_group 0`, the arrive. Nothing after it reads an epilogue
  value but the chain's last result, which becomes the update `scf.if`'s result (the same registers by the
  assignment, or none assigned); the loop's accumulator and P results are read by the epilogue only; every other
  loop result read after the loop is read by the body after the masked branch (so its register is not written
  on trip n before the exit test).

The register assignment was made for the unfolded kernel; the conditions keep it valid: the dummy wgmma writes
S's registers at `pv`, where S is live on the loop's own path (no other value live there holds them); trip n's
writes before the exit test are those of every trip at the same points, where every value read after the loop
is live too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import arith, func, scf, vector
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import Pure

from tessera.analysis.loop_trips import constant_index, defined_in
from tessera.dialects import sm90
from tessera.ptx.kernel import KernelPrinter
from tessera.ptx.machine import wgmma_instruction
from tessera.ptx.registers import PRED, is_register


@dataclass
class EpilogueFold:
    """How one loop is printed with its epilogue's P.V folded in (module docstring)."""

    loop: scf.ForOp
    first: arith.CmpiOp  # %first_trip: the re-entry label goes before it
    update: scf.IfOp  # the previous trip's P.V under `scf.if %first_trip`
    masked: scf.IfOp | None  # the masked trips' branch: its else-branch opens with the exit test
    exit_after: Operation  # without a masked branch: the exit test follows this op (the update's wait)
    release: sm90.MBarrierArriveOp  # the previous trip's V release, run again by the exit block
    score: sm90.WgmmaMmaAsyncOp  # the score mma's first wgmma, repeated by the dummy block
    s: SSAValue  # the score mma's result: the dummy block writes its registers
    descriptors: tuple[SSAValue, SSAValue]  # its A and B descriptors as valid at the latch
    sunk: list[Operation]  # pure ops of A_pre that only the masks read, printed after `update`
    epilogue: list[Operation]  # printed as comments
    result: SSAValue  # the epilogue's P.V result: the update's result registers
    labels: dict[str, str] = field(default_factory=dict)


def _top(block: Block, op: Operation | None) -> Operation | None:
    """The op of `block` that is or holds `op`."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()
    return op


def _guarded(loop: scf.ForOp, lb: int) -> bool:
    """The loop sits in the then-block of `scf.if %ub > c` with a constant c >= lb: it runs a trip at least."""
    guard = loop.parent_op()
    if not isinstance(guard, scf.IfOp) or loop.parent_block() is not guard.true_region.block:
        return False
    cond = guard.cond.owner
    if not isinstance(cond, arith.CmpiOp):
        return False
    lhs, rhs = cond.operands
    predicate = cond.predicate.value.data
    if predicate == 4 and lhs is loop.ub:  # sgt: ub > c
        c = constant_index(rhs)
    elif predicate == 2 and rhs is loop.ub:  # slt: c < ub
        c = constant_index(lhs)
    else:
        return False
    return c is not None and c >= lb


UNIFORM_SPECIAL_REGISTERS = ("ctaid.", "nctaid.", "ntid.")
"""Special registers every thread of a CTA reads alike (and ptxas knows it)."""


def _uniform(value: SSAValue, seen: set | None = None) -> bool:
    """Whether `value` is computed from kernel parameters, constants and the CTA's index by arithmetic alone, so
    that ptxas sees a branch on it as uniform: the fold's exit test compares the loop bound with the iv."""
    seen = set() if seen is None else seen
    if value in seen:
        return True
    seen.add(value)
    owner = value.owner
    if not isinstance(owner, Operation):
        return isinstance(owner.parent_op(), func.FuncOp)  # a kernel parameter
    if isinstance(owner, sm90.SpecialRegOp):
        return owner.register.data.startswith(UNIFORM_SPECIAL_REGISTERS)
    if owner.regions or owner.dialect_name() != "arith":
        return False
    return all(_uniform(v, seen) for v in owner.operands)


def _masked_on_last_trip(cond: SSAValue, iv: SSAValue, ub: SSAValue, lb: int) -> bool:
    """`cond` is `iv < maxsi(minsi(x, ub), c)` with a constant c <= lb: false once iv = ub (> lb)."""
    cmp = cond.owner
    if not isinstance(cmp, arith.CmpiOp) or cmp.predicate.value.data != 2 or cmp.lhs is not iv:
        return False
    upper = cmp.rhs.owner
    if not isinstance(upper, arith.MaxSIOp):
        return False
    for inner, bound in (upper.operands, reversed(upper.operands)):
        c = constant_index(bound)
        if c is not None and c <= lb and isinstance(inner.owner, arith.MinSIOp) and ub in inner.owner.operands:
            return True
    return False


def _chain(ops: list[Operation], acc: SSAValue, p: SSAValue) -> list[sm90.WgmmaMmaAsyncOp] | None:
    """The wgmmas of `ops` if they are one chain from `acc` whose A operands are shuffles of `p`."""
    chain = [op for op in ops if isinstance(op, sm90.WgmmaMmaAsyncOp)]
    for op in chain:
        shuffle = op.a.owner
        if op.acc is not acc or not isinstance(shuffle, vector.ShuffleOp) or shuffle.v1 is not p or shuffle.v2 is not p:
            return None
        acc = op.result
    return chain or None


def _same_mmas(ours: list[sm90.WgmmaMmaAsyncOp], theirs: list[sm90.WgmmaMmaAsyncOp]) -> bool:
    return len(ours) == len(theirs) and all(
        a.properties == b.properties and a.accumulates and b.accumulates and a.scale_d is None and b.scale_d is None
        and a.a.owner.mask == b.a.owner.mask for a, b in zip(ours, theirs))


def _statistics_reduction(loop: scf.ForOp, skip: tuple[SSAValue, ...]) -> list[Operation]:
    """The run of ops right after the loop that reduce its other results (flash's l across the quad), constants
    among them: each reads a loop result but `skip`, or a result of one before it that is not a constant."""
    run, made = [], {r for r in loop.results if r not in skip}
    op = loop.next_op
    while op is not None and (isinstance(op, arith.ConstantOp) or any(v in made for v in op.operands)):
        run.append(op)
        if not isinstance(op, arith.ConstantOp):
            made.update(op.results)
        op = op.next_op
    return run if any(not isinstance(o, arith.ConstantOp) for o in run) else []


def _epilogue(loop: scf.ForOp, acc_result: SSAValue, p_result: SSAValue, loop_chain) -> tuple[list, SSAValue] | str:
    """The epilogue's ops and its P.V result (module docstring), or why there is none."""
    reduction = _statistics_reduction(loop, (acc_result, p_result))
    if not reduction:
        return "no reduction of the softmax statistics after the loop"
    op = reduction[-1].next_op
    ops = []
    while op is not None and not isinstance(op, sm90.MBarrierArriveOp):
        ops.append(op)
        op = op.next_op
    if op is None or not ops:
        return "no V release after the loop"
    ops.append(op)
    last_trip = ops[0]
    if not (isinstance(last_trip, arith.SubiOp) and last_trip.lhs is loop.ub and constant_index(last_trip.rhs) == 1):
        return "the epilogue does not start with the last trip's index (ub - 1)"
    kinds = [type(o) for o in ops]
    if any(kinds.count(k) != 1 for k in (sm90.WgmmaFenceOp, sm90.WgmmaCommitGroupOp, sm90.WgmmaWaitGroupOp, scf.WhileOp)):
        return "the epilogue is not one V wait, one fence, one commit and one wait_group"
    chain = _chain(ops, acc_result, p_result)
    if chain is None or not _same_mmas(chain, loop_chain):
        return "the epilogue's wgmmas are not the loop's P.V on its accumulator and P results"
    wait = next(o for o in ops if isinstance(o, sm90.WgmmaWaitGroupOp))
    if ops[-3:] != [chain[-1].next_op, wait, op] or not isinstance(ops[-3], sm90.WgmmaCommitGroupOp) \
            or wait.pending.value.data != 0:
        return "the epilogue does not end in commit, wait_group 0 and the release"
    allowed = (sm90.WgmmaFenceOp, sm90.WgmmaMmaAsyncOp, sm90.WgmmaCommitGroupOp, sm90.WgmmaWaitGroupOp,
               sm90.MBarrierArriveOp, vector.ShuffleOp)
    for o in ops:
        if isinstance(o, scf.WhileOp):
            if not all(isinstance(w, (sm90.MBarrierTryWaitParityOp, arith.ConstantOp, arith.XOrIOp, scf.ConditionOp,
                                      scf.YieldOp)) for w in o.walk() if w is not o):
                return "the epilogue's loop is not an mbarrier wait"
        elif o.regions or not (isinstance(o, allowed) or o.has_trait(Pure) or o.dialect_name() == "arith"):
            return f"the epilogue holds {o.name}"
    members, block = set(ops), loop.parent_block()
    for value in [r for o in ops for r in o.results if r is not chain[-1].result] + [acc_result, p_result]:
        if any(_top(block, u.operation) not in members for u in value.uses):
            return f"{value.name_hint or 'a value'} is read outside the epilogue"
    return ops, chain[-1].result


def _invariant_descriptor(loop: scf.ForOp, value: SSAValue) -> SSAValue | None:
    """`value` if the loop does not define it, the base it offsets if it is a descriptor_offset of such a one."""
    if not defined_in(value, loop.body.block):
        return value
    op = value.owner
    if isinstance(op, sm90.DescriptorOffsetOp) and not defined_in(op.descriptor, loop.body.block):
        return op.descriptor
    return None


def _pure(op: Operation) -> bool:
    """No effect but its results, no regions: an arith op (xDSL marks divisions impure: they may trap on zero),
    a shuffle, or one with the Pure trait."""
    return not op.regions and (op.has_trait(Pure) or op.dialect_name() == "arith" or isinstance(op, vector.ShuffleOp))


def _immediate(p: KernelPrinter, value: SSAValue) -> bool:
    """A constant that prints no register, or whose register is never written again (no assignment)."""
    if not isinstance(value.owner, arith.ConstantOp):
        return False
    assigned = p.assigned(value)
    return assigned is None or not any(is_register(n) for n in assigned)


def fold_or_refusal(p: KernelPrinter, loop: scf.ForOp) -> EpilogueFold | str:
    """How `loop` prints with its epilogue folded in, or the first condition of the module docstring it fails."""
    lb, step = constant_index(loop.lb), constant_index(loop.step)
    if lb is None or lb < 0 or step != 1:
        return "not a loop from a constant lb >= 0 by step 1"
    if not _guarded(loop, lb):
        return "not under a branch that runs it only when ub > lb"
    if not _uniform(loop.ub):
        return "the loop bound is not computed from parameters and the CTA's index alone (a non-uniform exit test)"
    body = loop.body.block
    iv = body.args[0]
    ops = list(body.ops)
    position = {op: i for i, op in enumerate(ops)}
    first = next((op for op in ops if isinstance(op, arith.CmpiOp) and op.predicate.value.data == 0
                  and op.lhs is iv and constant_index(op.rhs) == lb), None)
    if first is None:
        return "no first-trip test"
    ifs = [op for op in ops[position[first]:] if isinstance(op, scf.IfOp)]
    if len(ifs) < 2 or ifs[0].cond is not first.result or len(ifs[0].results) != 1:
        return "no update under the first-trip test and release after it"
    update = ifs[0]
    masked = ifs[1] if ifs[1].cond is not first.result else None  # none: mask-by-mma added the masks earlier
    release_if = next((op for op in ifs[1:] if op.cond is first.result), None)
    if release_if is None or masked is not None and (
            not masked.false_region.blocks or masked.false_region.block.first_op is None):
        return "no masked else-branch or no V release under the first-trip test"
    # the update: then yields the accumulator iter_arg, else runs the P.V chain from it and yields its result
    then_yield = update.true_region.block.last_op
    acc_arg = then_yield.operands[0] if then_yield.operands else None
    if acc_arg not in body.args[1:] or not update.false_region.blocks:
        return "the update's then-branch does not yield an iter_arg"
    update_ops = list(update.false_region.block.ops)
    p_args = {o.a.owner.v1 for o in update_ops if isinstance(o, sm90.WgmmaMmaAsyncOp) and isinstance(o.a.owner, vector.ShuffleOp)}
    p_arg = p_args.pop() if len(p_args) == 1 else None
    if p_arg not in body.args[1:]:
        return "the update's wgmmas do not read one carried P"
    loop_chain = _chain(update_ops, acc_arg, p_arg)
    if loop_chain is None or update_ops[-2:] != [loop_chain[-1].next_op, update.false_region.block.last_op] \
            or not isinstance(update_ops[-2], sm90.WgmmaCommitGroupOp) or update_ops[-1].operands[0] is not loop_chain[-1].result:
        return "the update's else-branch is not one committed P.V chain on the accumulator"
    if masked is None:  # the exit test right after the update's wait: nothing before it but waits and constants
        wait = next((o for o in ops[position[update] + 1:] if not isinstance(o, arith.ConstantOp)), None)
        exit_at = position[wait] + 1 if isinstance(wait, sm90.WgmmaWaitGroupOp) else position[update] + 1
    else:
        exit_at = position[masked]
    between = [o for o in ops[position[update] + 1:exit_at] if not isinstance(o, arith.ConstantOp)]
    if not between or not isinstance(between[0], sm90.WgmmaWaitGroupOp) or between[0].pending.value.data > 1:
        return "the update is not followed by a wait_group that retires the score mma"
    if not all(isinstance(o, sm90.WgmmaWaitGroupOp) or _pure(o) for o in between):
        return "ops other than waits and pure ops between the update and the masked branch"
    if masked is not None and not _masked_on_last_trip(masked.cond, iv, loop.ub, lb):
        return "the masked branch is not iv >= maxsi(minsi(x, ub), c <= lb): trip n might not take it"
    release_ops = [o for o in release_if.false_region.block.ops if not isinstance(o, scf.YieldOp)] \
        if release_if.false_region.blocks else []
    if list(release_if.true_region.block.ops) != [release_if.true_region.block.last_op] or len(release_ops) != 1 \
            or not isinstance(release_ops[0], sm90.MBarrierArriveOp):
        return "the release under the first-trip test is not one mbarrier_arrive"
    release = release_ops[0]
    barrier = _top(body, release.mbarrier.owner) if isinstance(release.mbarrier.owner, Operation) else None
    if barrier is None or not position[first] < position[barrier] < position[update]:
        return "the released barrier is not computed between the first-trip test and the update"
    a_pre = ops[:position[first]]
    score = next((o for o in a_pre if isinstance(o, sm90.WgmmaMmaAsyncOp)), None)
    if score is None or score.accumulates or score.a_in_registers:
        return "A_pre's first wgmma is not a scale-d 0 wgmma on two descriptors"
    s = score.result  # S: the last wgmma of the chain the score wgmma starts
    while (more := next((u.operation for u in s.uses if isinstance(u.operation, sm90.WgmmaMmaAsyncOp)
                         and u.operation.acc is s and u.operation.parent_block() is body), None)) is not None:
        s = more.result
    descriptors = (_invariant_descriptor(loop, score.a), _invariant_descriptor(loop, score.b))
    if None in descriptors:
        return "the score wgmma's descriptors are not loop-invariant (or offsets of invariant ones)"
    masks = masked.false_region.block if masked is not None else None
    sunk = [o for o in a_pre if o.results and not isinstance(o, arith.ConstantOp) and _pure(o)] if masks else []
    while sunk:  # the largest set whose results only the masks (or each other) read, from sunk or outside values
        kept = [o for o in sunk
                if all(_top(masks, u.operation) is not None or u.operation in sunk for r in o.results for u in r.uses)
                and all(v is iv or not defined_in(v, loop.body.block) or _immediate(p, v) or v.owner in sunk for v in o.operands)]
        if kept == sunk:
            break
        sunk = kept
    computed_before = {r for o in a_pre if o not in sunk for inner in o.walk() for r in inner.results}
    trip_n = [inner for o in ops[position[first]:position[update] + 1] for inner in o.walk()] + [release] + (
        [masked] if masked is not None else [])
    if any(v in computed_before and not _immediate(p, v) for o in trip_n for v in o.operands) or any(
            v in computed_before and not _immediate(p, v) and v is not s for o in between for v in o.operands):
        return "trip n would read a value A_pre computes (but S, once its group retired) before its exit test"
    acc_position, p_position = body.args.index(acc_arg) - 1, body.args.index(p_arg) - 1
    found = _epilogue(loop, loop.results[acc_position], loop.results[p_position], loop_chain)
    if isinstance(found, str):
        return found
    epilogue, result = found
    if p.assigned(result) != p.assigned(update.results[0]):
        return "the epilogue's P.V result and the update's have different registers"
    for i, value in enumerate(loop.results):
        if i in (acc_position, p_position) or not value.uses:
            continue
        uses = [_top(body, u.operation) for u in body.args[i + 1].uses]
        if not any(u is not None and position[u] >= exit_at + (masked is not None) for u in uses):
            return f"loop result {i} is read after the loop but its iter_arg not after the exit test"
    return EpilogueFold(loop, first, update, masked, ops[exit_at - 1], release, score, s, descriptors, sunk,
                        epilogue, result)


def find_fold(p: KernelPrinter, loop: scf.ForOp) -> EpilogueFold | None:
    """`fold_or_refusal`'s fold, None where there is none: the loop prints as it is."""
    fold = fold_or_refusal(p, loop)
    return fold if isinstance(fold, EpilogueFold) else None


def print_folded_body(p: KernelPrinter, fold: EpilogueFold, iv: str, ub: str) -> None:
    """The loop body with the re-entry label, the sunk ops after the update and the masked branch's exit test;
    the epilogue's ops become comments."""
    fold.labels = {name: p.new_label(name) for name in ("pv", "pv_dummy", "pv_exit")}
    test = p.temp(PRED)
    exit_test = [f"setp.eq.s32 {test}, {iv}, {ub}", f"@{test} bra {fold.labels['pv_exit']}"]
    if fold.masked is not None:
        p.else_entries[fold.masked] = exit_test
    for op in fold.epilogue:
        p.folded[op] = "run by the loop (its P.V of trip n)"
    body = fold.loop.body.block
    for op in body.ops:
        if op is body.last_op:
            break
        if op in fold.sunk:
            p.comment(f"{p.describe(op)}: after the re-entry point")
            continue
        if op is fold.first:
            p.place_label(fold.labels["pv"])
        p.print_op(op)
        if op is fold.update:
            for sunk in fold.sunk:
                p.print_op(sunk)
        if fold.masked is None and op is fold.exit_after:
            p.emit(*exit_test)


def print_fold_blocks(p: KernelPrinter, fold: EpilogueFold, end: str) -> None:
    """After the latch: the branch to the dummy block; after the kernel's `ret`, the dummy and exit blocks."""
    p.emit(f"bra {fold.labels['pv_dummy']}")
    saved, p.out = p.out, []
    p.place_label(fold.labels["pv_dummy"])
    p.comment("trip n: a score wgmma nothing reads (S's registers written by a wgmma on every path), then its P.V")
    a, b = (p.reg(d) for d in fold.descriptors)
    p.emit("wgmma.fence.sync.aligned", wgmma_instruction(p, fold.score, p.regs(fold.s), a, b),
           "wgmma.commit_group.sync.aligned", f"bra {fold.labels['pv']}")
    p.place_label(fold.labels["pv_exit"])
    p.comment("trip n leaves: its P.V retired, V's slot released")
    p.emit("wgmma.wait_group.sync.aligned 0")
    p.print_op(fold.release)
    p.emit(f"bra {end}")
    p.tail += p.out
    p.out = saved
