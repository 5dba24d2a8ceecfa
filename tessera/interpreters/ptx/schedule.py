"""Scheduling lanes with per-thread program counters: divergence, reconvergence, blocking and deadlock.

Every lane has its own pc. Each step picks the smallest pc among running lanes (all CTAs of the batch) and
executes that instruction for every running lane there, so lanes that agree (a converged warp, a whole CTA,
the same code in several CTAs) run as one NumPy operation. *Min-pc scheduling* reconverges structured code:
after `@p bra ELSE` the lanes at the lower pc (the then-branch) run until they reach the join point, where
the others are waiting with a higher pc; a loop with per-lane trip counts keeps the lanes that loop again
(lower pc) running until they leave. Any interleaving of lanes that respects the synchronisation is a legal
PTX execution; this is one of them.

Blocking: a lane at `bar.sync` (status BAR), at an `mbarrier.try_wait` whose phase is not complete (PARK:
try_wait is modelled as a wait that succeeds once the phase completes, a legal timing since the time limit is
implementation-defined), or at a collective instruction whose warp/warpgroup has not all arrived (COLL),
is not selected; barriers and mbarriers wake it. A failing `mbarrier.test_wait` returns false and parks the
lane after it; when nothing else can run such lanes are woken, and if that happens twice with no
synchronisation progress in between (no barrier completion, no mbarrier arrival), the run stops.

Releases: when an mbarrier arrive completes a phase that parked lanes wait for, those lanes (`Machine.preferred`)
are selected first until they block or exit, so that a producer refills a released slot at the earliest
moment (see `asynchrony`).

Schedules (`launch(schedule=...)`): "min-pc" (the default, above) or "adversarial" (with `seed`): the
lanes a release wakes still run first (a producer refills a released slot at once: producers as far ahead as
the synchronisation allows), and otherwise each step runs the lanes at the pc of a running lane drawn at
random, so warps overtake each other and consumers run late in ways min-pc never tries. The draw comes from
`numpy.random.default_rng(seed)`: the same seed replays the same interleaving. Reconvergence still happens
(lanes meeting at one pc run together), so the run is slower but still vectorised. Happens-before
(`happens_before`) judges ordering on any schedule; this one finds what it cannot decide (an order that only
some interleavings deadlock on, a value read from memory that decides the control flow).

"delayed" (with `seed`) delays one CTA as long as the synchronisation allows: the CTA whose linear index (x
fastest, as `launch(cta_order=)` numbers them) is `seed` modulo the grid's CTAs (0 without a seed) runs only when
no lane of another CTA of its batch can run (each has exited, or waits at a barrier, on an mbarrier phase, in a
spin or a `nanosleep` poll), and otherwise the schedule is min-pc. A GPU may start or stall a CTA for any time.
Happens-before judges the synchronisation a run went through, and what a load reads decides that: a consumer
whose flag wait was deleted still loads the flag once with `ld.acquire`, and only a schedule that runs that load
before the producer CTA's release shows the race between the consumer's reads and the producer's later stores.
A matrix over seeds delays each CTA in turn; the same seed replays the run.

"delayed-warp" and "delayed-warpgroup" (with `seed`) delay one warp (warpgroup) of every CTA the same way: the warp
of index `seed` modulo the CTA's warps (warpgroups; 0 without a seed) runs only when no other lane of its own CTA
can, and otherwise the schedule is min-pc. A GPU's warp schedulers may leave one warp behind for any time (a
consumer warpgroup stalled on its math while the producer and the other consumers run on), and min-pc, which keeps
the warps of a CTA in lockstep wherever their code agrees, never tries that: a slot release that counts one
consumer warpgroup where two read the slot lets the producer refill it before the late warpgroup has read it, and
only then does happens-before see the late read of a refill it has no edge from. Seeds 0 to warps - 1 delay each
warp in turn.

Deadlock: when no lane can run and some have not exited, `run` raises `PtxDeadlockError` naming each group
of blocked lanes, what they wait for (for an mbarrier: its phase, pending arrivals, tx-count and the copies
in flight on it), and the line.

Step budget: a *step* issues one instruction for every running lane at the same pc, so no thread executes
more instructions than its batch takes steps. A batch that takes more than `max_steps` steps (a loop that never
ends, a spin wait on memory nothing writes) stops with `PtxExecutionError` naming where each warp is: the
function, the line and the instruction.

The control instructions whose steps move the lanes' pcs (`bra`, `exit`, `call`/`ret`, `trap`) are decoded in
`control_flow`; this module holds the `Scheduler` that runs the decoded steps.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.asynchrony import PtxDeadlockError
from tessera.interpreters.ptx.decode import ALL, Operands, Step, guard_reader
from tessera.interpreters.ptx.register_pool import describe_wait
from tessera.interpreters.ptx.state import BAR, COLL, EXITED, PARK, REGS, RUN, STATUS_NAMES, Machine, fail
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts


SCHEDULES = ("min-pc", "adversarial", "delayed", "delayed-warp", "delayed-warpgroup")
"""The lane-selection policies `launch(schedule=...)` accepts (see the module docstring)."""

DEFAULT_MAX_STEPS = 1_000_000
"""Steps one batch of CTAs may take by default: the largest kernel of the test suite takes under 7,000 per
batch (three-pass attention at head_dim 128 from its PTX), and an endless loop stops within a minute."""


_DELAYED_UNIT = {"delayed": None, "delayed-warp": facts.WARP_SIZE, "delayed-warpgroup": facts.WARPGROUP_SIZE}
"""The lanes each delayed schedule holds back: a whole CTA (None), or one warp or warpgroup of every CTA."""

_NEVER = np.iinfo(np.int64).max
"""The pc of a lane that is not a candidate (`Scheduler.run`)."""


def _units_hit(unit: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Per lane, whether its unit (`unit`: the unit of each lane, ascending) holds one of `lanes` (an index or
    a mask): a table lookup, no sort."""
    hit = np.zeros(int(unit[-1]) + 1 if len(unit) else 0, bool)
    hit[unit[lanes]] = True
    return hit[unit]


