"""`warp-specialize{pingpong=false}`: give a pipelined kernel a producer warpgroup and consumer warpgroups.

Input: a Target IR kernel from `convert-tile-to-sm90` whose ring refills are marked `sm90.producer` (the
`scf.if` in which thread 0 waits for a slot's empty barrier, arms its full barrier and issues the TMA).
Output: the same kernel with one more warpgroup (threads T -> T + 128), split after the mbarrier
initialisation barrier (which now counts every thread):

    if tid >= T:                         // the producer warpgroup, after every consumer warpgroup
        setmaxnreg.dec P
        if tid == T:  <the producer slice: the loops and conditions that lead to refills, and the refills>

(A kernel with warpgroup refills, `sm90.producer_warpgroup`: the row gathers of a paged cache with cp.async,
which all 128 threads of the producer warpgroup issue, runs the slice on every producer thread: the gathers
inlined, and any one-thread TMA refill under `if tid == T`.)
    else:                                // the T consumer threads: tid, warpgroups and barriers unchanged
        setmaxnreg.inc C
        <the kernel without the refills>

The producer slice is the part of the kernel the refills depend on: the loops and `scf.if`s around them
(without their loop-carried values or results, which belong to the consumers) and the index arithmetic of
their coordinates and parities. Refusing rather than guessing: a refill that depends on a loop-carried value
or on an `scf.if` result is refused by name. The producer runs ahead of the consumers by as many refills as
the rings have slots: its only synchronisation is the empty barrier of each slot, which the consumers
arrive on when they release it, and the consumers' only one is the full barrier the TMA completes.

Register budgets come from the allocator's pressure report, not constants: the producer branch's pressure
(rounded up to setmaxnreg's step of 8, at least 24) is P; the consumers get what the CTA's registers leave,
C = min(256, (R (T + 128) - 128 P) / T rounded down to 8), where R = `facts.registers_at_entry(T + 128)` is
what ptxas gives every warp at entry (168 at 384 threads): setmaxnreg only moves the CTA's own R (T + 128)
registers between its warpgroups (a per-CTA pool), so a split past them leaves a `setmaxnreg.inc` waiting
forever on the GPU (65536 - 128 P, the SM's register file, hung every FP8 kernel at head_dim 128 and 256: 160
+ 2 x 176 and 112 + 2 x 200 need 65536 of the 64512); a consumer pressure above C is refused (a
`ConsumerBudgetError`, a `RegisterBudgetError`), naming both and what is live at the consumers' peak; the
default pipeline then falls back to a configuration without a producer (`tessera.lowering.fallback`).
With warpgroup refills the consumers get their pressure rounded up, C, and the producer what that leaves (at
most C): ptxas schedules the unrolled gather's table loads ahead, needing more than the count says.

With `pingpong=true` (FlashAttention-3's warpgroup ping-pong), the consumer warpgroups take turns at the
tensor core: in every loop that issues wgmma, warpgroup w waits at named barrier 1 + w before its first
wgmma of the trip and, once the trip's last group is committed, arrives at the other warpgroup's barrier;
warpgroup 1 arrives once before the loops so that warpgroup 0 starts, and warpgroup 0 consumes the extra
arrival after them. While one warpgroup's GEMMs run, the other does its softmax. Needs exactly two
consumer warpgroups, and no barrier of both consumer warpgroups inside a turn (a `bar.sync` of more than one
warpgroup's threads between a loop's first wgmma and its last commit: the backward's barrier that publishes
dS): the other warpgroup waits for its turn there and never arrives, a deadlock, so such a kernel is refused.

Kernels without ring refills have no producer work and are left unchanged; where a loop issues TMA copies
(pipeline-loops could have made rings of them but did not run), with a TesseraWarning naming the kernel (a
pipeline that asked for warp specialization did not get it). Loops that copy with ld.global (rows TMA cannot
read: the any-shape GEMM) or kernels without copy loops are left unchanged silently: nothing was lost.
Given only Tile IR, tessera-opt and tessera-run refuse the pass (`input_level`, `tessera.ir.diagnostics.check_pass_input`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import DictionaryAttr, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import is_side_effect_free
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.diagnostics import located, warn
from tessera.ir.walk import walk_ops
from tessera.dialects import sm90
from tessera.dialects.sm90_base import int_value
from tessera.ir.kernel_marks import target_kernels_in
from tessera.kernel_abi import TARGET_KERNEL_ATTR
from tessera.regalloc import RegisterBudgetError
from tessera.passes.convert_tile_to_sm90 import INVARIANT_ATTR, PRODUCER_ATTR
from tessera.passes.convert_tile_to_sm90.common import PRODUCER_WARPGROUP_ATTR
from tessera.sm90 import facts

PRODUCER_THREADS = facts.WARPGROUP_SIZE
PINGPONG_BARRIER = 1
"""Named barriers 1 and 2 are the ping-pong turns of consumer warpgroups 0 and 1 (0 is the block's)."""


class WarpSpecializeError(DiagnosticException):
    """A kernel warp-specialize cannot split; the message names the op and the rule."""


class ConsumerBudgetError(WarpSpecializeError, RegisterBudgetError):
    """The consumer warpgroups need more registers than the producer warpgroup leaves them: a register budget
    refusal, after which the default pipeline tries its smaller configurations (`tessera.lowering.fallback`)."""


def _refuse(op: Operation, message: str) -> None:
    """Raise the WarpSpecializeError `message` about `op` (the kernel itself for what concerns it as a whole),
    located in the input (`tessera.ir.diagnostics.located`)."""
    where = f"{str(op).splitlines()[0].strip()[:120]}: " if not isinstance(op, func.FuncOp) else ""
    raise WarpSpecializeError(located(op, f"warp-specialize: {where}{message}", name_op=False))


def _turn(body: Block) -> list[Operation]:
    """The ops of a wgmma loop's `body` that ping-pong runs inside a warpgroup's turn: from its first wgmma
    (or the fence opening it) to its last commit."""
    ops = list(body.ops)
    first = next(i for i, o in enumerate(ops) if isinstance(o, sm90.WgmmaFenceOp | sm90.WgmmaMmaAsyncOp))
    last = max(i for i, o in enumerate(ops) if isinstance(o, sm90.WgmmaCommitGroupOp))
    return ops[first:last + 1]


def _check_turns_free_of_barriers(fn: func.FuncOp, block: Block) -> None:
    """Refuse ping-pong where a loop that issues wgmma waits, inside a turn, at a barrier of more than one
    warpgroup (module docstring): the other consumer warpgroup is waiting for its turn and never arrives. The
    refusal is located at kernel `fn` (`block`, the consumers' code being built, is not in it yet)."""
    for loop in block.walk():
        if not isinstance(loop, scf.ForOp) or not any(isinstance(o, sm90.WgmmaMmaAsyncOp) for o in loop.body.block.ops):
            continue
        for op in _turn(loop.body.block):
            for inner in walk_ops(op):
                if isinstance(inner, sm90.BarSyncOp) and int_value(inner.threads) > facts.WARPGROUP_SIZE:
                    threads = int_value(inner.threads)
                    _refuse(fn, f"ping-pong: `sm90.bar_sync {int_value(inner.barrier)}, {threads}` waits for {threads} "
                                "threads inside a consumer warpgroup's turn (between its loop's first wgmma and last "
                                "commit), where the other warpgroup waits for its turn and never arrives (a deadlock); "
                                "use warp-specialize without pingpong")


def _contains_producer(op: Operation) -> bool:
    return any(PRODUCER_ATTR in inner.attributes for inner in walk_ops(op))


def _is_pure(op: Operation) -> bool:
    """No effect but its results (arith's integer divisions declare no effects in xDSL, yet have none); a load
    marked `sm90.invariant` (an element of a read-only table, such as a sequence start) reads the same value
    wherever it is recomputed, so the producer may recompute it too."""
    if INVARIANT_ATTR in op.attributes:
        return True
    return not op.regions and (op.dialect_name() in ("arith", "vector", "math") or is_side_effect_free(op))


def _take_ops(block: Block) -> list[Operation]:
    """Detach every op of `block` but its terminator (erased: the caller gives the ops a new one)."""
    ops = list(block.ops)
    for op in ops:
        op.detach()
    if ops and isinstance(ops[-1], scf.YieldOp):
        ops.pop().erase()
    return ops


def _enclosing_loop(op: Operation) -> Operation | None:
    """The innermost scf.for or scf.while around `op` in its function, or None."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        if isinstance(parent, scf.ForOp | scf.WhileOp):
            return parent
        parent = parent.parent_op()
    return None


def _erase_dead(block: Block) -> None:
    """Erase pure ops without uses, and scf.if ops without results whose regions are empty, to a fixpoint.

    One walk in reverse program order reaches the fixpoint: an op's users come after it (dominance), and an
    scf.if's inner ops after the if, so each op is visited after everything whose erasure could make it dead
    (the ops defining its operands, and the if around them, come before it in program order)."""
    for op in reversed(list(block.walk())):
        if op.parent is None:
            continue
        empty_if = isinstance(op, scf.IfOp) and not op.results and all(
            not r.blocks or len(r.block.ops) == 1 for r in op.regions)
        if empty_if or (_is_pure(op) and op.results and not any(r.uses for r in op.results)):
            op.detach()
            op.erase()


@dataclass
class _Split:
    """Splits one kernel; see the module docstring."""

    fn: func.FuncOp
    pingpong: bool

    def _unpipelined_tma_loop(self) -> bool:
        """Whether a loop of the kernel issues TMA copies without rings, and copies nothing by threads:
        pipeline-loops could have given it refills (it did not run). A loop that also copies a tile by threads
        (`sm90.st_shared_b16` of elements read with ld.global: rows TMA cannot read, which pipeline-loops
        leaves single-stage on purpose) or a kernel that copies outside loops lost nothing."""
        loops = {}
        for op in self.fn.walk():
            if isinstance(op, sm90.TmaLoadOp | sm90.TmaLoadMulticastOp | sm90.StSharedB16Op):
                loop = _enclosing_loop(op)
                if loop is not None:
                    loops.setdefault(loop, set()).add(isinstance(op, sm90.StSharedB16Op))
        return any(kinds == {False} for kinds in loops.values())

    def run(self) -> None:
        if not any(PRODUCER_ATTR in op.attributes for op in walk_ops(self.fn)):
            if self._unpipelined_tma_loop():
                warn(located(self.fn, "warp-specialize: no ring refills to give a producer (the kernel was not "
                                      "pipelined: run pipeline-loops before convert-tile-to-sm90); left unchanged"))
            return
        entry = self.fn.body.block
        info = self.fn.attributes[TARGET_KERNEL_ATTR]
        consumers = info.data["threads"].value.data
        if consumers % facts.WARPGROUP_SIZE:
            _refuse(self.fn, f"the kernel has {consumers} threads, not whole warpgroups")
        init = next((op for op in entry.ops if isinstance(op, sm90.BarSyncOp)), None)
        if init is None:
            _refuse(self.fn, "no barrier after the mbarrier initialisation to split at")
        ret = entry.last_op
        main = []
        op = init.next_op
        while op is not ret:
            main.append(op)
            op = op.next_op
        tid = next((o.result for o in entry.ops if isinstance(o, sm90.SpecialRegOp) and o.register.data == "tid.x"), None)
        if tid is None:
            _refuse(self.fn, "the kernel does not read tid.x")

        # The producer: the main part's slice that the refills need, copied op by op.
        producer_block, consumer_block = Block(self._producer_slice(main)), Block()
        gathers = any(PRODUCER_WARPGROUP_ATTR in op.attributes for op in producer_block.walk())
        self._inline_refills(producer_block, tid, consumers if gathers else None)
        for op in main:
            op.detach()
            consumer_block.add_op(op)
        for op in [o for o in consumer_block.walk() if PRODUCER_ATTR in o.attributes]:
            op.detach()
            op.erase()
        _erase_dead(consumer_block)
        if self.pingpong:
            self._pingpong(consumer_block, tid, consumers)

        total = consumers + PRODUCER_THREADS
        if gathers:  # the whole warpgroup runs the slice; TMA refills keep their one-thread guards
            producer_block.add_op(scf.YieldOp())
        else:
            leader_block = producer_block
            leader_block.add_op(scf.YieldOp())
            c_total = arith.ConstantOp(IntegerAttr(consumers, IndexType()))
            is_leader = arith.CmpiOp(tid, c_total.result, "eq")
            producer_block = Block([c_total, is_leader, scf.IfOp(is_leader.result, [], Region(leader_block)),
                                    scf.YieldOp()])
        consumer_block.add_op(scf.YieldOp())
        c_split = arith.ConstantOp(IntegerAttr(consumers, IndexType()))
        is_producer = arith.CmpiOp(tid, c_split.result, "uge")
        split = scf.IfOp(is_producer.result, [], Region(producer_block), Region(consumer_block))
        entry.insert_ops_before([c_split, is_producer, split], ret)

        # Every thread initialises-and-waits together once.
        new_init = sm90.BarSyncOp(init.barrier.value.data, total)
        entry.insert_op_before(new_init, init)
        init.detach()
        init.erase()
        self.fn.attributes[TARGET_KERNEL_ATTR] = DictionaryAttr({**info.data, "threads": IntegerAttr(total, 64)})
        self._budgets(split, consumers, gathers)

    # -- the producer slice ------------------------------------------------------------------------------
    def _producer_slice(self, main: list[Operation]) -> list[Operation]:
        """Copies of the refills of `main` (the kernel's ops after the mbarrier initialisation), of the loops
        and `scf.if`s around them without their loop-carried values or results (the consumers' state), and of
        the ops computing the values they read; nothing else is copied. Refuses a refill that depends on a
        loop-carried value, an `scf.if` result or an op with side effects."""
        kept = self._slice_decisions(main)
        return self._copy_slice(main, kept, {})

    def _slice_decisions(self, ops: list[Operation]) -> dict[Operation, bool]:
        """What the producer keeps of `ops` (and of the regions of the loops and ifs it strips), decided in one
        walk in reverse program order: True for an op copied whole (a refill, or a pure op whose results are
        read), False for a loop or `scf.if` around refills, copied without its loop-carried values or results."""
        kept: dict[Operation, bool] = {}
        needed: set[SSAValue] = set()

        def visit(block_ops) -> None:
            for op in reversed(list(block_ops)):
                if isinstance(op, scf.YieldOp):
                    continue  # the consumers' loop-carried state: a stripped region yields nothing
                if PRODUCER_ATTR in op.attributes:
                    kept[op] = True
                    needed.update(operand for inner in walk_ops(op) for operand in inner.operands)
                elif isinstance(op, scf.ForOp | scf.IfOp) and _contains_producer(op):
                    for region in op.regions:
                        for inner in region.blocks:
                            visit(inner.ops)
                    if isinstance(op, scf.ForOp):
                        if any(arg in needed for arg in op.body.block.args[1:]):
                            _refuse(op, "a ring refill depends on a loop-carried value")
                        if any(r in needed for r in op.results):
                            _refuse(op, "the producer's loop results are used")
                        needed.update((op.lb, op.ub, op.step))
                    else:
                        if any(r in needed for r in op.results):
                            _refuse(op, "the producer needs the result of an scf.if")
                        needed.add(op.cond)
                    kept[op] = False
                elif any(r in needed for r in op.results):
                    if isinstance(op, scf.ForOp | scf.IfOp | scf.WhileOp) or not _is_pure(op):
                        _refuse(op, "a ring refill depends on a value this op computes with side effects or "
                                    "loop-carried state; the producer cannot recompute it")
                    kept[op] = True
                    needed.update(operand for inner in walk_ops(op) for operand in inner.operands)

        visit(ops)
        return kept

    def _copy_slice(self, ops, kept: dict[Operation, bool], mapping: dict) -> list[Operation]:
        """Copies of the ops of `ops` that `kept` keeps, in program order; `mapping` takes each copied value
        to its copy."""
        copies = []
        for op in ops:
            whole = kept.get(op)
            if whole is None:
                continue
            if whole:
                copies.append(op.clone(value_mapper=mapping))
            elif isinstance(op, scf.ForOp):
                body = op.body.block
                new_body = Block(arg_types=[body.args[0].type])
                new_body.args[0].name_hint = body.args[0].name_hint
                mapping[body.args[0]] = new_body.args[0]
                new_body.add_ops(self._copy_slice(body.ops, kept, mapping) + [scf.YieldOp()])
                copies.append(scf.ForOp(*(mapping.get(v, v) for v in (op.lb, op.ub, op.step)), [], new_body))
            else:
                regions = [Region(Block(self._copy_slice(region.block.ops, kept, mapping) + [scf.YieldOp()]))
                           if region.blocks else Region() for region in op.regions]
                copies.append(scf.IfOp(mapping.get(op.cond, op.cond), [], regions[0],
                                       regions[1] if len(regions) > 1 and regions[1].blocks else None))
        return copies

    @staticmethod
    def _inline_refills(block: Block, tid: SSAValue, leader: int | None) -> None:
        """Inside the leader's branch the refills' `if thread 0` guards are moot: inline their bodies. With
        `leader` (a kernel with warpgroup refills, whose slice every producer thread runs), the warpgroup
        refills' `if tid < 128` guards are moot (the producer warpgroup is 128 threads; the gather finds its
        lane as tid mod 128) and the one-thread refills are guarded by `tid == leader` instead."""
        for op in [o for o in block.walk() if PRODUCER_ATTR in o.attributes]:
            if leader is not None and PRODUCER_WARPGROUP_ATTR not in op.attributes:
                c_leader = arith.ConstantOp(IntegerAttr(leader, IndexType()))
                is_leader = arith.CmpiOp(tid, c_leader.result, "eq")
                body = Block(_take_ops(op.regions[0].block) + [scf.YieldOp()])
                op.parent_block().insert_ops_before([c_leader, is_leader, scf.IfOp(is_leader.result, [], Region(body))], op)
            else:
                op.parent_block().insert_ops_before(_take_ops(op.regions[0].block), op)
            op.detach()
            op.erase()

    # -- ping-pong -----------------------------------------------------------------------------------------
    def _pingpong(self, block: Block, tid: SSAValue, consumers: int) -> None:
        """Emit the consumer code once per consumer warpgroup (`if tid < 128: <for warpgroup 0> else: <for
        warpgroup 1>`) so that each copy names its turn barriers with constants; in each copy, every loop
        that issues wgmma gets `bar.sync 1 + w` before its first wgmma and `bar.arrive 2 - w` after its last
        commit; warpgroup 1 arrives at barrier 1 before its first such loop, warpgroup 0 syncs there after
        its last. (A per-thread barrier id would need no copy, but the two warpgroups are then at different
        points of the same code, which a lockstep simulation of one branch cannot follow.)"""
        if consumers != 2 * facts.WARPGROUP_SIZE:
            _refuse(self.fn, f"ping-pong needs two consumer warpgroups, the kernel has {consumers // facts.WARPGROUP_SIZE}")
        threads = 2 * facts.WARPGROUP_SIZE
        _check_turns_free_of_barriers(self.fn, block)
        ops = list(block.ops)
        copies = []
        for w in (0, 1):
            copy = Block()
            mapping = {}
            for op in ops:
                copy.add_op(op.clone(value_mapper=mapping))
            copy.add_op(scf.YieldOp())
            loops = [op for op in copy.walk() if isinstance(op, scf.ForOp)
                     and any(isinstance(o, sm90.WgmmaMmaAsyncOp) for o in op.body.block.ops)]
            if not loops:
                _refuse(self.fn, "ping-pong needs a loop that issues wgmma")
            for loop in loops:
                body = loop.body.block
                first = next(o for o in body.ops if isinstance(o, sm90.WgmmaFenceOp | sm90.WgmmaMmaAsyncOp))
                last_commit = [o for o in body.ops if isinstance(o, sm90.WgmmaCommitGroupOp)][-1]
                body.insert_op_before(sm90.BarSyncOp(PINGPONG_BARRIER + w, threads), first)
                body.insert_op_after(sm90.BarArriveOp(PINGPONG_BARRIER + 1 - w, threads), last_commit)
            if w == 1:
                loops[0].parent_block().insert_op_before(sm90.BarArriveOp(PINGPONG_BARRIER, threads), loops[0])
            else:
                loops[-1].parent_block().insert_op_after(sm90.BarSyncOp(PINGPONG_BARRIER, threads), loops[-1])
            copies.append(copy)
        for op in reversed(ops):
            op.detach()
            op.erase()
        c = arith.ConstantOp(IntegerAttr(facts.WARPGROUP_SIZE, IndexType()))
        first_group = arith.CmpiOp(tid, c.result, "ult")
        block.add_ops([c, first_group, scf.IfOp(first_group.result, [], Region(copies[0]), Region(copies[1]))])

    # -- register budgets ----------------------------------------------------------------------------------
    def _budgets(self, split: scf.IfOp, consumers: int, gathers: bool = False) -> None:
        from tessera.regalloc import region_peaks

        # The setmaxnreg ops go in first, with provisional budgets that are set below: the allocation sized
        # here is then that of the final kernel, which allocate-registers finds in the allocator's memo.
        producer_region, consumer_region = split.regions
        decrease = sm90.SetMaxNRegOp("dec", facts.SETMAXNREG_MIN)
        increase = sm90.SetMaxNRegOp("inc", facts.SETMAXNREG_MAX)
        producer_region.block.insert_op_before(decrease, producer_region.block.first_op)
        consumer_region.block.insert_op_before(increase, consumer_region.block.first_op)
        producer_peak, consumer_peak = region_peaks(self.fn, split)
        producer_need, consumer_need = producer_peak.registers, consumer_peak.registers
        step = facts.SETMAXNREG_STEP
        threads = PRODUCER_THREADS + consumers
        owned = facts.registers_at_entry(threads) * threads  # the CTA's pool: not the SM's register file
        producer = max(facts.SETMAXNREG_MIN, -(-producer_need // step) * step)
        consumer = min(facts.SETMAXNREG_MAX, (owned - PRODUCER_THREADS * producer) // consumers // step * step)
        if gathers and consumer_need <= consumer:
            # A warpgroup refill (the cp.async gather) is unrolled row by row, and ptxas hoists its page-table
            # loads ahead of the copies well past the allocator's count: the producer takes what the consumers
            # leave (at most their own budget), not its counted need.
            consumer = max(facts.SETMAXNREG_MIN, -(-consumer_need // step) * step)
            spare = (owned - consumers * consumer) // PRODUCER_THREADS // step * step
            producer = max(producer, min(spare, consumer))
        entry = facts.registers_at_entry(threads, largest_inc=consumer)
        where = (f"the CTA's {threads} threads own {owned} registers, {owned // threads} each at entry, which "
                 f"setmaxnreg moves between warpgroups")
        if consumer_need > consumer or producer > entry:
            need = (f"the consumer warpgroups need {consumer_need} registers per thread but only {consumer} are left "
                    f"after the producer's {producer}" if consumer_need > consumer else
                    f"the producer warpgroup needs {producer} registers per thread, more than the {entry} every "
                    f"warp starts with (setmaxnreg.dec cannot raise it)")
            raise ConsumerBudgetError(located(self.fn, f"warp-specialize: {need} ({where}); their peak is "
                                                       f"{consumer_peak.describe()}", name_op=False), summary=need)
        facts.check_register_budget([producer] + [consumer] * (consumers // facts.WARPGROUP_SIZE), facts.WARPGROUP_SIZE,
                                    threads)
        decrease.count = IntegerAttr(producer, 64)
        increase.count = IntegerAttr(consumer, 64)


@dataclass(frozen=True)
class WarpSpecializePass(ModulePass):
    """Split every pipelined Target IR kernel into a TMA producer warpgroup and its consumer warpgroups."""

    name = "warp-specialize"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""
    pingpong: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in target_kernels_in(op):
            _Split(fn, self.pingpong).run()
