"""The mbarriers of a simulated CTA: one `facts.MBarrierState` per initialised barrier, and what each thread has
seen of it.

A barrier *instance* lives from `mbarrier_init` to `mbarrier_inval` at an 8-byte shared address; TMA-written
bytes are tagged with the instance and the phase their copy completed in. `observed[instance, t]` counts the
phases thread t knows to be complete: a successful `mbarrier_try_wait_parity` sets it to the barrier's current
phase, and every happens-before edge passes on what the releasing threads had observed (a named barrier, an
mbarrier phase, a cluster barrier: `HappensBefore.Message`), so a thread that waits phase p of barrier X and
then arrives on barrier Y lets Y's waiters observe X's phase p. A thread may read TMA data of phase p only once
`observed > p`.

Rules enforced, each reported with the op and the thread: init at a free, 8-byte-aligned address inside shared
memory, not over a live barrier; no use before init, after inval, or by a thread the init is not ordered before
(a bar_sync after the init); the state machine's own limits (`facts.MBarrierState`: arrival count, tx-count
range); no more arrivals by one warp of an op than the phase has pending (the warp's extra ones would complete
the next phase in the same instruction), while a later warp of the op counts towards the next phase, as the PTX
ISA counts arrive-ons (`MBarriers.arrive`); no inval while TMA copies still complete on the barrier. A `try_wait` that fails in every active thread blocks the
strand until the barrier changes; if nothing can change it, the scheduler reports the deadlock with the
barrier's address, the parity waited for and the phase it is in.
"""

from __future__ import annotations

from dataclasses import dataclass
import re
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView

RING_FULL, RING_EMPTY = "_full", "_empty"
"""The suffixes of the shared buffers holding a ring's full and empty mbarriers, one per slot (the names
passes/convert_tile_to_sm90/kernel.py gives them: `MBarriers.ring_partner`)."""
COPY_GROUP_BARRIER = re.compile(r"group\d+_bar")
"""The names of the shared buffers holding a copy group's mbarrier (`group{k}_bar`, passes/convert_tile_to_sm90/
kernel.py): a group's tiles are refilled after a CTA barrier, not after a slot's release, so its fills pair with no
release barrier (`MBarriers.ring_partner`)."""
NO_PARTNER = -1
"""`MBarriers.ring_partner` of a barrier known to have no release barrier (a copy group's)."""


@dataclass(eq=False)
class MBarrier:
    index: int
    address: int
    state: facts.MBarrierState
    init_thread: int
    init_time: int
    live: bool = True
    init_fenced: int = -1
    """The time of the init thread's first fence_mbarrier_init after the init (-1: none yet; see `fence_init`)."""


