"""convert-tile-to-sm90, structured control flow: scf.for (with the loop trip for mbarrier parities),
block-uniform scf.if, yields and the return.

wgmma groups in flight across a branch. Groups are retired (wait_group 0) before control flow, except across
a *register-only* scf.if: one whose branches hold only pure ops without regions, none of them a `tile.mma`
(peel-masked-iterations{branch=true}'s masks of a score tile while the previous trip's P.V mma runs), or
whose branches also clear rows of a shared tile (`tile.clear_rows`, clear_rows.py: stores, a fence and a
barrier, no wgmma; a tile that a group in flight reads is refused below, as its lowering waits for it). The
groups whose results the branch reads are waited for before it (with the older ones, as for any read); the
others stay in flight: the branch neither reads nor writes the registers they write, and commits and waits
for nothing, so every group in flight before it is in flight after it on both paths, and the wait_group
counts after the join are those of straight-line code. The lowering checks it: a branch
whose lowering changes the groups in flight is refused. A result that every branch yields as the same
`Scaled` tile form (same factor) stays scaled: the branches yield the raw registers.

An *update branch* (`update_branch_mma`: overlap-softmax's P.V mma of the previous trip, skipped on the first)
holds one tile.mma in one branch; the groups in flight before it stay in flight on that path and the mma's
group is committed in its branch; the other path retires every group in flight (wgmma.wait_group 0), so
after the join no path has more groups pending than the issuing one, and every wait_group count after it
(computed for that path) completes at least as much on both: the branch's result is the mma's group's from the
join on, and whatever reads it waits for it, as for the mma's own result. (The skipping path once committed an
empty group, wgmma.fence and wgmma.commit_group, to keep the counts equal: 3 SASS instructions more per steady
trip of the flash d128 loop under ptxas 12.9, 13.0 and 13.5; on the first trip the wait it makes instead is
the one the wait_group after the join would make.)

An *accumulate branch* (`mask-by-mma`'s bias mma, `mask-causal-by-mma`'s `tile.causal_bias`) is an update branch whose mma accumulates onto the youngest
group in flight (its accumulator is that group's result, not waited for: wgmmas of one shape chain on an
accumulator in flight) and whose other branch yields that accumulator. Its mma's group is committed in its
branch after the accumulator's; the other path waits for nothing. After the join the two groups are one
pending entry, the branch's result: on the mma's path the entries after it count the groups committed after
the mma, on the other path those committed after the accumulator's group, the same groups; so a wait for the
result (`wait_group N`, N the entries after it) completes the accumulator's group and, on the mma's path,
the mma's, on both, and a wait for an older entry completes the same older groups on both paths.

Phase counters. A copy group committed in a loop nest completes one phase of its barrier per execution; the
parity it waits for is that of the number of earlier executions. Where every inner loop's bounds are defined
outside the nest, that number is the linear trip number (`BackwardLowering._parity`). Where an inner loop's
bounds are computed inside the nest (a block-sparse backward reads, per head of its GQA group, how many query
blocks it visits), the count is carried instead: each loop of the nest gets one more index iter_arg per such
group, the commit adds 1 to it, and the wait takes the count before the increment, mod 2."""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType
from xdsl.ir import Block, Operation, Region
from xdsl.traits import Pure

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import element_type_bytes
from tessera.passes.convert_tile_to_sm90.attention import combine_across_quad
from tessera.passes.convert_tile_to_sm90.row_sums import reduced_after_loop
from tessera.passes.convert_tile_to_sm90.common import (
    refuse,
    LoopInfo,
    PendingMma,
    Scaled,
)


def _register_only(op: Operation) -> bool:
    """A pure op without regions, or integer `arith` (a division is not Pure in xDSL: it may trap on zero)."""
    return not op.regions and (op.has_trait(Pure) or op.dialect_name() == "arith")


BRANCH_MMA_OPS = (tile.MmaOp, tile.CausalBiasOp)
"""The ops an update branch may issue as its one wgmma group: a tile.mma, or mask-causal-by-mma's causal bias
(bf16 k16 wgmmas on the score accumulator)."""


def _operand_bytes(op: tile.MmaOp | tile.CausalBiasOp) -> int:
    """The bytes of an mma's multiplicands (its wgmma k-step: 2 for k16)."""
    return 2 if isinstance(op, tile.CausalBiasOp) else element_type_bytes(op.a.type.element_type)