_FULL_WARP = (1 << facts.WARP_SIZE) - 1
"""The member mask of a whole warp."""


def _whole_units(step: Step) -> int:
    """The size of the units (warps, warpgroups) whose lanes that have not exited are all among the lanes `step`
    just ran: its own for a collective whose members are all those lanes (no member mask but the whole warp's),
    0 (none known) for any other step. `Scheduler._straight` runs collectives of units up to that size."""
    if not step.unit or step.member_mask is not None or step.mask not in (None, _FULL_WARP):
        return 0
    return step.unit


class Scheduler:
    """Runs the decoded `steps` of a machine until every lane has exited, or until a batch has taken
    `max_steps` steps (see the module docstring)."""

    def __init__(self, machine: Machine, steps: list[Step], ops: Operands, max_steps: int = DEFAULT_MAX_STEPS,
                 schedule: str = "min-pc", seed: int | None = None, fusion=None):
        self.m = machine
        self.rng = self.check_schedule(schedule, seed)
        # the seed of the delayed CTA, warp or warpgroup (`delayed_lanes`), and which of them (`_DELAYED_UNIT`)
        self.delay = (0 if seed is None else int(seed)) if schedule in _DELAYED_UNIT else None
        self.delay_unit = _DELAYED_UNIT.get(schedule)
        self.steps = steps
        self.fusion = fusion  # fuse.Fusion: blocks of straight-line register instructions run as one step
        self.guards = [guard_reader(ops, s.inst) for s in steps]
        self.forced_epoch = None
        self.executed = 0
        self.counts: dict | None = None  # with counting on: thread and warp instructions executed (`launch(stats=)`)
        self.max_steps = self.check_max_steps(max_steps)

    @staticmethod
    def check_schedule(schedule, seed):
        """The seeded generator for "adversarial", None for "min-pc" and the delayed schedules (whose seed picks the
        CTA, warp or warpgroup, see `delayed_lanes`); ValueError for anything else."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if schedule == "min-pc":
            if seed is not None:
                raise ValueError("seed= replays an adversarial schedule or picks the delayed CTA, warp or warpgroup; "
                                 "the min-pc schedule has no randomness")
            return None
        if schedule in _DELAYED_UNIT:
            return None
        return np.random.default_rng(0 if seed is None else int(seed))

    @staticmethod
    def check_max_steps(max_steps) -> int:
        """`max_steps` as an int; ValueError unless it is a positive integer."""
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        return int(max_steps)

    def delayed_lanes(self) -> np.ndarray | None:
        """For the "delayed" schedule, the lanes of this batch's delayed CTA (the one of linear index `seed`
        modulo the grid's CTAs; none when it is in another batch); for "delayed-warp" ("delayed-warpgroup"), the
        lanes of warp (warpgroup) `seed` modulo the CTA's warps (warpgroups) in every CTA; None for the others."""
        if self.delay is None:
            return None
        m = self.m
        if self.delay_unit is not None:
            units = -(-m.threads // self.delay_unit)
            return (m.tid // self.delay_unit == self.delay % units) & m.cta_valid[m.lane_cta]
        gx, gy, gz = m.grid
        target = self.delay % (gx * gy * gz)
        linear = m.ctaid[:, 0] + gx * (m.ctaid[:, 1] + gy * m.ctaid[:, 2])
        return ((linear == target) & m.cta_valid)[m.lane_cta]

    def run(self) -> None:
        m, steps, guards = self.m, self.steps, self.guards
        end = len(steps)
        big = self.never = np.full(m.lanes, _NEVER)  # (np.where with three arrays: its fast loop, not a scalar's)
        all_lanes = m.lane_ids
        limit = self.executed + self.max_steps
        delayed = self.delayed_lanes()
        if delayed is not None and not any_set(delayed):
            delayed = None
        with np.errstate(all="ignore"):
            while True:
                if self.executed >= limit:
                    raise self.out_of_steps()
                running = m.status == RUN
                if not any_set(running):
                    if self._stalled():
                        return
                    continue
                if delayed is not None:  # the delayed CTA (warp) runs only when no other lane (of its CTA) can
                    others = running & ~delayed
                    if self.delay_unit is None:
                        if any_set(others):
                            running = others
                    elif any_set(others):
                        busy = np.zeros(m.ctas, bool)
                        busy[m.lane_cta[others]] = True
                        running = others | (running & ~busy[m.lane_cta])
                if m.preferred is not None:  # lanes a release woke run first (asynchrony)
                    preferred = running & m.preferred
                    if any_set(preferred):
                        running = preferred
                    elif delayed is None or not any_set(m.preferred & (m.status == RUN)):
                        m.preferred = None  # (kept while the woken lanes are the delayed CTA's or warp's)
                candidates = np.where(running, m.pc, big)
                if self.rng is not None:  # adversarial: the pc of a running lane drawn at random
                    pick = np.flatnonzero(running)
                    pc = int(m.pc[pick[int(self.rng.integers(len(pick)))]])
                else:
                    pc = int(np.minimum.reduce(candidates))  # (ndarray.min's Python wrapper costs as much)
                lanes = np.flatnonzero(candidates == pc)
                if pc >= end:
                    m.status[lanes] = EXITED
                    m.on_exit(np.unique(m.lane_cta[lanes]))
                    continue
                step = steps[pc]
                whole = 0  # the units `lanes` are whole of, for `_straight`
                if step.unit:
                    ready = self._gather_collective(step, pc, lanes)
                    if ready is None:
                        continue
                    if equal_arrays(ready, lanes):  # (none made to wait, none joined: which lanes run is as it was)
                        whole = _whole_units(step)
                    lanes = ready
                woken = m.woken
                ran = 0 if step.control or step.unit else self._block(pc, lanes, limit)
                if ran:
                    m.pc[lanes] += ran
                elif step.control:
                    guard = guards[pc]
                    active = lanes if guard is None else lanes[guard(lanes)]
                    self._executed(active)
                    step.run(lanes, active)
                    if (whole or not step.unit) and self.rng is None and self._run_on(step, lanes, active, woken):
                        self._straight(int(m.pc[lanes[0]]), lanes, candidates, limit, woken, pc, whole)
                    continue
                else:
                    self._run_plain(pc, lanes, len(all_lanes))
                    m.pc[lanes] += 1
                if (whole or not step.unit) and self.rng is None and m.woken == woken:
                    self._straight(pc + max(ran, 1), lanes, candidates, limit, woken, pc, whole)

    def _block(self, pc: int, lanes: np.ndarray, limit: int) -> int:
        """Run the fused block at `pc` (`fuse`) for `lanes`, all the lanes there: the number of instructions it
        covered (their steps counted), or 0 where there is none or it must run unfused (step counts or an
        adversarial schedule asked for, the step budget within it). Unfused, its instructions run one by one
        here, from the first."""
        block = self.fusion.at[pc] if self.fusion is not None else None
        if block is None or self.counts is not None or self.rng is not None or self.executed + block.length > limit:
            return 0
        if not block.run(lanes):
            count = len(self.m.lane_ids)
            at = pc
            try:
                for at in range(pc, pc + block.length):
                    guard = self.guards[at]
                    active = lanes if guard is None else lanes[guard(lanes)]
                    if len(active):
                        self.steps[at].run(ALL if len(active) == count else active)
            except Exception:  # the lanes stop at the instruction that raised, as unfused
                self.m.pc[lanes] += at - pc
                raise
        self.executed += block.length
        return block.length

    def _straight(self, pc: int, lanes: np.ndarray, candidates: np.ndarray, limit: int, woken: int,
                  picked: int, whole: int = 0) -> None:
        """Run on from `pc` the steps the min-pc schedule picks next, without rescanning every lane: `lanes` just
        ran the plain or collective step (or fused block) at `picked`, or a control step after which they stay
        together (`_run_on`); `candidates` are the pcs of the lanes the pick chose among then (the running ones,
        or those of them a release prefers, `Machine.preferred`), `big` elsewhere. As long as no other of those
        lanes is at or before their pc (the *horizon*) and no thread was woken (`m.woken` still `woken`: a release
        that prefers lanes wakes them, so the preferred lanes stay those the pick chose among), the schedule
        picks `lanes` again at the next pc, and only them: plain steps, collectives and branches never park, exit
        or move other threads, nor change which lanes may run (a producer a release woke runs on through its
        refill).

        - A collective (a wgmma, a shuffle) gathers its lanes as the main loop would (`_gather_collective`, on
          `lanes` at its pc: exactly what the main loop's pick would hand it). Where `lanes` are whole units of
          its size or larger (`whole`: every lane of their warps or warpgroups that has not exited, as a collective
          just run gathered them, `_whole_units`), the gather would return `lanes` themselves and is skipped: a
          wgmma chain and the descriptor arithmetic between its wgmmas are one run. Where the gather makes some
          lanes wait, the others run the step and the run stops there, as the main loop's would.
        - A control step (a branch, an mbarrier wait, a barrier) runs as in the main loop; the run goes on where
          the lanes stay together and runnable (a `bra` every lane took or none did; another step after which every
          lane still runs, at one pc: a wait on a completed phase), nothing was woken, and the pc they
          reach lies before the horizon (a loop's back edge, the skip over an `if`). No other lane's status changed
          (every wake counts in `m.woken`), so the lanes the main loop may pick from are the same. A control
          step that is a collective over more than the lanes' whole units (`setmaxnreg`, warpgroup-wide, on a
          warp's run under delayed-warp) stops the run: the main loop gathers its warpgroup. A `bra` (`Step.branch`)
          that every lane takes or none does is not run: the run goes on at its target or after it, and the lanes'
          pcs move at the end with the plain steps' (its `run` moves nothing else, and wakes no lane).

        Stops at the horizon, a wake, lanes that part or block, the end, or the step budget; the main loop goes on
        from there, so the schedule and its results are the same as one full pick per step."""
        m, steps, guards = self.m, self.steps, self.guards
        end = len(steps)
        if pc >= end:
            return
        horizon = min(end, int(np.minimum.reduce(np.where(candidates == picked, self.never, candidates))))
        count, start = len(m.lane_ids), pc
        try:  # the lanes' pcs move at the end (no plain step reads them), before a gather or branch, or a raise
            while pc < horizon and self.executed < limit:
                step = steps[pc]
                if step.control:
                    if step.unit > whole:  # a collective control step (setmaxnreg): the main loop gathers it
                        return
                    guard = guards[pc]
                    active = lanes if guard is None else lanes[guard(lanes)]
                    self._executed(active)
                    if step.branch is not None and not 0 < len(active) < len(lanes):  # (`_run_on` of a `bra`)
                        pc = step.branch if len(active) else pc + 1  # (its `run`, with the pcs' move left to the end)
                        continue
                    m.pc[lanes] += pc - start
                    start = pc
                    step.run(lanes, active)
                    start = pc = int(m.pc[lanes[0]])  # (the step moved the lanes' pcs)
                    if not self._run_on(step, lanes, active, woken):
                        return
                    continue
                ran = 0
                if step.unit > whole:
                    m.pc[lanes] += pc - start
                    start = pc
                    ready = self._gather_collective(step, pc, lanes)
                    if ready is None:
                        return
                    if not equal_arrays(ready, lanes):  # some wait (COLL), or lanes waiting there join
                        self._run_plain(pc, ready, count)
                        m.pc[ready] += 1
                        return
                    whole = _whole_units(step)
                elif not step.unit:
                    ran = self._block(pc, lanes, limit)
                if ran:
                    pc += ran
                    continue
                self._run_plain(pc, lanes, count)
                pc += 1
                if m.woken != woken:
                    return
        finally:
            m.pc[lanes] += pc - start

    def _run_on(self, step: Step, lanes: np.ndarray, active: np.ndarray, woken: int) -> bool:
        """After the control `step` ran for `lanes` (`active`: those its guard let take it), whether the schedule
        picks them again, and only them, where their pc lies before the horizon (`_straight`): nothing was woken,
        and they stay together (a `bra` all or none of them took, which moves no other lane and
        parks none; after any other step, every one of them runs, at one pc). A divergent branch leaves the main
        loop to pick among them."""
        m = self.m
        if m.woken != woken:
            return False
        if step.inst.opcode == "bra":
            return not 0 < len(active) < len(lanes)
        return self._together(lanes, int(m.pc[lanes[0]]))

    def _together(self, lanes: np.ndarray, pc: int) -> bool:
        """Whether every one of `lanes` still runs (none waits, parked or exited) and is at `pc`."""
        m = self.m
        return all_set(m.status[lanes] == RUN) and all_set(m.pc[lanes] == pc)

    def _executed(self, active: np.ndarray) -> None:
        """Count one step, and with `stats=` the thread and warp instructions of `active`, the lanes executing it."""
        self.executed += 1
        if self.counts is not None and len(active):
            warps = self.m.unit_of[facts.WARP_SIZE][active]
            self.counts["thread_instructions"] += len(active)
            self.counts["warp_instructions"] += int(np.count_nonzero(np.diff(warps))) + 1

    def _run_plain(self, pc: int, lanes: np.ndarray, count: int) -> None:
        """Run the (plain or collective) step at `pc` for those of `lanes` its guard lets execute; `count`: the
        machine's lanes. The lanes' pcs stay where they are."""
        guard = self.guards[pc]
        active = lanes if guard is None else lanes[guard(lanes)]
        self._executed(active)
        if len(active):
            step = self.steps[pc]
            if step.member_mask is not None and step.mask != _FULL_WARP:
                self._check_members(step, active)
            step.run(ALL if len(active) == count else active)

    def _check_members(self, step, active: np.ndarray) -> None:
        """A warp collective with a member mask (shfl, vote, match, redux, elect, bar.warp.sync) executed by a
        thread its own mask does not name is undefined by the PTX ISA ("the behavior of shfl.sync is undefined if
        the executing thread is not in the membermask", and so for each): refused, naming the thread and its mask,
        rather than run as if the mask named it."""
        m = self.m
        masks = np.broadcast_to(np.asarray(step.member_mask(active), np.uint32), active.shape)
        outside = ((masks >> m.laneid[active].astype(np.uint32)) & 1) == 0
        if any_set(outside):
            i = int(np.argmax(outside))
            raise m.error(step.inst, f"executed by lane {int(m.laneid[active[i]])}, which its member mask "
                                     f"{int(masks[i]):#010x} does not name (the PTX ISA leaves this undefined; the "
                                     "executor refuses)", int(active[i]))

    def _gather_collective(self, step: Step, pc: int, lanes: np.ndarray):
        """The lanes that execute a collective now: those of the units (warps/warpgroups) touched by `lanes`
        all of whose non-exited member lanes are at this pc. Lanes of incomplete units wait (COLL)."""
        m = self.m
        unit = m.unit_of[step.unit]
        touched = _units_hit(unit, lanes)
        members = touched & (m.status != EXITED)
        at_pc = touched & (m.pc == pc) & ((m.status == RUN) | (m.status == COLL))
        if step.mask is not None and step.unit == 32:
            members &= ((step.mask >> m.laneid) & 1).astype(bool)
        elif step.member_mask is not None and step.unit == 32:
            # a register mask (e.g. from activemask in a divergent branch): the warp's members are those
            # named by the masks of its threads already here
            here = np.flatnonzero(at_pc)
            masks = np.broadcast_to(np.asarray(step.member_mask(here)), here.shape).astype(np.uint64)
            named = np.zeros(int(unit.max()) + 1, np.uint64)
            np.bitwise_or.at(named, unit[here], masks)
            members &= ((named[unit] >> m.laneid.astype(np.uint64)) & np.uint64(1)).astype(bool)
        incomplete = _units_hit(unit, members & ~at_pc)
        m.status[at_pc & incomplete] = COLL
        ready = np.flatnonzero(at_pc & ~incomplete)
        if not len(ready):
            return None
        m.status[ready] = RUN
        return ready

    def _stalled(self) -> bool:
        """No lane can run: True when all exited; wakes what may progress, or raises a deadlock."""
        m = self.m
        if all_set(m.status == EXITED):
            return True
        if any_set(m.status == COLL):
            # an exit may have completed a warp: let the collective lanes try again once
            if self.forced_epoch != ("coll", m.sync_epoch, self.executed):
                self.forced_epoch = ("coll", m.sync_epoch, self.executed)
                m.status[m.status == COLL] = RUN
                return False
        testing = (m.status == PARK) & m.park_test
        if any_set(testing) and self.forced_epoch != ("test", m.sync_epoch):
            self.forced_epoch = ("test", m.sync_epoch)
            m.status[testing] = RUN
            m.park_address[testing] = -1
            m.park_test[testing] = False
            return False
        raise self.deadlock()

    def function_at(self, pc: int) -> str:
        """The name of the function (or entry) whose linked instructions hold `pc`."""
        name, start = self.m.entry.name, 0
        for function in self.m.entry.functions.values():
            if start <= function.start <= pc:
                name, start = function.name, function.start
        return name

    def out_of_steps(self):
        """The error for a batch past its step budget: each warp with a thread that has not exited, grouped by
        where its threads are (function, line, instruction, and what they wait for)."""
        m = self.m
        warps_per_cta = -(-m.threads // facts.WARP_SIZE)
        groups: dict[tuple, list[str]] = {}
        for warp in np.unique(m.unit_of[facts.WARP_SIZE][m.status != EXITED]):
            lanes = np.flatnonzero((m.unit_of[facts.WARP_SIZE] == warp) & (m.status != EXITED))
            for pc in np.unique(m.pc[lanes]):
                at = lanes[m.pc[lanes] == pc]
                status = int(m.status[at[0]])
                c = m.ctaid[m.lane_cta[at[0]]]
                groups.setdefault((int(pc), status), []).append(
                    f"warp {int(warp) % warps_per_cta} of CTA ({c[0]}, {c[1]}, {c[2]})" +
                    ("" if len(at) == facts.WARP_SIZE else f" ({len(at)} threads)"))
        lines = []
        for (pc, status), warps in sorted(groups.items()):
            inst = self.steps[pc].inst if pc < len(self.steps) else None
            where = f"line {inst.line} ({inst.name}) in {self.function_at(pc)}" if inst is not None else "the end"
            shown = ", ".join(warps[:4]) + (f" and {len(warps) - 4} more warp(s)" if len(warps) > 4 else "")
            lines.append(f"  {shown}: {STATUS_NAMES[status]} at {where}")
        return fail(m.source, None, f"the run stopped after {self.max_steps} steps (max_steps; a loop that never "
                                    "ends?), where each warp is:\n" + "\n".join(lines))

    def deadlock(self):
        m = self.m
        groups: dict[tuple, list[int]] = {}
        for lane in np.flatnonzero(m.status != EXITED):
            status = int(m.status[lane])
            key = (status, int(m.pc[lane]), int(m.bar_waiting[lane]), int(m.park_address[lane]))
            groups.setdefault(key, []).append(int(lane))
        lines = []
        for (status, pc, bar, address), lanes in sorted(groups.items(), key=lambda kv: kv[0][1]):
            inst = self.steps[pc].inst if pc < len(self.steps) else None
            what = STATUS_NAMES[status]
            if status == BAR:
                what = f"wait at named barrier {bar}"
            elif status == REGS:
                what = describe_wait(m, lanes[0])
            elif status == PARK and pc < len(self.steps) and self.steps[pc].inst.opcode in ("ld", "ldu"):
                what = ("sleep in a spin wait that nothing can end (a semaphore wait, ld.acquire, whose count no "
                        "running CTA will reach: deadlock in this CTA order)")  # `memory._spin_wait`
            elif status == PARK and pc > 0 and self.steps[pc - 1].inst.opcode == "nanosleep":
                what = ("sleep in a spin wait that nothing can end (a nanosleep poll whose condition no running thread "
                        "changes: a flag or a semaphore wait, whose count no running CTA will reach, or an mbarrier "
                        "test_wait whose phase never completes: deadlock in this CTA order)")
            elif status == PARK and pc > 0 and self.steps[pc - 1].inst.opcode == "atom":
                what = "spin on an atom.cas that fails again with nothing left to run (a lock nobody releases)"
                inst = self.steps[pc - 1].inst
            elif status == PARK and address >= 0:
                what = f"wait on the mbarrier at shared address {address:#x}" + \
                    m.tracker.describe_barrier((int(m.lane_cta[lanes[0]]), address))
            where = f"line {inst.line} ({inst.name})" if inst is not None else "the end"
            lines.append(f"  {len(lanes)} thread(s), first {m.describe_lane(lanes[0])}: {what} at {where}")
        return PtxDeadlockError(f"{m.source}: error: deadlock: no thread can make progress\n" + "\n".join(lines))