class MBarriers:
    def __init__(self, cta: CtaView):
        self.cta = cta
        self.instances: list[MBarrier] = []
        self.live: dict[int, MBarrier] = {}
        self.observed = np.zeros((0, cta.threads), np.int64)
        # last_waited[t]: the instance thread t last waited on successfully (-1: none); refills[F]: the release
        # barriers of the slot a TMA completing on F filled (F's "empty" partners: `note_refill`,
        # `check_released_at_end`)
        self.last_waited = np.full(cta.threads, -1, np.int64)
        self.refills: dict[int, set[int]] = {}
        self.partners: dict[int, int | None] = {}
        self.init_ops: dict[int, Operation] = {}
        # staging slots (`check_drained_at_end`): published[F] the barriers threads last waited on before a plain
        # arrive on F (F's "empty" partners, as `refills`), drained[F] the phases of F after which a bulk reduction
        # was issued, tx the barriers that count transaction bytes (a copy's, not a staging slot's)
        self.published: dict[int, set[int]] = {}
        self.drained: dict[int, set[int]] = {}
        self.tx: set[int] = set()

    def _locate(self, address: int) -> str:
        return self.cta.smem.locate(address)

    def _check_address(self, op: Operation, thread: int, address: int) -> None:
        smem = self.cta.smem
        if not 0 <= address <= smem.size - facts.MBARRIER_BYTES:
            self.cta.fail(op, f"mbarrier address {address:#x} is outside the CTA's {smem.size} bytes of shared memory",
                          thread)
        if address % facts.MBARRIER_BYTES:
            self.cta.fail(op, f"mbarrier at {self._locate(address)} is not {facts.MBARRIER_BYTES}-byte aligned", thread)

    def get(self, op: Operation, thread: int, address: int) -> MBarrier:
        """The live barrier at `address`, as seen by `thread`."""
        self._check_address(op, thread, address)
        barrier = self.live.get(address)
        if barrier is None:
            was = any(b.address == address for b in self.instances)
            self.cta.fail(op, f"uses the mbarrier at {self._locate(address)} "
                              f"{'after mbarrier_inval' if was else 'before mbarrier_init'}", thread)
        if thread != barrier.init_thread and self.cta.hb.ordered[barrier.init_thread, thread] <= barrier.init_time:
            self.cta.fail(op, f"uses the mbarrier at {self._locate(address)}, which thread {barrier.init_thread} "
                              "initialised with no bar_sync since (race: the init is not ordered before this use: "
                              "missing bar_sync after mbarrier_init)", thread)
        return barrier

    def get_all(self, op: Operation, threads: np.ndarray, addresses: np.ndarray) -> list[MBarrier]:
        """`get` for each of `threads` (at `addresses[thread]`): one lookup per distinct address, the init's
        visibility checked for all threads at once."""
        return self._get_all(op, threads, addresses)[0]

    def _get_all(self, op: Operation, threads: np.ndarray, addresses: np.ndarray) -> tuple[list, MBarrier | None]:
        """(`get_all`, the one barrier every thread of two or more addresses, else None): a caller that knows
        them to be one barrier reads its fields once instead of once per thread."""
        mine = addresses[threads]
        if len(threads) < 2 or not all_set(mine == mine[0]):
            return [self.get(op, int(t), int(addresses[t])) for t in threads], None
        barrier = self.get(op, int(threads[0]), int(mine[0]))
        init = barrier.init_thread
        unseen = (threads != init) & (self.cta.hb.ordered[init, threads] <= barrier.init_time)
        if any_set(unseen):
            self.get(op, int(threads[np.argmax(unseen)]), int(mine[0]))  # reports it
        return [barrier] * len(threads), barrier

    def _active_threads(self) -> np.ndarray:
        return np.nonzero(self.cta.active)[0]

    # region init, arrive, inval
    def init(self, op: Operation, addresses: np.ndarray, count: int) -> None:
        for thread in self._active_threads():
            address = int(addresses[thread])
            self._check_address(op, thread, address)
            if address in self.live:
                self.cta.fail(op, f"initialises the mbarrier at {self._locate(address)} again while it is live "
                                  "(mbarrier_inval it first)", thread)
            state = facts.MBarrierState()
            try:
                state.init(count)
            except ValueError as error:
                self.cta.fail(op, str(error), thread)
            span = slice(address, address + facts.MBARRIER_BYTES)
            self.cta.smem.check_writable(op, np.arange(span.start, span.stop),
                                         np.full(facts.MBARRIER_BYTES, thread), "mbarrier_init")
            barrier = MBarrier(len(self.instances), address, state, int(thread), self.cta.tick())
            self.init_ops[barrier.index] = op
            self.instances.append(barrier)
            self.live[address] = barrier
            if self.cta.cluster is not None:
                self.cta.cluster.init_time[(self.cta.rank, barrier.index)] = self.cta.cluster.tick()
            self.cta.smem.is_mbarrier[span] = True
            self.observed = np.concatenate([self.observed, np.zeros((1, self.cta.threads), np.int64)])

    def arrive(self, op: Operation, addresses: np.ndarray, tx_bytes: int | None) -> None:
        """mbarrier.arrive (tx_bytes None) or mbarrier.arrive.expect_tx by every active thread, warp by warp and in
        thread order within a warp. Each arrival is a release (`happens_before`) into the phase it counts towards.

        The PTX ISA counts each thread's arrive-on [P#...-mbarrier-arrive-on]: it decrements the pending count, and
        the phase completes when that reaches zero, the pending count then reinitialised to the expected one
        [P#...-mbarrier-phase-completion]. An op of several warps is one instruction per warp: a later warp's
        arrivals past a phase its earlier warps completed count towards the next phase, as the PTX executor
        counts them. Within one warp, an arrival after the warp's own earlier arrivals completed the phase is
        refused (the instruction would complete two phases at once, and whether a waiter sees the first depends
        on when it polls: `tessera.interpreters.ptx.mbarrier`, which refuses it by the same name)."""
        threads = self._active_threads()
        if tx_bytes is None and self._arrive_together(op, threads, addresses):
            return
        if tx_bytes is not None:
            self.tx.update(self.get(op, int(t), int(addresses[t])).index for t in threads)
        completed = False
        warps = threads // facts.WARP_SIZE
        for warp in np.unique(warps).tolist():
            if self._arrive_warp(op, threads[warps == warp], addresses, tx_bytes):
                completed = True
        if completed and (tx_bytes is None or self.cta.scheduler.adversarial):
            # A completed phase may release another strand (a producer waiting for a slot to be emptied): let
            # it run now, at the earliest moment the hardware could, so that a release that comes before
            # the releasing threads' last read (a refill overwriting data still being read) shows.
            self.cta.scheduler.hand_over()

    def _arrive_warp(self, op: Operation, threads: np.ndarray, addresses: np.ndarray, tx_bytes: int | None) -> bool:
        """The arrivals of one warp's active `threads` (`arrive`), in thread order; whether one completed a phase."""
        completed: dict[int, int] = {}  # barrier -> the phase this warp's arrivals completed
        arrivals: dict[int, list[int]] = {}
        for thread in threads.tolist():
            barrier = self.get(op, thread, int(addresses[thread]))
            arrivals.setdefault(barrier.index, []).append(thread)
            if barrier.index in completed:
                self.cta.fail(op, f"arrives on the mbarrier at {self._locate(barrier.address)} after the earlier "
                                  f"arrivals of its warp in this op completed its phase {completed[barrier.index]}: "
                                  f"more threads arrive than the {barrier.state.expected} the barrier expects", thread)
            phase = barrier.state.phase
            try:
                if tx_bytes is None:
                    barrier.state.arrive()
                else:
                    barrier.state.arrive_expect_tx(tx_bytes)
            except ValueError as error:
                self.cta.fail(op, f"{error} (mbarrier at {self._locate(barrier.address)}, phase {phase})", thread)
            if barrier.state.phase != phase:
                completed[barrier.index] = phase
        for index, arrived in arrivals.items():
            if tx_bytes is None:
                self._note_publish(index, np.asarray(arrived))
            self.cta.hb.arrive(index, np.asarray(arrived))
            if index in completed:
                self.cta.hb.phase_completed(index)
        return bool(completed)

    def _arrive_together(self, op: Operation, threads: np.ndarray, addresses: np.ndarray) -> bool:
        """The common case of `arrive` at once: every active thread arrives on one barrier whose phase has room
        for all of them. False (nothing done) otherwise: the thread-by-thread path reports what is wrong."""
        if not len(threads):
            return True
        mine = addresses[threads]
        if not all_set(mine == mine[0]):
            return False
        barrier = self.get_all(op, threads, addresses)[0]
        if len(threads) > barrier.state.pending:
            return False
        phase = barrier.state.phase
        barrier.state.arrive(len(threads))
        self._note_publish(barrier.index, threads)
        self.cta.hb.arrive(barrier.index, threads)
        if barrier.state.phase != phase:
            self.cta.hb.phase_completed(barrier.index)
            self.cta.scheduler.hand_over()
        return True

    def _note_publish(self, index: int, threads: np.ndarray) -> None:
        """A plain arrive of `threads` on barrier `index`: the barriers they waited on last are its partners, if
        it turns out to publish a staging slot (`check_drained_at_end`)."""
        waited = self.last_waited[threads]
        first = int(waited[0])
        partners = {first} if all_set(waited == first) else set(np.unique(waited).tolist())
        partners.discard(-1)
        partners.discard(index)
        if partners:
            self.published.setdefault(index, set()).update(partners)

    def note_drain(self, thread: int) -> None:
        """`thread` issues a bulk reduction (a drain of a staging slot): the barrier it waited on last is the slot's
        full barrier, and the phase it observed there is drained."""
        full = int(self.last_waited[thread])
        if full >= 0:
            self.drained.setdefault(full, set()).add(int(self.observed[full, thread]))

    def complete_tx(self, op: Operation, thread: int, barrier: MBarrier, nbytes: int) -> None:
        self.tx.add(barrier.index)
        phase = barrier.state.phase
        try:
            barrier.state.complete_tx(nbytes)
        except ValueError as error:
            self.cta.fail(op, f"{error} (mbarrier at {self._locate(barrier.address)}, phase {barrier.state.phase})",
                          thread)
        if barrier.state.phase != phase:
            self.cta.hb.phase_completed(barrier.index)

    def fence_init(self, threads: np.ndarray) -> None:
        """fence_mbarrier_init by the threads of the [T] mask: a release of their earlier inits at cluster scope
        (`memory_model.MBARRIER_INIT_FENCE`). Inside the CTA the bar_sync after the inits orders them (`get`
        checks it), and a Target IR `cluster_arrive` is `.release`, which releases them to the cluster's other
        CTAs too; so the fence orders nothing the simulator must still check, and is recorded only by time."""
        now = self.cta.tick()
        for barrier in self.live.values():
            if threads[barrier.init_thread] and barrier.init_fenced < 0:
                barrier.init_fenced = now

    def inval(self, op: Operation, addresses: np.ndarray) -> None:
        for thread in self._active_threads():
            barrier = self.get(op, thread, int(addresses[thread]))
            if self.cta.tma.in_flight_on(barrier):
                self.cta.fail(op, f"invalidates the mbarrier at {self._locate(barrier.address)} while TMA copies "
                                  "still complete on it", thread)
            barrier.live = False
            del self.live[barrier.address]
            self.cta.smem.is_mbarrier[barrier.address : barrier.address + facts.MBARRIER_BYTES] = False

    # endregion
    # region waiting
    def try_wait_parity(self, op: Operation, addresses: np.ndarray, parity: np.ndarray) -> np.ndarray:
        """mbarrier.try_wait.parity in every active thread: True where the phase of that parity has completed.
        In-flight TMA copies on the barriers waited on land first. If no active thread succeeds, the strand
        blocks until one of those barriers changes (or reports the deadlock)."""
        threads = self._active_threads()
        while True:
            barriers, one = self._get_all(op, threads, addresses)  # `one`: every thread's (the usual)
            bad = (parity[threads] != 0) & (parity[threads] != 1)
            if np.count_nonzero(bad):
                t = threads[np.argmax(bad)]
                self.cta.fail(op, f"phase parity must be 0 or 1, got {int(parity[t])}", t)
            for barrier in ((one,) if one is not None else {b.index: b for b in barriers}.values()):
                self.cta.tma.land_all(barrier)
            phases = (np.full(len(threads), one.state.phase, np.int64) if one is not None
                      else np.array([b.state.phase for b in barriers], np.int64))
            done = parity[threads] != (phases & 1)
            if np.count_nonzero(done):
                break
            waited = {b.index: (b, b.state.phase) for b in barriers}
            tma = self.cta.tma
            self.cta.scheduler.block(
                lambda: any(b.state.phase != p or not b.live or tma.in_flight_on(b) for b, p in waited.values()),
                lambda: self._describe_stuck(op, barriers[0], int(parity[threads[0]]), int(threads[0])),
            )
        result = np.zeros(self.cta.threads, bool)
        result[threads[done]] = True
        seen = threads[done]
        if one is not None:  # one barrier: its row of `observed`, once (the threads are distinct)
            indices = np.full(len(seen), one.index, np.int64)
            observed = self.observed[one.index]
            observed[seen] = np.maximum(observed[seen], one.state.phase)
            if len(seen):
                self.cta.hb.waited(one.index, seen)
        else:
            indices = np.array([b.index for b in barriers], np.int64)[done]
            np.maximum.at(self.observed, (indices, seen), phases[done])
            for index in np.unique(indices).tolist():
                self.cta.hb.waited(index, seen[indices == index])
        self.last_waited[seen] = indices
        if self.cta.cluster is not None:
            for index in np.unique(indices):
                self.cta.cluster.observe(self.cta, int(index), seen[indices == index])
        return result

    def _describe_stuck(self, op: Operation, barrier: MBarrier, parity: int, thread: int) -> tuple[str, str]:
        s = barrier.state
        short = ""
        if s.pending == 0 and s.tx_count > 0:
            short = f": expect_tx announced {s.tx_count} bytes more than the copies delivered"
        elif s.pending == 0 and s.tx_count < 0:
            short = f": the copies delivered {-s.tx_count} bytes more than expect_tx announced"
        return self.cta.describe(
            op, f"every active thread spins on the mbarrier at {self._locate(barrier.address)} waiting for "
                f"parity {parity}, but the barrier is in phase {s.phase} (parity {s.phase & 1}) with {s.pending} of "
                f"{s.expected} arrivals pending and tx-count {s.tx_count}, and no in-flight copy or other thread "
                f"can complete the phase{short}", thread)

    def note_refill(self, thread: int, barrier: MBarrier) -> None:
        """A TMA copy completing on `barrier` is issued by `thread`: the slot's release barrier is the one the
        kernel's structure pairs with `barrier` (`ring_partner`); in a kernel that does not name its rings so
        (hand-written Target IR), the barrier that thread waited on last (if another)."""
        if barrier.index not in self.partners:
            self.partners[barrier.index] = self.ring_partner(barrier)
        empty = self.partners[barrier.index]
        if empty is None:
            empty = int(self.last_waited[thread])
        if empty >= 0 and empty != barrier.index:
            self.refills.setdefault(barrier.index, set()).add(empty)

    def ring_partner(self, barrier: MBarrier) -> int | None:
        """The instance of the release ("empty") barrier of the ring slot whose "full" barrier is `barrier`, from
        the shared buffers that own them, `NO_PARTNER` for a copy group's barrier, or None where they do not
        pair. convert-tile-to-sm90 gives each ring (and a transposed ring's staging ring) an array of full
        barriers, one per slot, in the shared buffer `RING + "_full"` and the slots' empty barriers in
        `RING + "_empty"`, slot s at byte 8 s of each: the slot is the one at the same offset. A producer's last
        wait is not that: where a wait is missing (the first fill of a slot needs none) it is another ring's. Nor
        is it a copy group's partner (`COPY_GROUP_BARRIER`): thread 0 waits on one group's barrier and then issues
        the next group's copies, which no release orders (a single-stage backward with a GQA group of four heads
        filled group 2 five times after waiting on group 1, completed three times: a release reported missing)."""
        buffer = self.cta.smem.buffer_at(barrier.address)
        if buffer is not None and COPY_GROUP_BARRIER.fullmatch(buffer.name):
            return NO_PARTNER
        if buffer is None or not buffer.name.endswith(RING_FULL):
            return None
        name = buffer.name[: -len(RING_FULL)] + RING_EMPTY
        for empty in self.cta.smem.buffers.values():
            if empty.name == name and empty.size == buffer.size:
                partner = self.live.get(empty.offset + barrier.address - buffer.offset)
                return None if partner is None else partner.index
        return None

    def check_released_at_end(self) -> None:
        """At the end of the kernel every fill of a ring slot has been released once: the release barrier of each
        slot a TMA filled (`note_refill`) completed as many phases as the slot's full barrier, with no arrivals
        into a further phase. A release missing leaves the producer's next refill of that slot (on a longer
        sequence, or in a persistent kernel) waiting forever; an extra one lets it refill unread data."""
        for full, empties in self.refills.items():
            filled = self.instances[full]
            for empty in empties:
                released = self.instances[empty]
                if not (filled.live and released.live):
                    continue
                s = released.state
                if s.phase == filled.state.phase and s.pending == s.expected:
                    continue
                what = ("a consumer's release of the slot is missing" if s.phase < filled.state.phase
                        or s.pending != s.expected else "the slot was released more often than it was filled "
                        "(an extra arrival lets the producer refill it before its consumers read it)")
                self.cta.fail(self._init_op(released), f"the kernel ends with the mbarrier at "
                              f"{self._locate(released.address)} released {s.phase} times (and {s.expected - s.pending} "
                              f"of {s.expected} arrivals into the next phase) while the slot it frees was filled "
                              f"{filled.state.phase} times through the mbarrier at {self._locate(filled.address)}: "
                              f"{what}", released.init_thread)

    def check_drained_at_end(self) -> None:
        """At the end of the kernel every staging slot (shared bytes that threads store and publish with a plain
        arrive on a full barrier F, and that a thread drains with a bulk reduction after waiting on F: the
        backward's dQ staging, `reduction_slots`) was drained once per fill and released once per drain: F has
        no arrivals into an unfinished phase (stores published to no one), every completed phase of F was
        drained (a bulk reduction issued after observing it), and each barrier the publishing threads waited on
        before arriving on F (the slot's empty barrier) completed as many phases as F. A fill left undrained is
        data that never reaches global memory; a release missing leaves the next fill of the slot (on a longer
        sequence) waiting forever; an extra one lets the slot be refilled before its reduction read it."""
        for full, phases in self.drained.items():
            filled = self.instances[full]
            if full in self.tx or not filled.live:
                continue
            s = filled.state
            where = self._locate(filled.address)
            if s.pending != s.expected:
                self.cta.fail(self._init_op(filled), f"the kernel ends with {s.expected - s.pending} of {s.expected} "
                              f"arrivals on the staging slot's full barrier at {where} in phase {s.phase}: a fill "
                              "published to no one (its drain by a bulk reduction never comes)", filled.init_thread)
            if len(phases) != s.phase:
                self.cta.fail(self._init_op(filled), f"the kernel ends with the staging slot behind the mbarrier at "
                              f"{where} filled {s.phase} times and drained after {len(phases)} of them: a fill "
                              "left in shared memory (a bulk reduction after waiting for each phase is missing)",
                              filled.init_thread)
            for empty in sorted(self.published.get(full, ())):
                released = self.instances[empty]
                if empty in self.tx or empty in self.drained or not released.live:
                    continue
                e = released.state
                if e.phase == s.phase and e.pending == e.expected:
                    continue
                what = ("a release of the slot after its drain is missing" if e.phase < s.phase
                        or e.pending != e.expected else "the slot was released more often than it was drained "
                        "(an extra arrival lets the slot be refilled before its reduction read it)")
                self.cta.fail(self._init_op(released), f"the kernel ends with the mbarrier at "
                              f"{self._locate(released.address)} released {e.phase} times (and "
                              f"{e.expected - e.pending} of {e.expected} arrivals into the next phase) while the "
                              "staging slot it frees was "
                              f"drained {len(phases)} times through the mbarrier at {where}: {what}",
                              released.init_thread)

    def _init_op(self, barrier: MBarrier) -> Operation:
        return self.init_ops.get(barrier.index)

    # endregion
