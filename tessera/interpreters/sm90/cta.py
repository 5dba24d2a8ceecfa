"""The state of one simulated CTA: its threads, who has synchronised with whom, its named barriers, and the
units that own shared memory, mbarriers, TMA copies and wgmma groups.

Synchronisation is recorded as happens-before (`happens_before.HappensBefore`, `hb`): `hb.ordered[w, r]` is the
latest time (a counter that every memory event advances) such that thread w's accesses before it happen before
thread r's present point, through named barriers (a `bar_sync` that completes orders what every participant did
before it arrived before every waiting thread; a `bar_arrive` thread participates without waiting, and what it
does after arriving is not ordered) and mbarrier phases (arrive, phase completion, successful wait),
transitively. The checks of shared memory use it: a generic read of another thread's store, a write after another
thread's access, a wgmma read of another warp's fenced store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import KernelHazardError, describe_op
from tessera.interpreters.sm90.mbarrier import MBarriers
from tessera.interpreters.sm90.cp_async import CpAsyncUnit
from tessera.interpreters.sm90.happens_before import HappensBefore
from tessera.interpreters.sm90.reductions import BulkUnit
from tessera.interpreters.sm90.shared_memory import SharedMemory
from tessera.interpreters.sm90.strands import HazardUnwind, Scheduler, Strand
from tessera.interpreters.sm90.tma import TmaUnit
from tessera.interpreters.sm90.wgmma import WgmmaUnit
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts


@dataclass
class NamedBarrier:
    """One of the 16 named barriers between two completions: its thread count, who has arrived, who waits."""

    threads: int = 0
    arrived: np.ndarray | None = None
    waiting: np.ndarray | None = None
    generation: int = 0
    first_op: Operation | None = None
    """The first bar_sync/bar_arrive of this phase (for messages)."""
    released: tuple | None = None
    """The join of what each arrival released when it arrived (`HappensBefore.release`): a bar_arrive thread
    runs on, and what it does after arriving is not ordered before the waiters [memory_model.BARRIER_ORDERING]."""


class NamesThreads:
    """The clock and the thread names of a CTA's messages, for a class with `clock` and `cta_id`: the simulated
    CTA (`CtaState`) and a batch follower's view of itself at its global stores (`follower_views.FollowerView`)."""

    clock: int
    cta_id: tuple[int, int, int]

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def thread_name(self, thread: int) -> str:
        thread = int(thread)
        return (f"thread {thread} (warp {thread // facts.WARP_SIZE}, lane {thread % facts.WARP_SIZE}) "
                f"of CTA {self.cta_id}")

    def where(self, threads) -> str:
        """'thread N (...) of CTA (x, y, z)' for an index, or for the first thread of a [T] mask."""
        if isinstance(threads, np.ndarray) and threads.dtype == np.bool_:
            threads = int(np.argmax(threads))
        return self.thread_name(int(threads))

    def fail(self, op: Operation, message: str, threads=None) -> NoReturn:
        """Raise a KernelHazardError naming the op (its first line) and a thread (an index or a [T] mask)."""
        where = "" if threads is None else f" in {self.where(threads)}"
        raise HazardUnwind(KernelHazardError(f"{describe_op(op)}: {message}{where}"))


