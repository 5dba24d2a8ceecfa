"""Asynchrony in the PTX executor: TMA and bulk copies, wgmma and cp.async complete late, and the kernel is
told when it looks too early (`PtxHazardError`, naming the instruction, its line and the thread).

The executor computes every asynchronous result when the instruction issues, which is one legal timing; a
kernel that forgot a wait would still compute the right answer. This module keeps the *other* legal timings
in view, as the CTA simulator for Target IR does (tessera/interpreters/sm90/), by tagging what is not yet
complete and checking every access against the tags:

- Shared memory bytes carry a state (`PLAIN`, `FLIGHT`, `LANDED`). A TMA or bulk load
  (`cp.async.bulk{.tensor}...mbarrier::complete_tx::bytes`) is staged at issue: its bytes are `FLIGHT`
  and its data and transaction bytes wait. It lands at the latest legal point: when a thread waits on its
  mbarrier (`try_wait`/`test_wait`) once every arrival of the phase is in, in issue order, each copy's
  complete-tx counting on the barrier; its bytes become `LANDED`, tagged with the barrier and the phase
  they count towards. A generic read (ld/ldmatrix/...) of a `FLIGHT` byte is a hazard; of a `LANDED`
  byte it needs the reading thread to have *observed* that phase complete: a successful wait of its own,
  or a `bar.sync`/`barrier.sync` (or an mbarrier phase) after which a thread that observed it released it.
  An async-proxy read (a wgmma operand through a descriptor: all 128 threads of the warpgroup; a bulk or
  TMA store: the issuing thread) has the same rules.
- `cp.async` (Ampere) bytes are `FLIGHT` from issue until the issuing thread's `cp.async.wait_group` /
  `wait_all` (or `cp.async.mbarrier.arrive`) lands them (`memory.land_copies`).
- A generic store read by the async proxy needs a `fence.proxy.async` on a happens-before path from the
  store to the read (in any thread: a barrier carries other threads' stores to the fencing thread), and
  generic accesses to one byte, one a write, need a happens-before order; `happens_before` keeps the vector
  clocks and reports both as hazards, on every schedule.
- wgmma: per warpgroup, `wgmma.mma_async` joins the open group, `wgmma.commit_group` closes it and
  `wgmma.wait_group N` completes all but the N newest committed groups. Until then its accumulator and
  A-fragment registers are pending: any other instruction reading or writing them is a hazard (a later
  `wgmma.mma_async` of the chain may use the accumulator as its accumulator and the A registers as its A),
  and the shared bytes it reads may not be overwritten (a TMA refilling a slot a wgmma still reads, a
  store, a cp.async).
- `wgmma.fence` [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-fence]: an instruction other than
  wgmma.mma_async that names a register a wgmma.mma_async uses as accumulator or A fragment marks it
  *touched* in its thread; `wgmma.fence` clears the thread's marks; a wgmma.mma_async whose accumulator or A
  register is touched is a hazard (the fence between the access and the wgmma is missing).
- Bulk and TMA stores read shared memory until `cp.async.bulk.wait_group{.read} N` of the issuing thread
  covers their bulk group: a write into those bytes before is a hazard, and so is the CTA exiting before.
- mbarrier transactions: a phase that completes while copies are still in flight on its barrier, or whose
  arrivals are all in with more bytes delivered than announced (tx-count below zero), disagrees with its
  `expect_tx`; one that announced more bytes than arrive never completes, and the deadlock report (see
  `schedule`) shows the barrier's phase, pending arrivals, tx-count and the bytes in flight on it.
- A release (an mbarrier arrive that completes a phase threads wait on) lets the woken threads run first
  (`Machine.preferred`, see `schedule`): a producer refills a slot at the earliest moment the hardware
  could, so a consumer that released it before its last read reads a byte in flight, and the report says
  which arrive released the slot.

Registers and statuses are per lane (one thread of one CTA of the batch); tags are per byte of `Machine.shared`
(all CTAs of the batch). Everything is reset with the batch (`reset`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.cluster import grid_rank
from tessera.interpreters.ptx.happens_before import HappensBefore
from tessera.interpreters.ptx.state import EXITED, PARK, RUN, Machine, PtxDeadlockError, PtxHazardError
from tessera.interpreters.ptx.wgmma_tracking import _CHUNK, WgmmaTracking
from tessera.sm90 import facts

PLAIN, FLIGHT, LANDED = 0, 1, 2
_ALL_PLAIN = ()  # `AsyncTracker._range_summary` of a range no asynchronous copy wrote


@dataclass(eq=False)
class Copy:
    """An asynchronous copy into shared memory not yet landed (TMA/bulk load: `key` is its mbarrier) or, for
    messages, one that has (`data` None). `acquired` is the mbarrier the issuing thread last waited on."""

    kind: str
    inst: object
    lane: int
    index: np.ndarray | None
    data: np.ndarray | None
    nbytes: int
    key: tuple[int, int] | None
    acquired: tuple[int, int] | None = None
    span: slice | None = None  # the range `index` fills, when it fills one (see `AsyncTracker.stage`)
    layout: object = None  # how `index` fills `span` (`AsyncTracker.stage`), for a landing without a gather
    combine: object = None
    """A `red.async`'s update (old bytes -> new bytes, applied when it lands); None: a copy of `data`."""