def update_branch_mma(op: scf.IfOp) -> tile.MmaOp | tile.CausalBiasOp | None:
    """The tile.mma of an *update branch* (module docstring): an scf.if with two branches, one holding a
    single tile.mma (or `tile.causal_bias`) among pure ops without regions (and `tile.key_bias`, which writes
    the tile it reads),
    whose result it yields once, the other holding pure ops without regions and no tile.mma and yielding the
    mma's accumulator in its place (overlap-softmax{fold=true}'s P.V update, skipped on the first trip;
    mask-by-mma's and mask-causal-by-mma's biases; a block-sparse GEMM's K step, skipped where its block is
    empty). Another scf.if holding an mma retires its groups in each branch."""
    if len(op.regions) != 2 or not op.false_region.blocks:
        return None
    mmas = [inner for region in op.regions for inner in region.ops if isinstance(inner, BRANCH_MMA_OPS)]
    if len(mmas) != 1:
        return None
    (mma,) = mmas
    for region in op.regions:
        for inner in region.ops:
            if not isinstance(inner, (scf.YieldOp, tile.KeyBiasOp, *BRANCH_MMA_OPS)) and not _register_only(inner):
                return None
    yields = mma.parent_block().last_op.operands
    if sum(v is mma.result for v in yields) != 1 or any(use.operation is not mma.parent_block().last_op
                                                        for use in mma.result.uses):
        return None
    # the other branch yields the accumulator there: the result then takes the registers the wgmma accumulates
    # into on both paths (tessera.regalloc), so no branch copies out of registers its group still writes
    other = next(region for region in op.regions if region is not mma.parent_region())
    if list(other.block.last_op.operands)[list(yields).index(mma.result)] is not mma.acc:
        return None
    return mma


def accumulates_in_flight(op: scf.IfOp, mma: tile.MmaOp, pending: list[PendingMma]) -> bool:
    """Whether update branch `op` with mma `mma` is an *accumulate branch* (module docstring): the mma's
    accumulator is the youngest group in flight's result, an mma's of the same wgmma shape (operand width: the
    same k-step), the other branch yields it where the mma's branch yields the mma's result, and nothing else
    reads it (the mma writes its registers in place)."""
    if not pending or mma.acc is not pending[-1].tile_value:
        return False
    producer = mma.acc.owner
    if not isinstance(producer, tile.MmaOp) or _operand_bytes(producer) != _operand_bytes(mma):
        return False
    other = next(region for region in op.regions if region is not mma.parent_region())
    position = list(mma.parent_block().last_op.operands).index(mma.result)
    if list(other.block.last_op.operands)[position] is not mma.acc:
        return False
    return all(use.operation in (mma, other.block.last_op) for use in mma.acc.uses)