@dataclass
class CtaState(NamesThreads):
    """One CTA being simulated: `threads` threads (1-D), `smem_bytes` of dynamic shared memory, its id and the
    grid, the scheduler of its strands, and the units (`smem`, `mbarriers`, `tma`, `wgmma`)."""

    threads: int
    smem_bytes: int
    cta_id: tuple[int, int, int]
    grid: tuple[int, int, int]
    scheduler: Scheduler
    clock: int = 0
    races: bool = True
    """Check writes against earlier accesses by happens-before (`happens_before`); the edges are kept either way."""
    strict_proxy: bool = False
    """Ask a fence_proxy_async between cp.async bytes an mbarrier completed and a wgmma reading them, as the PTX
    ISA's letter does, instead of accepting the completion as NVIDIA's kernels rely on [memory_model.CP_ASYNC_PROXY]."""
    tid: np.ndarray = field(init=False)
    named: list[NamedBarrier] = field(init=False)
    register_budget: dict[int, int] = field(default_factory=dict)
    """Registers per thread of each warpgroup that has executed a `setmaxnreg` (the others hold `entry_registers`)."""
    register_pool: int = 0
    """Registers `setmaxnreg.dec` gave back to the CTA and no `.inc` took yet (`register_pool`)."""
    entry_registers: int | None = None
    """What ptxas gives every thread at entry (`register_pool.registers_at_entry`), found at the first setmaxnreg."""
    cluster: object | None = None
    """The `tessera.interpreters.sm90.cluster.Cluster` this CTA runs in (None: a cluster of one)."""
    rank: int = 0
    """%cluster_ctarank."""
    traffic: dict[str, int] = field(default_factory=dict)
    """Bytes this CTA's TMA copies read from global memory, by tensor map (a multicast counts once, for its
    issuer)."""
    pool: object | None = None
    """The launch's `record_pool.RecordPool` the units take their per-byte records from (None: allocated)."""
    followers: object | None = None
    """The `followers.Followers` computed alongside this CTA (None: it runs alone)."""

    def __post_init__(self) -> None:
        self.tid = np.arange(self.threads, dtype=np.int32)
        self._converged: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}
        """Per group size, the last active mask `converged_units` accepted and its groups."""
        self.named = [NamedBarrier() for _ in range(facts.NAMED_BARRIERS)]
        # The units refer back to this object for errors, the clock and the active threads.
        self.smem = SharedMemory(self, self.smem_bytes)
        self.mbarriers = MBarriers(self)
        self.tma = TmaUnit(self)
        self.wgmma = WgmmaUnit(self)
        self.bulk = BulkUnit(self)
        self.cp_async = CpAsyncUnit(self)
        self.hb = HappensBefore(self, self.races)

    # region threads and errors
    @property
    def warps(self) -> int:
        return self.threads // facts.WARP_SIZE

    @property
    def warpgroups(self) -> int:
        return self.threads // facts.WARPGROUP_SIZE

    @property
    def strand(self) -> Strand:
        strand = self.scheduler.current
        assert strand is not None
        return strand

    @property
    def active(self) -> np.ndarray:
        """The running strand's mask (`Strand.active`, read in one frame: some 1,700 reads a launch)."""
        return self.scheduler.current.masks[-1]


    def describe(self, op: Operation, message: str, threads=None) -> tuple[str, str]:
        """(the op's first line, the message with the thread): what a blocked strand waits for."""
        where = "" if threads is None else f" in {self.where(threads)}"
        return describe_op(op), f"{message}{where}"

    def converged_units(self, op: Operation, unit: int, what: str) -> list[int]:
        """The indices of the `unit`-thread groups (warps or warpgroups) with active threads, refusing a group
        that is only partly active: `what` executes per warp or warpgroup (`.sync.aligned`)."""
        active = self.active
        cached = self._converged.get(unit)
        if cached is not None and cached[0] is active:  # masks are never changed in place (`strands`)
            return list(cached[1])
        if self.threads % unit:
            self.fail(op, f"{what} needs whole groups of {unit} threads, but the CTA has {self.threads} threads")
        groups = active.reshape(-1, unit)
        partial = groups.any(axis=1) & ~groups.all(axis=1)
        if np.count_nonzero(partial):
            g = int(np.argmax(partial))
            inactive = g * unit + int(np.argmax(~groups[g]))
            kind = "warp" if unit == facts.WARP_SIZE else "warpgroup"
            self.fail(op, f"divergent {what}: {kind} {g} executes it with only some of its threads active "
                          f"(thread {inactive} is not)", g * unit + int(np.argmax(groups[g])))
        units = [int(g) for g in np.nonzero(groups.any(axis=1))[0]]
        self._converged[unit] = (active, tuple(units))
        return units

    def check_synchronisation_drained(self) -> None:
        """At the end of the kernel (with `races`): no named barrier is left with arrivals that no phase
        completed (a bar_sync or bar_arrive of its other side is missing), every filled ring slot was
        released (`MBarriers.check_released_at_end`), and every staging slot drained and released
        (`MBarriers.check_drained_at_end`)."""
        if not self.races:
            return
        for barrier, state in enumerate(self.named):
            if state.arrived is not None and any_set(state.arrived):
                first = int(np.argmax(state.arrived))
                op = state.first_op
                message = (f"the kernel ends with named barrier {barrier} incomplete: {int(state.arrived.sum())} of "
                           f"its {state.threads} threads arrived (a bar_sync or bar_arrive of the other side is "
                           "missing)")
                if op is None:
                    raise KernelHazardError(f"{message} in {self.where(first)}")
                self.fail(op, message, first)
        self.mbarriers.check_released_at_end()
        self.mbarriers.check_drained_at_end()

    # endregion
    # region synchronisation
    def synchronise(self, participants: np.ndarray, waiters: np.ndarray,
                    released: tuple | None = None) -> None:
        """A barrier completed: `waiters` are now ordered after everything `participants` did before it (before
        each arrived: `released`, the join of their releases at their arrivals, when given), and have observed
        every mbarrier phase completion the participants had observed then (`HappensBefore.Message`)."""
        if released is None:
            self.hb.barrier(participants, waiters)
        elif any_set(waiters):
            self.hb.acquire(waiters, released)

    def bar_arrive(self, op: Operation, barrier: int, count: int, wait: bool) -> None:
        """bar.sync (wait=True) or bar.arrive at named barrier `barrier` expecting `count` threads."""
        try:
            facts.check_named_barrier(barrier, count, self.threads, arrive=not wait)
        except ValueError as error:
            self.fail(op, str(error), self.active)
        self.converged_units(op, facts.WARP_SIZE, "barrier")
        active = self.active
        state = self.named[barrier]
        if state.arrived is None:
            state.threads = count
            state.arrived, state.waiting = np.zeros(self.threads, bool), np.zeros(self.threads, bool)
            state.first_op = op
        elif state.threads != count:
            self.fail(op, f"named barrier {barrier} expects {state.threads} threads from earlier arrivals, "
                          f"this one says {count}", active)
        again = active & state.arrived
        if any_set(again):
            self.fail(op, f"arrives at named barrier {barrier} twice before it completes", again)
        state.arrived |= active
        if wait:
            state.waiting |= active
        arrived = int(state.arrived.sum())
        if arrived > count:
            self.fail(op, f"{arrived} threads arrive at named barrier {barrier}, which expects {count}", active)
        # each arrival releases at its own point: a bar_arrive thread's later accesses are not ordered before
        # the waiters, whenever the barrier completes [memory_model.BARRIER_ORDERING]
        state.released = self.hb.join(state.released, self.hb.release(active))
        if arrived == count:
            self.synchronise(state.arrived, state.waiting, state.released)
            self.named[barrier] = NamedBarrier(generation=state.generation + 1)
            return
        if wait:
            generation = state.generation
            self.scheduler.block(
                lambda: self.named[barrier].generation != generation,
                lambda: self.describe(op, f"waits at named barrier {barrier} for {count} threads, but only "
                                          f"{int(state.arrived.sum())} arrive", active),
            )

    # endregion