class AsyncTracker(WgmmaTracking):
    """The asynchrony state of a machine's batch; see the module docstring (its wgmma half: `wgmma_tracking`).
    Created by `async_checks.install`."""

    def __init__(self, m: Machine):
        self.m = m
        self.groups_per_cta = -(-m.threads // facts.WARPGROUP_SIZE)
        self.warpgroups = m.ctas * self.groups_per_cta
        n = len(m.shared)
        self.state = np.zeros(n, np.int8)
        self.tag = np.zeros(n, np.int32)  # FLIGHT: copy id; LANDED: barrier instance
        self.phase = np.zeros(n, np.int64)  # LANDED: the phase the byte counts towards
        # [groups per CTA, 16-byte chunk (`HappensBefore.chunk_of`)]: wgmma group + 1 reading the chunk
        self.wg_read: np.ndarray | None = None
        self.proxy_readers = True  # the program reads shared memory through the async proxy (set by install)
        self.hb = HappensBefore(m.lanes, m.threads, n, self.hazard, self.where, m.describe_lane,
                                races=getattr(m, "races", True))
        if getattr(m, "cluster_size", 1) > 1:  # a peer's bytes are judged in that peer's frame
            self.hb.peer_frame = (max(m.shared_bytes, 1), lambda slot: grid_rank(m, slot))
            self.hb.cluster_size = m.cluster_size
        self.reset()

    def reset(self) -> None:
        """A new batch: nothing in flight, nothing pending, nothing observed."""
        m = self.m
        self.hb.reset()
        self.state[:] = PLAIN
        # ranges that one copy landed whole (a swizzled TMA box), start -> (stop, barrier, phase), while none of
        # their bytes' `state`, `tag` or `phase` changed since: an operand inside one is judged without a walk
        self.landed_ranges: dict[int, tuple[int, int, int]] = {}
        self.landed_starts: list[int] = []  # the keys of `landed_ranges`, ascending (the ranges are disjoint)
        self.tagged = False  # some byte may be FLIGHT or LANDED (an asynchronous copy was issued)
        self.copies: dict[int, Copy] = {}
        self.in_flight: dict[tuple[int, int], list[Copy]] = {}
        self.staged: list[tuple[np.ndarray, np.ndarray]] = []
        self.barriers: dict[tuple[int, int], int] = {}
        self.observed = np.zeros((0, m.lanes), np.int64)  # [barrier, lane]: phases known complete
        self.seen_runs: dict[tuple[int, int, int], int] = {}  # `_seen` of runs of lanes, until `observed` changes
        # [barrier, barrier]: what the arrivals on it had observed when they arrived, for its completed phases
        # (`carried`, what a waiter learns) and its pending one (`carrying`, published when it completes)
        self.carried = np.zeros((0, 0), np.int64)
        self.carrying = np.zeros((0, 0), np.int64)
        self.released = np.zeros((0, m.lanes), np.int32)  # [barrier, lane]: line of the lane's last arrive
        self.last_wait = np.full(m.lanes, -1, np.int64)  # barrier instance a lane last waited on
        self.last_arrival: dict[tuple[int, int], tuple[int, int]] = {}  # mbarrier -> (line, lane) of its last arrive
        # wgmma groups [memory_model.WGMMA_WAIT_PER_THREAD]: a commit numbers the groups of each executing warp
        # (`warp_open`), a wait completes them for each executing thread (`lane_done`); per warpgroup, `wg_open`
        # is the newest group a warp of it opened and `wg_done` the newest group a thread of it waited for (the
        # wgmma-group, one per warpgroup, is then complete: its shared-memory reads are over)
        self.warp_open = np.zeros(int(m.unit_of[facts.WARP_SIZE].max(initial=0)) + 1, np.int64)
        self.lane_done = np.full(m.lanes, -1, np.int64)
        self.wg_open = np.zeros(self.warpgroups, np.int64)
        self.wg_done = np.full(self.warpgroups, -1, np.int64)
        self.wg_issued = np.full(self.warpgroups, -1, np.int64)
        self.pending: dict[str, tuple[np.ndarray, str, object]] = {}
        self.reading = False
        self.last_wgmma: dict[int, object] = {}  # warpgroup -> its last wgmma.mma_async
        # accesses to wgmma registers outside a wgmma, as a log (sequence number, register names, lanes, line) and
        # each lane's sequence number at its last wgmma.fence: one append per instruction, walked only when a
        # wgmma's lanes are `dirty` (touched some wgmma register since their last wgmma.fence)
        self.touch_log: list[tuple[int, frozenset, object, int]] = []
        self.touch_seq = 0
        self.fence_seq = np.zeros(m.lanes, np.int64)
        self.dirty = np.zeros(m.lanes, bool)  # up to date for the log's first `dirty_from` entries (`_dirty`)
        self.dirty_from = 0
        # accumulator register -> (lanes whose last wgmma on it came after their last wgmma.fence, that wgmma,
        # its shape)
        self.shaped: dict[str, tuple[np.ndarray, object, str]] = {}
        self.ever_fenced = np.zeros(m.lanes, bool)  # lanes that have issued a wgmma.fence [memory_model.WGMMA_FENCE]
        self.read_inst: dict[tuple[int, int], object] = {}
        if self.wg_read is not None:
            self.wg_read[:] = 0
        self.bulk_open = np.zeros(m.lanes, np.int64)
        self.bulk_done = np.full(m.lanes, -1, np.int64)
        self.bulk_reads: list[tuple[int, int, np.ndarray, object]] = []

    # region messages
    def hazard(self, inst, message: str, lane: int | None = None, error=PtxHazardError) -> PtxHazardError:
        m = self.m
        where = f" ({m.describe_lane(int(lane))})" if lane is not None else ""
        return error(f"{m.source}:{inst.line}: error: {inst.name}: {message}{where}")

    def where(self, flat: int) -> str:
        """'shared address 0x.. of CTA (x, y, z)' of a flat index into `Machine.shared`."""
        m = self.m
        cta, address = divmod(int(flat), max(m.shared_bytes, 1))
        c = m.ctaid[cta]
        return f"shared address {address:#x}" + (f" of CTA ({c[0]}, {c[1]}, {c[2]})" if m.ctas > 1 else "")

    def barrier_name(self, b: int) -> str:
        key = next(k for k, i in self.barriers.items() if i == b)
        return f"the mbarrier at shared address {key[1]:#x}"

    def describe_copy(self, copy: Copy) -> str:
        return f"the {copy.kind} at line {copy.inst.line} ({self.m.describe_lane(copy.lane)})"

    def last_arrival_at(self, key: tuple[int, int]) -> str:
        """' (the arrive at line L, thread ...)': the other side of a transaction count that disagrees."""
        last = self.last_arrival.get(key)
        return f" (the arrive at line {last[0]}, {self.m.describe_lane(last[1])})" if last else ""

    def describe_barrier(self, key: tuple[int, int]) -> str:
        """' (phase P, parity p, a of e arrivals pending, tx-count T, ...)' for a deadlock report."""
        state = self.m.mbarriers.get(key)
        if state is None:
            return ""
        copies = self.in_flight.get(key, [])
        flying = f", {sum(c.nbytes for c in copies)} bytes of copies in flight on it" if copies else ""
        tx = ""
        if state.pending == 0 and state.tx_count > 0 and not copies:
            tx = f": its expect_tx announced {state.tx_count} bytes more than the copies delivered"
        elif state.pending:
            tx = ": arrivals are missing"
        return (f" (in phase {state.phase}, parity {state.phase & 1}, with {state.pending} of {state.expected} "
                f"arrivals pending and tx-count {state.tx_count}{flying}{tx}; a wait for parity "
                f"{(state.phase & 1) ^ 1} passes, one for parity {state.phase & 1} waits for this phase)")

    # endregion
    # region mbarrier instances and what threads have observed
    def barrier(self, key: tuple[int, int]) -> int:
        """The instance index of the mbarrier at `key` = (CTA slot, shared address)."""
        b = self.barriers.get(key)
        if b is None:
            b = self.barriers[key] = len(self.barriers)
            lanes = self.m.lanes
            self.observed = np.concatenate([self.observed, np.zeros((1, lanes), np.int64)])
            self.released = np.concatenate([self.released, np.zeros((1, lanes), np.int32)])
            for name in ("carried", "carrying"):
                grown = np.zeros((b + 1, b + 1), np.int64)
                grown[:b, :b] = getattr(self, name)
                setattr(self, name, grown)
        return b

    def observe(self, key: tuple[int, int], lanes: np.ndarray, phase: int) -> None:
        """`lanes` saw the mbarrier at `key` in `phase` after a successful wait: they know every phase before
        it complete, and what the threads arriving on it had observed."""
        b = self.barrier(key)
        self.seen_runs.clear()
        columns = HappensBefore._rows(lanes)
        if isinstance(columns, slice):  # consecutive lanes (a warpgroup, a CTA's consumers): in place
            observed = self.observed[:, columns]
            np.maximum(observed[b], phase, out=observed[b])
            np.maximum(observed, self.carried[b][:, None], out=observed)
        else:
            self.observed[b, lanes] = np.maximum(self.observed[b, lanes], phase)
            self.observed[:, lanes] = np.maximum(self.observed[:, lanes], self.carried[b][:, None])
        self.last_wait[lanes] = b

    def arriving(self, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive on the mbarrier at `key` (called before the arrivals apply, so that the one completing
        the phase counts in it): the waiters of the phase they arrive in learn what they had observed, once it
        completes (`published`), not the waiters of a phase completed before: a thread that waits phase p of
        barrier X and then arrives on Y lets Y's next phase's waiters read X's phase-p bytes, and an arrival
        before that wait does not."""
        b = self.barrier(key)
        if len(self.observed):
            self.carrying[b] = np.maximum(self.carrying[b], self.observed[:, lanes].max(axis=1))

    def published(self, key: tuple[int, int]) -> None:
        """The pending phase of the mbarrier at `key` completed: its waiters learn what its arrivals carried."""
        b = self.barrier(key)
        if self.carrying[b].any():
            self.carried[b] = np.maximum(self.carried[b], self.carrying[b])
            self.carrying[b] = 0

    def arrived(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrived on the mbarrier at `key` (for the messages: the last arrival of each lane)."""
        b = self.barrier(key)
        self.released[b, lanes] = inst.line
        self.last_arrival[key] = (inst.line, int(lanes[-1]))

    def shared_by_barrier(self, participants: np.ndarray, waiters: np.ndarray, key: tuple[int, int] | None = None
                          ) -> None:
        """A barrier completed: its waiters know what every participant had observed (a named barrier `key`
        = (barrier, CTA slot): what each released when it arrived, `HappensBefore.bar_arrived`)."""
        if key is None:
            self.hb.barrier(participants, waiters)
        else:
            self.hb.bar_completed(key, waiters)
        if len(self.observed) and len(participants) and len(waiters):
            seen = self.observed[:, participants].max(axis=1)
            self.seen_runs.clear()
            self.observed[:, waiters] = np.maximum(self.observed[:, waiters], seen[:, None])

    # endregion
    # region asynchronous copies into shared memory
    def check_writable(self, inst, lanes, flat: np.ndarray, what: str, acquired: int | None = None,
                       span: slice | None = None, atomic: bool = False) -> None:
        """Refuse `what` (by `lanes`, one per byte or one for all) writing the bytes `flat` while an
        asynchronous copy still writes them, a pending wgmma may still read them, or a bulk store still
        reads them. `span`: the range `flat` fills, when it fills one (the records are then read as a range,
        and a finding is located byte by byte). `atomic`: a `red.async`, which another red.async in flight on
        the bytes does not race (both relaxed at cluster scope: morally strong [memory_model.MORALLY_STRONG])."""
        # a range with nothing in flight and no pending wgmma reading it is decided without a gather
        clear = span is not None and not (self.tagged and (self.state[span] == FLIGHT).any()) \
            and not (self.reading and self._read_by_wgmma(span))
        lanes = np.broadcast_to(np.asarray(lanes), flat.shape)
        if self.tagged and not clear:
            flying = self.state[flat] == FLIGHT
            if atomic and flying.any():
                flying[flying] = [self.copies[int(c)].combine is None for c in self.tag[flat[flying]]]
            if flying.any():
                i = int(np.argmax(flying))
                copy = self.copies[int(self.tag[flat[i]])]
                raise self.hazard(inst, f"{what} writes {self.where(flat[i])} while {self.describe_copy(copy)} "
                                        "into it is still in flight (write-after-write race with an asynchronous "
                                        "copy)", lanes[i])
        if self.reading and not clear:
            self._check_not_read_by_wgmma(inst, lanes, flat, what, acquired)
        if self.bulk_reads:
            for lane, group, index, store in self.bulk_reads:
                hit = np.isin(flat, index)
                if hit.any():
                    i = int(np.argmax(hit))
                    raise self.hazard(inst, f"{what} overwrites {self.where(flat[i])} while the bulk store at line "
                                            f"{store.line} ({self.m.describe_lane(lane)}) may still read it (no "
                                            "cp.async.bulk.wait_group.read covers its bulk group)", lanes[i])

    def stage(self, index: np.ndarray, data: np.ndarray, span: slice | None = None, layout=None) -> None:
        """A TMA/bulk load's bytes for the copy `issue` is about to record (called by the copy); `span`: the
        range `index` fills, when it fills one (a swizzled box), so that its records are kept as a range.
        `layout`: "ordered" when `index` is `span` in order, (base, chunks) when it is whole 16-byte chunks of
        the CTA's shared memory at `base` (bytes base + 16c .. base + 16c + 15 for each c in `chunks`, in order:
        a swizzled box), so that the bytes land a chunk at a time."""
        self.staged.append((index, data, span, layout))

    def issue(self, inst, lane: int, address: int, nbytes: int, kind: str, combine=None) -> None:
        """The staged bytes of `lane` are one copy completing `nbytes` of transaction on the mbarrier at
        shared::cluster `address` (the lane's own CTA's, or a cluster member's): tag them in flight; they land
        when a thread waits on that barrier. `combine` (a `red.async`): the bytes are updated from what they
        hold when the copy lands, not replaced by the staged ones."""
        from tessera.interpreters.ptx.sync import _state, mbarrier_key

        m = self.m
        key = mbarrier_key(m, lane, address)  # a multicast's copy completes on each member's own mbarrier
        state = _state(m, inst, lane, address)
        if key[0] != int(m.lane_cta[lane]):
            m.cluster_state.remote_mbarrier(inst, lane, key, state.phase)
        if len(self.staged) == 1:
            index, data, span, layout = self.staged[0]
        else:
            index = np.concatenate([i for i, *_ in self.staged]) if self.staged else np.zeros(0, np.int64)
            data = np.concatenate([d for _, d, *_ in self.staged]) if self.staged else np.zeros(0, np.uint8)
            span = layout = None
        self.staged = []
        acquired = None if self.last_wait[lane] < 0 else int(self.last_wait[lane])
        self.check_writable(inst, lane, index, f"the {kind}", acquired, span, atomic=combine is not None)
        known = None
        if len(index) and key[0] != int(m.lane_cta[lane]):  # into a peer's shared memory: its threads' frame
            known = self.hb.peer_known(lane, grid_rank(m, key[0]))
        self.hb.async_write(inst, np.array([lane]), index, f"the {kind}", span, known)
        copy = Copy(kind, inst, lane, index, data, nbytes, key, acquired, span, combine=combine, layout=layout)
        ident = len(self.copies)
        self.copies[ident] = copy
        self.in_flight.setdefault(key, []).append(copy)
        self.tagged = True
        where = index if span is None else span
        self.state[where] = FLIGHT
        self.tag[where] = ident
        self._forget_ranges(where)
        self.hb.async_written(where)
        if state.pending == 0:
            self.wake(key)

    def wake(self, key: tuple[int, int]) -> None:
        """Threads parked on the mbarrier at `key` try again (its copies may land now)."""
        m = self.m
        parked = (m.status == PARK) & (m.park_address == key[1]) & (m.lane_cta == key[0])
        if parked.any():
            m.status[parked] = RUN
            m.woken += 1
            m.park_address[parked] = -1
            m.park_test[parked] = False

    def land_for_wait(self, inst, key: tuple[int, int], lane: int) -> bool:
        """A thread's wait on the mbarrier at `key` fails: if every arrival of the phase is in, land the copies
        in flight on it (the latest moment they could complete the phase) and return True (test again)."""
        if key not in self.in_flight or self.m.mbarriers[key].pending != 0:
            return False
        self.land(inst, key, lane)
        return True

    def land(self, inst, key: tuple[int, int], lane: int) -> None:
        """Land the copies in flight on the mbarrier at `key`, in issue order; see the module docstring."""
        from tessera.interpreters.ptx.sync import _changed

        m = self.m
        state = m.mbarriers[key]
        b = self.barrier(key)
        copies = self.in_flight.pop(key)
        before = state.phase
        for i, copy in enumerate(copies):
            if state.phase != before:
                left = sum(c.nbytes for c in copies[i:])
                raise self.hazard(copy.inst, f"the mbarrier at shared address {key[1]:#x} completed phase {before} "
                                             f"with {len(copies) - i} copies ({left} bytes) still in flight on it: "
                                             f"its expect_tx{self.last_arrival_at(key)} announced fewer bytes than "
                                             "the copies deliver", copy.lane)
            phase = state.phase
            if copy.combine is not None:
                m.shared[copy.index] = copy.combine(m.shared[copy.index])
            elif copy.layout == "ordered":
                m.shared[copy.span] = copy.data
            elif copy.layout is not None:  # whole chunks: a row of 16 bytes each
                base, chunks = copy.layout
                m.shared[base:base + m.shared_bytes // _CHUNK * _CHUNK].reshape(-1, _CHUNK)[chunks] = \
                    copy.data.reshape(-1, _CHUNK)
            else:
                m.shared[copy.index] = copy.data
            where = copy.index if copy.span is None else copy.span
            self.state[where] = LANDED
            self.tag[where] = b
            self.phase[where] = phase
            self._forget_ranges(where)
            if copy.span is not None:
                if copy.span.start not in self.landed_ranges:  # (its bytes' ranges were forgotten above)
                    bisect.insort(self.landed_starts, copy.span.start)
                self.landed_ranges[copy.span.start] = (copy.span.stop, b, phase)
            copy.data = None
            try:
                state.complete_tx(copy.nbytes)
            except ValueError as error:
                raise self.hazard(copy.inst, f"mbarrier at {key[1]:#x}: {error}", copy.lane) from None
        if state.phase == before and state.pending == 0 and state.tx_count < 0:
            raise self.hazard(copies[-1].inst, f"the copies on the mbarrier at shared address {key[1]:#x} delivered "
                                               f"{-state.tx_count} bytes more than its expect_tx announced for phase "
                                               f"{state.phase}{self.last_arrival_at(key)} (tx-count {state.tx_count} "
                                               "with every arrival in)", copies[-1].lane)
        _changed(m, key, before, state, prefer=False)

    def phase_changed(self, inst, key: tuple[int, int], lane: int) -> None:
        """The mbarrier at `key` completed a phase through an arrive or complete_tx instruction: copies still
        in flight on it disagree with its expect_tx."""
        copies = self.in_flight.get(key)
        if copies:
            raise self.hazard(inst, f"completes phase {self.m.mbarriers[key].phase - 1} of the mbarrier at shared "
                                    f"address {key[1]:#x} while {self.describe_copy(copies[0])} "
                                    f"({sum(c.nbytes for c in copies)} bytes in {len(copies)} copies) is still in "
                                    "flight on it: its expect_tx is missing or smaller than the bytes the copies "
                                    "deliver", lane)

    def arrivals_changed(self, key: tuple[int, int]) -> None:
        """An arrive or expect_tx changed the mbarrier at `key` without completing its phase: parked waiters
        retry if its arrivals are all in and copies are in flight on it."""
        if key in self.in_flight and self.m.mbarriers[key].pending == 0:
            self.wake(key)

    def cp_async_issued(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """Ampere cp.async of `lanes` into `index` [lanes, size]: in flight until the issuing thread waits."""
        flat = index.reshape(-1)
        self.check_writable(inst, np.repeat(lanes, index.shape[1]), flat, "the cp.async")
        ident = len(self.copies)
        self.copies[ident] = Copy("cp.async", inst, int(lanes[0]), None, None, 0, None)
        self.state[flat] = FLIGHT
        self.tag[flat] = ident
        self._forget_ranges(flat)
        self.hb.async_written(flat)
        self.tagged = True

    def cp_async_landed(self, index: np.ndarray, lanes: np.ndarray, through_mbarrier: bool) -> None:
        """The cp.async copies of `lanes` into `index` [copies, bytes] completed at their wait: the issuing
        thread wrote them now, and other threads see them only through synchronisation that follows this
        point [memory_model.CP_ASYNC_COMPLETION]; at a cp.async.mbarrier.arrive (`through_mbarrier`) that arrive and
        every later release of the thread carry them [memory_model.CP_ASYNC_MBARRIER]."""
        lines = np.array([self.copies[int(t)].inst.line for t in self.tag[index[:, 0]]], np.int32)
        self.state[index.reshape(-1)] = PLAIN
        self._forget_ranges(index)
        self.hb.landed(lanes, index, lines, through_mbarrier)

    def describe_flight(self, flat: int) -> str:
        copy = self.copies[int(self.tag[flat])]
        if copy.kind == "cp.async":
            return (f"the cp.async at line {copy.inst.line} into it has not landed (no cp.async.wait_group or "
                    "wait_all of the issuing thread covers it)")
        return (f"{self.describe_copy(copy)} into it has not completed on the mbarrier at shared address "
                f"{copy.key[1]:#x} (no completed mbarrier wait covers it: a missing wait, or one on the wrong parity)")

    # endregion
    # region reads and writes of shared memory
    def generic_access(self, inst, lanes: np.ndarray, index: np.ndarray, write: bool, strong: bool = False) -> None:
        """An ld/st/ldmatrix/stmatrix... of `lanes` at `index` [lanes, bytes] of `Machine.shared`. A `strong`
        access (.relaxed/.acquire/.release/.volatile: a flag) is a synchronisation operation, morally strong with
        the others of its CTA [memory_model.MORALLY_STRONG]: it is kept out of the generic race records (its
        release/acquire edges are `global_order`'s), and still checked against copies in flight."""
        if write:
            if self.tagged or self.reading or self.bulk_reads:
                self.check_writable(inst, np.repeat(lanes, index.shape[1]), index.reshape(-1), "the store")
            if self.tagged:
                state = self.state[index]
                if state.any() and self.hb.races:
                    writers = np.broadcast_to(np.asarray(lanes)[:, None], index.shape).reshape(-1)
                    self._check_landed_write(inst, writers, index.reshape(-1), state.reshape(-1))
                self.state[index] = PLAIN
                self._forget_ranges(index)
            if (self.proxy_readers or self.hb.races) and not strong:
                self.hb.write(inst, lanes, index)
            return
        if not strong:
            self.hb.read(inst, lanes, index)
        if not self.tagged:
            return
        state = self.state[index]
        if state.any():
            readers = np.broadcast_to(np.asarray(lanes)[:, None], index.shape).reshape(-1)
            self._check_read(inst, readers, index.reshape(-1), state.reshape(-1), "reads")

    def _check_read(self, inst, readers: np.ndarray, flat: np.ndarray, state: np.ndarray, what: str) -> None:
        flying = state == FLIGHT
        if flying.any():
            i = int(np.argmax(flying))
            raise self.hazard(inst, f"{what} {self.where(flat[i])} before it was signalled: "
                                    f"{self.describe_flight(flat[i])}{self._released_early(readers[i], flat[i])}",
                              readers[i])
        landed = state == LANDED
        if landed.any():
            b, p, r = self.tag[flat[landed]], self.phase[flat[landed]], readers[landed]
            unseen = self.observed[b, r] <= p
            if unseen.any():
                i = int(np.argmax(unseen))
                raise self.hazard(inst, f"{what} {self.where(flat[landed][i])} before the TMA copy into it was "
                                        f"signalled: this thread has not observed phase {int(p[i])} (parity "
                                        f"{int(p[i]) & 1}) of {self.barrier_name(int(b[i]))} complete (no "
                                        "successful mbarrier wait for that phase, or a wait on the wrong parity)",
                                  r[i])

    def _check_landed_write(self, inst, writers: np.ndarray, flat: np.ndarray, state: np.ndarray) -> None:
        """A generic store over bytes a TMA copy wrote needs the writer to have observed the phase the copy
        completed in, as a read does (the copy writes until its complete-tx; it landed here because another
        thread waited) [memory_model.TMA_READ_UNTIL_COMPLETE]."""
        landed = state == LANDED
        if not landed.any():
            return
        b, p, w = self.tag[flat[landed]], self.phase[flat[landed]], writers[landed]
        unseen = self.observed[b, w] <= p
        if unseen.any():
            i = int(np.argmax(unseen))
            raise self.hazard(inst, f"the store writes {self.where(flat[landed][i])}, which the TMA copy completing "
                                    f"phase {int(p[i])} (parity {int(p[i]) & 1}) of {self.barrier_name(int(b[i]))} "
                                    "writes, and this thread has not observed that phase (write-after-write race with "
                                    "the async proxy: no successful mbarrier wait for that phase orders the copy "
                                    "before this store)", w[i])

    def _released_early(self, reader: int, flat: int) -> str:
        """', released ...' when the copy was issued after a wait on an mbarrier `reader` had arrived on."""
        copy = self.copies[int(self.tag[flat])]
        if copy.acquired is None:
            return ""
        line = int(self.released[copy.acquired, reader])
        if not line:
            return ""
        return (f"; the producer refilled it after this thread released it with the arrive on "
                f"{self.barrier_name(copy.acquired)} at line {line}, before this read (a release before the "
                "consumer's last read)")

    def async_read(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, span: slice | None = None,
                   hull: slice | None = None, own_rows: bool = False) -> None:
        """The async proxy reads `flat` for `lanes` (a warpgroup's wgmma, or one thread's bulk store): every
        one of them must have observed TMA data, and generic stores must have been fenced. `span`: the range
        `flat` fills, when it fills one (read as a range; a finding is then located byte by byte). `hull`: a
        range holding every byte of `flat` (a descriptor's K step reads 32 bytes of each 128-byte row of its
        tile): when the whole range passes, so do its bytes, and only otherwise are they walked one by one.
        `own_rows`: a wgmma's shared-memory A, each warp reading its own rows (`happens_before`)."""
        if span is not None or hull is not None:
            if self._landed_read(lanes, span if span is not None else hull):
                return
            summary = self._range_summary(span if span is not None else hull)
            if summary is not None and (summary is _ALL_PLAIN or self._seen(lanes, summary[0]) > summary[1]):
                self.hb.async_read(inst, lanes, flat, what, span, hull, own_rows)
                return
            if span is not None:
                self.async_read(inst, lanes, flat, what, own_rows=own_rows)  # raises, naming the byte, or passes
                return
        state = self.state[flat]
        if state.any() and not self._observed_all(lanes, flat, state):
            flying = state == FLIGHT
            if flying.any():
                i = int(np.argmax(flying))
                raise self.hazard(inst, f"{what} reads {self.where(flat[i])} before it was signalled: "
                                        f"{self.describe_flight(flat[i])}"
                                        f"{self._released_early(int(lanes[0]), flat[i])}", lanes[0])
            landed = state == LANDED
            if landed.any():
                tags, phases = self.tag[flat[landed]], self.phase[flat[landed]]
                known = self.observed[:, lanes].min(axis=1)  # phases every reader has observed, per barrier
                unseen = known[tags] <= phases
                if unseen.any():
                    i = int(np.argmax(unseen))
                    b, p = int(tags[i]), int(phases[i])
                    reader = lanes[int(np.argmax(self.observed[b, lanes] <= p))]
                    raise self.hazard(inst, f"{what} reads {self.where(flat[landed][i])} before the TMA copy into it "
                                            f"was signalled: this thread has not observed phase {p} (parity {p & 1}) "
                                            f"of {self.barrier_name(b)} complete (no successful mbarrier wait for "
                                            "that phase, or a wait on the wrong parity)", reader)
        self.hb.async_read(inst, lanes, flat, what, own_rows=own_rows)

    def _landed_read(self, lanes: np.ndarray, where: slice) -> bool:
        """Whether an async-proxy read by `lanes` of bytes inside the range `where` passes without looking at
        them: the range lies in ranges TMA copies of one mbarrier landed (`_landed_cover`) and every reader has
        observed that phase. No generic store wrote those bytes since (it would have ended the range): there is
        nothing to fence."""
        cover = self._landed_cover(where)
        return cover is not None and self._seen(lanes, cover[0]) > cover[1]

    def _observed_all(self, lanes: np.ndarray, flat: np.ndarray | slice, state: np.ndarray) -> bool:
        """The common case of an async-proxy read, decided without a walk per byte: every byte landed from
        copies on one mbarrier, and every reader has observed the latest phase they count towards."""
        if state.min() != LANDED or state.max() != LANDED:
            return False
        tags = self.tag[flat]
        b = int(tags[0])
        if tags.min() != b or tags.max() != b:
            return False
        return self._seen(lanes, b) > int(self.phase[flat].max())

    def _seen(self, lanes: np.ndarray, b: int) -> int:
        """The latest phase of mbarrier instance `b` that every one of `lanes` has observed."""
        first, last = int(lanes[0]), int(lanes[-1])
        if last - first + 1 != len(lanes):
            return int(self.observed[b, lanes].min())
        known = self.seen_runs.get((b, first, last))
        if known is None:  # a run of lanes (a warpgroup's wgmma): kept until a wait or barrier changes `observed`
            known = self.seen_runs[(b, first, last)] = int(self.observed[b, first:last + 1].min())
        return known

    def _forget_ranges(self, where: np.ndarray | slice) -> None:
        """The bytes `where` change their asynchrony state: the landed ranges holding one no longer apply."""
        if not self.landed_ranges:
            return
        if isinstance(where, slice):
            low, high = where.start, where.stop
        elif where.size:
            low, high = int(where.min()), int(where.max()) + 1
        else:
            return
        self.landed_ranges = {start: kept for start, kept in self.landed_ranges.items()
                              if not (start < high and kept[0] > low)}
        self.landed_starts = sorted(self.landed_ranges)

    def _landed_cover(self, span: slice) -> tuple[int, int] | None:
        """(barrier, latest phase) when `span` lies inside `landed_ranges` of one barrier (a K step of a ring
        slot's tile, in one box or across adjacent ones), else None. Such bytes landed from TMA copies and no
        generic store wrote them since: a store (or a cp.async landing) ends the ranges it touches."""
        if not self.landed_ranges:
            return None
        covered, barrier, latest = span.start, None, 0
        starts = self.landed_starts
        for start in starts[max(bisect.bisect_right(starts, covered) - 1, 0):]:
            stop, b, phase = self.landed_ranges[start]
            if stop <= covered:
                continue
            if start > covered or barrier not in (None, b):
                return None
            covered, barrier, latest = stop, b, max(latest, phase)
            if covered >= span.stop:
                return barrier, latest
        return None

    def _range_summary(self, span: slice):
        """`_ALL_PLAIN` when no byte of `span` was written by an asynchronous copy, (barrier, latest phase) when
        every byte landed from copies on one mbarrier, else None (walk the bytes); `_landed_cover` first."""
        cover = self._landed_cover(span)
        if cover is not None:
            return cover
        state = self.state[span]
        summary = None
        if not state.any():
            summary = _ALL_PLAIN
        elif state.min() == LANDED and state.max() == LANDED:
            tags = self.tag[span]
            b = int(tags[0])
            if tags.min() == b and tags.max() == b:
                summary = (b, int(self.phase[span].max()))
        return summary

    def fence(self, lanes: np.ndarray, shared: bool = True, global_: bool = True) -> None:
        """fence.proxy.async by `lanes`: the generic stores that happen before it are visible to the async
        proxy along every happens-before path through it (`happens_before`), in the state spaces it names."""
        self.hb.fence(lanes, shared, global_)

    # endregion
    # region bulk stores
    def bulk_store_reads(self, inst, lane: int, flat: np.ndarray, what: str, span: slice | None = None) -> None:
        """A bulk/TMA store of `lane` reads `flat` (filling `span`, when it fills a range) until its bulk group
        is waited for (`.read`)."""
        self.async_read(inst, np.array([lane]), flat, what, span)
        self.bulk_reads.append((lane, int(self.bulk_open[lane]), flat, inst))

    def bulk_commit(self, lanes: np.ndarray) -> None:
        self.bulk_open[lanes] += 1

    def bulk_wait(self, lanes: np.ndarray, keep: int, inst) -> None:
        self.bulk_done[lanes] = np.maximum(self.bulk_done[lanes], self.bulk_open[lanes] - 1 - keep)
        for lane, group, flat, store in self.bulk_reads:
            if group <= self.bulk_done[lane]:
                self.bulk_read_completed(inst, lane, flat, "the bulk store", store.line)
        self.bulk_reads = [r for r in self.bulk_reads if r[1] > self.bulk_done[r[0]]]

    def bulk_read_completed(self, inst, lane: int, flat: np.ndarray, what: str, line: int) -> None:
        """The wait `inst` of `lane` covered the bulk group of `what` (a bulk store or reduction of `lane`, at
        `line`), which read `flat`: a later write of those bytes must happen after this wait (happens_before), not merely run
        after it [memory_model.BULK_READ_BEFORE_EXIT]. One row per issuing warpgroup, after the wgmma rows."""
        if self.hb.races and len(flat):
            row = self.groups_per_cta + int(self.m.unit_of[facts.WARPGROUP_SIZE][lane]) % self.groups_per_cta
            self.hb.reads_completed(flat, np.array([lane]), inst, row, f"{what} at line {line} ("
                                    f"{self.m.describe_lane(lane)}) read until its cp.async.bulk.wait_group", what)

    # endregion
    # region the end of a CTA
    def on_exit(self, ctas) -> None:
        """Every thread of a CTA slot exited: no TMA copy may still be in flight into its shared memory, no bulk or
        TMA store may still read it (`memory_model.BULK_READ_BEFORE_EXIT`), and no wgmma of its warpgroups may be
        pending (their results and operands would be lost)."""
        m = self.m
        for cta in ctas:
            if not (m.status[m.lane_cta == cta] == EXITED).all():
                continue
            for key, copies in self.in_flight.items():
                if key[0] == cta and copies:
                    copy = copies[0]
                    raise self.hazard(copy.inst, f"the CTA ends with this {copy.kind} in flight (no thread waited on "
                                                 f"its mbarrier at shared address {key[1]:#x} once its arrivals were "
                                                 "in)", copy.lane)
            for lane, group, _, store in self.bulk_reads:
                if int(m.lane_cta[lane]) == cta:  # its shared memory is freed while the store still reads it
                    raise self.hazard(store, f"the CTA exits while this bulk store (bulk group {group}) may still read "
                                             "its shared source: no cp.async.bulk.wait_group.read of the issuing thread "
                                             "covers it [memory_model.BULK_READ_BEFORE_EXIT]", lane)
            ws = int(cta) * self.groups_per_cta + np.arange(self.groups_per_cta)
            pending = ws[self.wg_issued[ws] > self.wg_done[ws]]
            if len(pending):
                w = int(pending[0])
                lane = int(np.flatnonzero(m.unit_of[facts.WARPGROUP_SIZE] == w)[0])
                raise self.hazard(self.last_wgmma[w], f"the CTA ends with this wgmma of warpgroup "
                                                      f"{w % self.groups_per_cta} pending: no wgmma.commit_group and "
                                                      "wgmma.wait_group cover it", lane)

    # endregion


__all__ = ["AsyncTracker", "PtxDeadlockError", "PtxHazardError"]
