"""Synchronisation instructions: bar/barrier (sync, arrive, red), bar.warp.sync, setmaxnreg, nanosleep, and the
fences (no-ops). The mbarrier instructions are `mbarrier`; the warp collectives (elect, shfl, vote, match, redux,
activemask) are `warp_collectives`.

Named barriers [P#...-bar]: `bar.sync id{, n}` (and `bar.red`, which also reduces a predicate) blocks its threads until the barrier completes; `bar.arrive
id, n` counts without blocking. The barrier counts warps, not threads: each time all non-exited threads of a
warp have executed a bar instruction on it, the warp's arrival is marked and adds the warp size to the count
("causes executing thread to wait for all non-exited threads from its warp and marks warps' arrival"), so a
warp that executes `bar.arrive id, n` and then `bar.sync id, n` in one phase counts twice. With n the
barrier completes when the count reaches n; without n, when it reaches the warp size times the warps that
still have a thread. Exited threads never block a barrier. The barrier then resets.
A warp whose threads reach an aligned barrier (`bar`, `barrier.*.aligned`) at two instructions in one phase is a
hazard (`_check_same_instruction`).

bar.warp.sync runs once all non-exited threads of its member mask reach it (the scheduler's `unit`); the others
go on (`__syncwarp(mask)` in each branch of a divergent warp).
`setmaxnreg` checks `facts.check_setmaxnreg` per
warpgroup and moves registers through the CTA's pool, `.inc` waiting for them (`register_pool`). Fences and membar have no effect on values: the
executor is sequentially consistent (fence.proxy.async is tracked by `asynchrony`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tessera.interpreters.ptx.cluster import decode_barrier_cluster
from tessera.interpreters.ptx.decode import DECODERS, Operands, Step, opcode
from tessera.interpreters.ptx.memory import lanes_of
from tessera.interpreters.ptx.register_pool import set_max_registers
from tessera.interpreters.ptx.state import BAR, EXITED, PARK, RUN, Machine
from tessera.interpreters.ptx.syntax import Imm
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.ranges import distinct_ascending
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

U32 = ptx_type("u32")
PRED = ptx_type("pred")


# region named barriers
def check_barrier(m: Machine, barrier: int, cta: int, inst=None) -> None:
    """Mark the arrival of each warp of CTA slot `cta` whose non-exited threads have all executed a bar
    instruction on `barrier` since its last arrival; complete the barrier when the count is reached (see the
    module docstring) and wake its waiters. More warps arriving at once (`inst`) than the thread count admits is
    a hazard: the hardware completes the barrier with as many as the count, and which warps pass and which
    wait for its next phase is a matter of timing [memory_model.BARRIER_COUNT]."""
    rows = slice(cta * m.threads, (cta + 1) * m.threads)  # the CTA's lanes: views of the per-lane arrays
    lanes = np.arange(rows.start, rows.stop)
    uncounted = m.bar_uncounted[barrier, rows]
    live = m.status[rows] != EXITED
    whole = _by_warp(uncounted, False).any(axis=1) & _by_warp(uncounted | ~live, True).all(axis=1)
    if any_set(whole):  # warps whose threads have all arrived since the warp's last arrival: each arrives
        m.bar_count[barrier, cta] += facts.WARP_SIZE * int(whole.sum())
        m.bar_uncounted[barrier, rows][np.repeat(whole, facts.WARP_SIZE)[:len(lanes)]] = False
        m.bar_warp_line[barrier, cta * len(whole) + np.flatnonzero(whole)] = 0
    count = int(m.bar_count[barrier, cta])
    explicit = int(m.bar_expected[barrier, cta])
    expected = explicit or facts.WARP_SIZE * int(_by_warp(live, False).any(axis=1).sum())
    if count == 0 or count < expected:
        return
    if explicit and count > expected and inst is not None:
        arrived = lanes[m.bar_arrived[barrier, rows]]
        raise m.tracker.hazard(inst, f"{count} threads arrive on barrier {barrier} at once, whose thread count is "
                                     f"{expected}: the barrier completes with {expected} of them and the others wait "
                                     "for its next phase, which ones depending on timing (wrong barrier thread "
                                     "count)", int(arrived[-1]))
    waiting = lanes[(m.status[rows] == BAR) & (m.bar_waiting[rows] == barrier)]
    m.tracker.shared_by_barrier(waiting, (barrier, cta))
    finish = getattr(m, "bar_reductions", {}).pop((barrier, cta), None)
    arrived = m.bar_arrived[barrier, rows] & ~m.bar_uncounted[barrier, rows]
    if finish is not None:  # bar.red: reduce over the threads that arrived, give the result to the waiters
        finish(waiting, lanes[arrived])
    m.status[waiting] = RUN
    m.woken += 1
    m.pc[waiting] += 1
    m.bar_waiting[waiting] = -1
    m.bar_arrived[barrier, rows][arrived] = False
    early = lanes[m.bar_arrived[barrier, rows]]  # threads of warps not yet whole: they count for the next phase
    if len(early):
        m.tracker.hb.bar_arrived((barrier, cta), early)
        m.tracker.barrier_arriving((barrier, cta), early)
    m.bar_count[barrier, cta] = 0
    if not any_set(m.bar_uncounted[barrier, rows]):
        m.bar_expected[barrier, cta] = 0
    m.sync_epoch += 1


def _check_same_instruction(m: Machine, inst, barrier: int, active: np.ndarray, line: int) -> None:
    """An aligned barrier (`bar`, `barrier.*.aligned`) is one the threads execute at the same instruction: the ISA
    leaves it undefined when a condition sends them to different ones (`__syncthreads()` in both branches of a
    divergent warp), which `barrier.sync` without .aligned allows. So a warp whose threads arrive at `barrier` at two
    instructions in one phase, one of them aligned, is a hazard. `line`: this instruction's (negative without
    .aligned)."""
    warps = distinct_ascending(m.unit_of[facts.WARP_SIZE][active])  # (lanes ascend)
    before = m.bar_warp_line[barrier, warps]
    other = (before != 0) & (before != line) & ((before > 0) | (line > 0))
    if any_set(other):
        i = int(np.argmax(other))
        lane = int(active[np.argmax(m.unit_of[facts.WARP_SIZE][active] == warps[i])])
        raise m.tracker.hazard(inst, f"the threads of this warp arrive on barrier {barrier} at two instructions (lines "
                                     f"{abs(int(before[i]))} and {abs(line)}) in one phase: an aligned barrier must be "
                                     "executed by all threads of a warp at the same instruction (undefined otherwise: "
                                     "a barrier in both branches of a divergent warp)", lane)
    m.bar_warp_line[barrier, warps] = line


def _by_warp(flags: np.ndarray, pad: bool) -> np.ndarray:
    """[warp, thread of the warp]: a CTA's per-thread `flags` (in thread order, warp w = threads 32w..32w + 31),
    a last warp short of threads filled with `pad`."""
    short = -len(flags) % facts.WARP_SIZE
    if short:
        flags = np.concatenate([flags, np.full(short, pad)])
    return flags.reshape(-1, facts.WARP_SIZE)


def _barriers_on_exit(m: Machine):
    def hook(ctas):
        for cta in ctas:
            pending = m.bar_uncounted[:, m.lane_cta == cta].any(axis=1) | (m.bar_count[:, cta] > 0)
            for barrier in np.flatnonzero(pending):
                check_barrier(m, int(barrier), int(cta))
    return hook


def member_mask(ops: Operands, inst, operand):
    """(reader, immediate or None) of the member mask operand of bar.warp.sync or a warp collective."""
    return ops.read(inst, operand, U32), (operand.value & 0xFFFFFFFF if isinstance(operand, Imm) else None)


@opcode("bar", "barrier")
def decode_bar(ops: Operands, inst, mods):
    if "cluster" in inst.modifiers:
        return decode_barrier_cluster(ops, inst, mods)
    aligned = inst.opcode == "bar" or "aligned" in inst.modifiers  # bar is barrier.aligned
    mods.drop("cta", "aligned")
    m = ops.m
    if mods.take("warp"):
        mods.take("sync")

        if len(inst.operands) != 1:
            raise ops.refuse(inst, "bar.warp.sync needs one member mask")
        mask, static = member_mask(ops, inst, inst.operands[0])

        def warp_sync(sel):  # "guarantees memory ordering among threads participating in barrier"
            lanes = lanes_of(m, sel)
            warp = m.unit_of[facts.WARP_SIZE][lanes]
            for w in np.unique(warp):
                m.tracker.hb.barrier(lanes[warp == w], lanes[warp == w])
        return Step(inst, warp_sync, unit=facts.WARP_SIZE, mask=static, member_mask=mask)
    operands, reduce = inst.operands, None
    if mods.take("red"):
        reduce = _bar_reduction(ops, inst, mods)
        operands = inst.operands[1:-1]
        action = "sync"
    else:
        action = mods.take("sync", "arrive")
    if action is None:
        raise ops.refuse(inst, "bar needs .sync or .arrive")
    if not getattr(m, "barrier_hook", False):
        m.exit_hooks.append(_barriers_on_exit(m))
        m.barrier_hook = True
    if not 1 <= len(operands) <= 2:
        raise ops.refuse(inst, "bar needs a barrier id and an optional thread count")
    barrier_id = ops.read(inst, operands[0], U32)
    count = ops.read(inst, operands[1], U32) if len(operands) == 2 else None
    inst_operands = inst.operands
    inst = replace(inst, operands=operands)
    if isinstance(inst.operands[0], Imm):
        try:
            facts.check_named_barrier(inst.operands[0].value,
                                      inst.operands[1].value if count and isinstance(inst.operands[1], Imm) else None,
                                      10**9, arrive=action == "arrive")
        except ValueError as error:
            raise ops.refuse(inst, str(error)) from None

    def arrive(active, barrier: int, n: int):
        try:
            facts.check_named_barrier(barrier, n or None, m.threads, arrive=action == "arrive")
        except ValueError as error:
            raise m.error(inst, str(error), int(active[0])) from None
        ctas = distinct_ascending(m.lane_cta[active]).tolist()  # (active ascend)
        for cta in ctas:
            previous = int(m.bar_expected[barrier, cta])
            if previous and previous != n and any_set(m.bar_arrived[barrier, m.lane_cta == cta]):
                # arrivals of one phase that disagree on its count: which complete it is timing, a hazard as too
                # many arrivals at once are [memory_model.BARRIER_COUNT]
                raise m.tracker.hazard(inst, f"barrier {barrier} used with thread counts {previous} and {n}",
                                       int(active[0]))
            m.bar_expected[barrier, cta] = n
        _check_same_instruction(m, inst, barrier, active, inst.line if aligned else -inst.line)
        m.bar_arrived[barrier, active] = True
        m.bar_uncounted[barrier, active] = True
        for cta in ctas:
            mine = active[m.lane_cta[active] == cta]
            m.tracker.hb.bar_arrived((barrier, int(cta)), mine)
            m.tracker.barrier_arriving((barrier, int(cta)), mine)
        if reduce is not None:
            reduce(barrier, active)
        if action == "sync":
            m.status[active] = BAR
            m.bar_waiting[active] = barrier
        else:
            m.pc[active] += 1
        for cta in ctas:
            check_barrier(m, barrier, int(cta), inst)

    def run(lanes, active):
        inactive = np.setdiff1d(lanes, active, assume_unique=True) if len(active) != len(lanes) else lanes[:0]
        m.pc[inactive] += 1
        if not len(active):
            return
        # the id and count must agree within a warp; warps (e.g. FA3's warpgroups, each on its own barrier)
        # may name different barriers at the same instruction
        ids = np.broadcast_to(np.asarray(barrier_id(active), np.int64), active.shape)
        counts = np.broadcast_to(np.asarray(count(active), np.int64), active.shape) if count is not None \
            else np.zeros(active.shape, np.int64)
        warp = m.unit_of[facts.WARP_SIZE][active]
        for values, what in ((ids, "the barrier id"), (counts, "the thread count")):
            first = np.full(int(warp.max()) + 1, -1, np.int64)
            first[warp[::-1]] = values[::-1]
            differ = values != first[warp]
            if any_set(differ):
                i = int(np.argmax(differ))
                raise m.error(inst, f"{what} must be the same in all threads of a warp: {int(first[warp[i]])} vs "
                                    f"{int(values[i])}", int(active[i]))
        for barrier, n in sorted(set(zip(ids.tolist(), counts.tolist()))):
            arrive(active[(ids == barrier) & (counts == n)], barrier, n)

    return Step(replace(inst, operands=inst_operands), run, control=True)


def _bar_reduction(ops: Operands, inst, mods):
    """`bar.red.{popc.u32,and.pred,or.pred} d, id{, n}, {!}p`: a bar.sync whose threads each give p; when
    the barrier completes, d of every released thread is the number of true p (popc) or their and/or over
    the threads that arrived. Returns `record(barrier, lanes)`, run as the lanes arrive."""
    m = ops.m
    operation = mods.take("popc", "and", "or")
    t = mods.type()
    if operation is None or t.name != ("u32" if operation == "popc" else "pred") or len(inst.operands) < 3:
        raise ops.refuse(inst, "bar.red variant (popc.u32, and.pred, or.pred with a predicate)")
    write = ops.write(inst, inst.operands[0], t)
    predicate = ops.read(inst, inst.operands[-1], PRED)
    if not hasattr(m, "bar_red_value"):
        m.bar_red_value = np.zeros(m.lanes, bool)
        m.bar_reductions = {}

    def finish(lanes, arrived):
        values = m.bar_red_value[arrived]
        result = {"popc": np.uint32(values.sum()), "and": all_set(values), "or": any_set(values)}[operation]
        write(lanes, np.full(len(lanes), result))

    def record(barrier, lanes):
        m.bar_red_value[lanes] = np.broadcast_to(predicate(lanes), lanes.shape)
        for cta in np.unique(m.lane_cta[lanes]):
            m.bar_reductions[(barrier, int(cta))] = finish

    return record


# endregion
# region setmaxnreg, fences, nanosleep
@opcode("setmaxnreg")
def decode_setmaxnreg(ops: Operands, inst, mods):
    action = mods.take("inc", "dec")
    mods.drop("sync", "aligned", "u32")
    count = ops.static(inst, inst.operands[0])
    try:
        facts.check_setmaxnreg(action, count)
    except ValueError as error:
        raise ops.refuse(inst, str(error)) from None
    m = ops.m

    def run(lanes, active):
        inactive = np.setdiff1d(lanes, active, assume_unique=True) if len(active) != len(lanes) else lanes[:0]
        m.pc[inactive] += 1
        if len(active):
            set_max_registers(m, inst, active, action, count)

    return Step(inst, run, control=True, unit=facts.WARPGROUP_SIZE)


@opcode("fence", "membar", "griddepcontrol", "pmevent")
def decode_no_effect(ops: Operands, inst, mods):
    if "proxy" in mods.left and "tensormap::generic" in mods.left:  # device-built tensor maps (`tensormaps`)
        return DECODERS["fence.proxy.tensormap"](ops, inst, mods)
    mods.left = []  # ordering only: no effect in a sequentially consistent executor
    return lambda sel: None


@opcode("nanosleep")
def decode_nanosleep(ops: Operands, inst, mods):
    """`nanosleep.u32 t`: the thread sleeps (for an implementation-defined time of at most about t ns). Modelled
    as a park that ends when nothing else can run (a legal timing): a spin wait on memory (the deterministic
    backward's semaphore, `ld.acquire` then `@!p nanosleep`) thus lets the other CTAs of the batch progress,
    instead of min-pc scheduling running the spin forever. Woken twice with no synchronisation progress
    between (a barrier, an mbarrier arrival, a release reduction) is a deadlock, reported naming the line. A lane
    woken from a failed atom.cas's park sleeps no time here (`Machine.cas_parked`): it has not retried the cas
    since the write that woke it."""
    mods.left = []
    m = ops.m

    def run(lanes, active):
        m.pc[lanes] += 1
        sleeping = active[~m.cas_parked[active]]
        m.cas_parked[active] = False
        m.status[sleeping] = PARK
        m.park_address[sleeping] = -1
        m.park_test[sleeping] = True

    return Step(inst, run, control=True)


# endregion