class ControlFlowLowering:
    """The ControlFlow handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _update_branch(self, op: scf.IfOp) -> tile.MmaOp | tile.CausalBiasOp | None:
        """`update_branch_mma(op)`, unless the mma's accumulator is lowered to a constant (a zero fill: the
        wgmma's scale-d = 0), which has no registers the result could share with the other branch's yield."""
        update = update_branch_mma(op)
        if update is not None and isinstance(getattr(self.values.get(update.acc), "owner", None), arith.ConstantOp):
            return None
        return update

    # -- control flow --------------------------------------------------------------------------------------
    def _count_phases(self, outermost: scf.ForOp) -> None:
        """Give every loop around a commit a phase counter for it (module docstring) where the commit sits in
        a nest under `outermost` whose inner bounds are defined inside the nest."""
        for commit in outermost.walk():
            if not isinstance(commit, tile.CpCommitGroupOp) or commit in self.ring_commits \
                    or commit in self.gather_commits:
                continue
            chain, parent = [], commit.parent_op()
            while parent is not None and outermost.is_ancestor(parent):
                if isinstance(parent, scf.ForOp):
                    chain.append(parent)
                parent = parent.parent_op()
            inner_bounds = [v.owner if isinstance(v.owner, Operation) else v.owner.parent_op()
                            for loop in chain[:-1] for v in (loop.lb, loop.ub, loop.step)]
            if len(chain) > 1 and any(outermost.is_ancestor(owner) for owner in inner_bounds):
                for loop in chain:
                    self.counted_loops.setdefault(loop, []).append(commit)

    def _lower_ForOp(self, op: scf.ForOp, e: Emitter) -> None:
        if not self.loops:
            self._count_phases(op)
        counted = self.counted_loops.get(op, [])
        lb, ub, step = (self._get(v) for v in (op.lb, op.ub, op.step))
        inits = [self._get(v) for v in op.iter_args]
        inits += [self.phase_counters.get(c) or e.index(0) for c in counted]
        body = Block(arg_types=[IndexType()] + [v.type for v in inits])
        iv = body.args[0]
        iv.name_hint = op.body.block.args[0].name_hint
        self.values[op.body.block.args[0]] = iv
        for old, new in zip(op.body.block.args[1:], body.args[1:]):
            new.name_hint = old.name_hint
            self.values[old] = new
        for commit, count in zip(counted, body.args[len(body.args) - len(counted):]):
            count.name_hint = "phase_count"
            self.phase_counters[commit] = count
        be = Emitter(body)
        trip = be.op(arith.DivSIOp(be.op(arith.SubiOp(iv, lb)), step))
        if trip.name_hint is None:  # folded to the induction variable (lb 0, step 1), which keeps its name
            trip.name_hint = "trip"
        saved_outstanding, saved_trip = list(self.outstanding), self.committed_this_trip
        self.loops.append(LoopInfo(op, trip))
        self.committed_this_trip = set()
        self._translate_loop_body(op, be)
        self.loops.pop()
        left = [c for c in self.outstanding if c in self.committed_this_trip and c not in self.ring_commits]
        if left:
            refuse(left[0], "copies committed in a loop trip must be waited for in the same trip "
                             "(overlapping trips is pipeline-loops' job)")
        self.committed_this_trip = saved_trip
        # Groups outstanding before the loop stay so: the loop may run no trip.
        self.outstanding = saved_outstanding
        new = e.op(scf.ForOp(lb, ub, step, inits, body))
        results = new.results if isinstance(new, Operation) else [new]
        for old, res in zip(op.results, results):
            self._set(old, res)
        for i in reduced_after_loop(op, self.partial_rows):  # per-thread partial row sums, added once here
            results[i].name_hint = f"{op.results[i].name_hint or 'row_sums'}_partial"
            self._set(op.results[i], combine_across_quad(results[i], e.addf, e))
        for commit, count in zip(counted, results[len(op.results):]):
            self.phase_counters[commit] = count
        if not self.loops:
            for commit in counted:
                self.phase_counters.pop(commit, None)

    def _translate_loop_body(self, op: scf.ForOp, e: Emitter) -> None:
        for inner in op.body.block.ops:
            if isinstance(inner, tile.CpCommitGroupOp):
                self.committed_this_trip.add(inner)
            self._translate(inner, e)

    def _keeps_groups_in_flight(self, op: Operation) -> bool:
        """Whether wgmma groups in flight stay so across `op`: a register-only scf.if (module docstring). The
        groups it reads are waited for here; `_lower_IfOp` yields its branches without waiting."""
        if not isinstance(op, scf.IfOp):
            return False
        update = self._update_branch(op)
        if not self.pending and update is None:
            return False
        read = set()
        for region in op.regions:
            for inner in region.ops:
                if inner is update:
                    continue
                if not isinstance(inner, scf.YieldOp | tile.ClearRowsOp | tile.KeyBiasOp) \
                        and (isinstance(inner, tile.MmaOp) or not _register_only(inner)):
                    return False
                read.update(inner.operands)
        if update is not None:
            read.discard(update.result)
            if accumulates_in_flight(op, update, self.pending):
                read.discard(update.acc)
                self.accumulating.add(update)
        waited = [p.tile_value for p in self.pending if p.tile_value in read]
        if waited:  # the groups whose results the branch reads (and older ones) complete before it
            self._retire(waited[-1], self.e)
        self.branches_in_flight.add(op)
        return True

    def _lower_IfOp(self, op: scf.IfOp, e: Emitter) -> None:
        """A block-uniform scf.if (Tile IR conditions are values of the whole block). Copy groups must not
        be committed inside it unless they fill ring stages (their count would depend on the branch)."""
        for inner in op.walk():
            if isinstance(inner, tile.CpCommitGroupOp) and inner not in self.ring_commits:
                refuse(inner, "copy groups of unstaged tiles cannot be committed inside an scf.if")
        in_flight = op in self.branches_in_flight
        update = self._update_branch(op) if in_flight else None
        accumulate = update in self.accumulating
        # yielded as they are: the mma's result, and an accumulate branch's accumulator, still in flight
        raw = {update.result, update.acc} if accumulate else {update.result} if update is not None else set()
        before = list(self.pending)
        issued = None
        blocks, yielded = [], []
        branches = [Block() for region in op.regions if region.blocks]
        self._await_stages_before_branch(op, e, branches)
        for region in op.regions:
            if not region.blocks:
                continue
            block = branches[len(blocks)]
            be = Emitter(block)
            saved = list(self.outstanding)
            terminator = region.block.last_op
            for inner in region.block.ops:
                if inner is not terminator:
                    self._translate(inner, be)
            if not in_flight:
                self._retire_all(be)
            elif update is not None and update.parent_region() is region:
                if self.pending[:-1] != before or self.pending[-1].tile_value is not update.result:
                    refuse(op, "a branch the wgmma groups in flight cross must not commit or wait for a group "
                                "other than its one tile.mma's")
                issued = self.pending.pop()
            elif self.pending != before:
                refuse(op, "a branch the wgmma groups in flight cross must not commit or wait for a group")
            elif update is not None and not accumulate:  # retire every group: no more pending than the mma's path
                be.op(sm90.WgmmaWaitGroupOp(0))
            self.e = be
            yielded.append([self.values[v] if v in raw else self._peek(v) for v in terminator.operands])
            self.outstanding = saved + [c for c in self.outstanding if c not in saved]
            blocks.append(block)
        scaled = [all(isinstance(y[i], Scaled) and y[i].factor == yielded[0][i].factor for y in yielded)
                  for i in range(len(op.results))]
        for block, values, original in zip(blocks, yielded, op.regions):
            self.e = Emitter(block)
            operands = [v.raw if keep else v if old in raw else self._get(old) for v, keep, old in
                        zip(values, scaled, original.block.last_op.operands)]
            self.e.op(scf.YieldOp(*operands))
        self.e = e
        result_types = [v.type for v in blocks[0].last_op.operands]
        condition = self._get(op.cond)
        if update is not None and update.parent_region() is op.true_region and len(blocks) > 1:
            # The mma's branch goes last (the condition negated): the register allocator gives the result the
            # registers the wgmma accumulates into in place only where the other branch's yield of the
            # accumulator comes first in program order (tessera.regalloc: an accumulator read after the wgmma is
            # copied instead), and a copy out of them at the end of the mma's branch would read registers its
            # group still writes.
            condition = e.op(arith.XOrIOp(condition, e.op(arith.ConstantOp(IntegerAttr(1, IntegerType(1))))))
            blocks.reverse()
        new = e.op(scf.IfOp(condition, result_types, Region(blocks[0]),
                            Region(blocks[1]) if len(blocks) > 1 else None))
        results = new.results if isinstance(new, Operation) else [new]
        for i, (old, res) in enumerate(zip(op.results, results)):
            if scaled[i]:
                self.values[old] = Scaled(res, yielded[0][i].factor)
            else:
                self._set(old, res)
        if update is not None:  # the result the mma's branch yields is pending on both paths
            (position,) = [i for i, v in enumerate(update.parent_block().last_op.operands) if v is update.result]
            if accumulate:  # one entry for the accumulator's group and the mma's (module docstring)
                accumulator = self.pending.pop()
                self.pending.append(PendingMma(op.results[position], accumulator.reads + issued.reads))
            else:
                self.pending.append(PendingMma(op.results[position], issued.reads))

    def _lower_YieldOp(self, op: scf.YieldOp, e: Emitter) -> None:
        # `_translate` has retired the wgmma groups in flight: no group outlives its region.
        counts = [self.phase_counters[c] for c in self.counted_loops.get(op.parent_op(), [])]
        e.op(scf.YieldOp(*[self._get(v) for v in op.operands], *counts))

    def _lower_ReturnOp(self, op: func.ReturnOp, e: Emitter) -> None:
        # A block must not exit with a bulk copy still writing its shared memory: drain what may be in flight.
        self._wait_for(op, self.outstanding, e)
        e.op(func.ReturnOp())


