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
  `wait_all` (or `cp.async.mbarrier.arrive`) lands them (`cp_async.land_copies`).
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
- A bulk copy into a cluster member (`cp.async.bulk.shared::cluster.shared::cta`) reads its shared source until its
  complete-tx: a write of it must be ordered after a successful wait on the destination's barrier that followed the
  completion (`copy_sources`), on every schedule.
- mbarrier transactions: a phase that completes while copies are still in flight on its barrier, or whose
  arrivals are all in with more bytes delivered than announced (tx-count below zero), disagrees with its
  `expect_tx`; one that announced more bytes than arrive never completes, and the deadlock report (see
  `schedule`) shows the barrier's phase, pending arrivals, tx-count and the bytes in flight on it.
- A release (an mbarrier arrive that completes a phase threads wait on) lets the woken threads run first
  (`Machine.preferred`, see `schedule`): a producer refills a slot at the earliest moment the hardware
  could, so a consumer that released it before its last read reads a byte in flight, and the report says
  which arrive released the slot.

Registers and statuses are per lane (one thread of one CTA of the batch); tags are per byte of `Machine.shared`
(all CTAs of the batch), a range a copy fills kept as one until something needs its bytes' (`tag_ranges`).
Everything is reset with the batch (`reset`).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.async_copies import PLAIN, AsyncCopies, Copy
from tessera.interpreters.ptx.byte_ranges import ByteRanges
from tessera.interpreters.ptx.cluster import grid_rank
from tessera.interpreters.ptx.copy_sources import CopySources
from tessera.interpreters.ptx.happens_before import HappensBefore
from tessera.interpreters.ptx.state import EXITED, Machine, PtxDeadlockError, PtxHazardError
from tessera.interpreters.ranges import consecutive
from tessera.interpreters.ptx.tag_ranges import TagRanges
from tessera.interpreters.ptx.tagged_accesses import TaggedAccesses
from tessera.interpreters.ptx.wgmma_tracking import WgmmaTracking
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts


class AsyncTracker(WgmmaTracking, AsyncCopies, TaggedAccesses, TagRanges):
    """The asynchrony state of a machine's batch; see the module docstring (its wgmma half: `wgmma_tracking`,
    its copies into shared memory: `async_copies`, the sources of bulk copies into cluster members:
    `copy_sources`, the checks of shared-memory reads and writes against the bytes' tags: `tagged_accesses`, a
    copied range's tags kept as one: `tag_ranges`). Created by
    `async_checks.install`."""

    def __init__(self, m: Machine):
        self.m = m
        self.groups_per_cta = -(-m.threads // facts.WARPGROUP_SIZE)
        self.warpgroups = m.ctas * self.groups_per_cta
        n = len(m.shared)
        self.state = np.zeros(n, np.int8)
        self.tag = np.zeros(n, np.int32)  # FLIGHT: copy id; LANDED: barrier instance
        self.phase = np.zeros(n, np.int32)  # LANDED: the phase the byte counts towards
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
        # a copied range's tags (state, tag, phase), not written into `state`, `tag`, `phase` (`tag_ranges`):
        # they override those arrays over the range
        self.tag_ranges = ByteRanges()
        # ranges that one copy landed whole (a swizzled TMA box), with (barrier, phase), while none of their
        # bytes' `state`, `tag` or `phase` changed since: an operand inside one is judged without a walk
        self.landed_ranges = ByteRanges()
        # (landed ranges, readers) where a wgmma's read passed `_landed_read` (`WgmmaTracking.wgmma_reads_landed`)
        self.landed_seen: set[tuple[tuple, bytes]] = set()
        self.tagged = False  # some byte may be FLIGHT or LANDED (an asynchronous copy was issued)
        self.copies: dict[int, Copy] = {}
        self.in_flight: dict[tuple[int, int], list[Copy]] = {}
        self.staged: list[tuple[np.ndarray, np.ndarray]] = []
        # the per-barrier arrays below are views of the first len(barriers) rows of `_barrier_rows`' arrays, kept
        # (zeroed where used) across batches and grown by doubling, not made again for each barrier of each batch
        if not hasattr(self, "_barrier_rows"):
            self._barrier_rows = _BarrierRows(0, m.lanes)
        self._barrier_rows.clear(len(getattr(self, "barriers", ())))
        self.barriers: dict[tuple[int, int], int] = {}
        self._view_barriers(0)
        self.seen_runs: dict[tuple[int, int, int], int] = {}  # `_seen` of runs of lanes, until `observed` changes
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
        self.pending: dict[str, list] = {}  # register -> [groups per warpgroup, kind, its wgmma, names]
        # the entries made since `pending` was last emptied, by id (each register of `pending` holds one of them;
        # some may be held by none any longer): what a wgmma.wait_group looks at, not every register
        self.pending_entries: dict[int, list] = {}
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
        self.shaped: dict[str, list] = {}
        self.ever_fenced = np.zeros(m.lanes, bool)  # lanes that have issued a wgmma.fence [memory_model.WGMMA_FENCE]
        # changes of the state above (`WgmmaTracking.chain_continues`), and the chain the last wgmma opened
        self.events = 0
        self.chain: tuple | None = None
        self.read_inst: dict[tuple[int, int], object] = {}
        if self.wg_read is not None:
            self.wg_read[:] = 0
        self.bulk_open = np.zeros(m.lanes, np.int64)
        self.bulk_done = np.full(m.lanes, -1, np.int64)
        self.bulk_reads: list[tuple[int, int, np.ndarray, object]] = []
        # the sources of copies into a cluster member, read until their complete-tx (`copy_sources`): bulk copies'
        # shared ones, and global ones of loads that land only in peers
        self.copy_sources = CopySources(self, "shared")
        self.global_sources = CopySources(self, "global")
        # per shared byte: whether it holds a live mbarrier (initialised, not invalidated), None before the first
        # init; `barrier_lines`: the init's (line, lane) per live barrier's first byte
        self.live_barriers: np.ndarray | None = None
        self.barrier_lines: dict[int, tuple[int, int]] = {}
        # a named barrier (barrier, CTA slot) or a CTA's cluster barrier ("cluster", CTA slot) -> [mbarrier]: the
        # phases its pending phase's arrivals had observed when they arrived (`barrier_arriving`)
        self.bar_seen: dict[tuple, np.ndarray] = {}

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

    def barrier_initialised(self, inst, key: tuple[int, int], lane: int) -> None:
        """mbarrier.init of the barrier at `key` by `lane`: its bytes hold it until an mbarrier.inval."""
        if self.live_barriers is None:
            self.live_barriers = np.zeros(len(self.m.shared), bool)
        start = key[0] * max(self.m.shared_bytes, 1) + key[1]
        self.live_barriers[start:start + facts.MBARRIER_BYTES] = True
        self.barrier_lines[start] = (inst.line, lane)

    def barrier_invalidated(self, key: tuple[int, int]) -> None:
        """mbarrier.inval of the barrier at `key`: its memory may be used for anything again."""
        if self.live_barriers is not None:
            start = key[0] * max(self.m.shared_bytes, 1) + key[1]
            self.live_barriers[start:start + facts.MBARRIER_BYTES] = False
            self.barrier_lines.pop(start, None)

    def check_not_barrier(self, inst, lanes, flat: np.ndarray, what: str, span: slice | None = None) -> None:
        """`what` (by `lanes`, one per byte or one for all) writes the shared bytes `flat` (filling `span`, when it
        fills one): none may hold a live mbarrier, whose memory is for mbarrier instructions only until an
        mbarrier.inval [P#parallel-synchronization-and-communication-instructions-mbarrier-inval]."""
        live = self.live_barriers
        if live is None or not (any_set(live[span]) if span is not None else any_set(live[flat])):
            return
        hit = live[flat]
        i = int(np.argmax(hit))
        b = int(flat[i])
        line, lane = next(where for start, where in self.barrier_lines.items()
                          if start <= b < start + facts.MBARRIER_BYTES)
        raise self.hazard(inst, f"{what} writes {self.where(b)}, which holds the mbarrier the mbarrier.init at line "
                                f"{line} ({self.m.describe_lane(lane)}) initialised: its memory may be used for "
                                "anything else only after an mbarrier.inval", int(np.broadcast_to(lanes, flat.shape)[i]))

    def where_barrier(self, key: tuple[int, int]) -> str:
        """'the mbarrier at shared address 0x.. of CTA (x, y, z)' of the mbarrier at `key` = (CTA slot, address)."""
        return f"the mbarrier at {self.where(key[0] * max(self.m.shared_bytes, 1) + key[1])}"

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
            if b == self._barrier_rows.capacity:
                self._barrier_rows = self._barrier_rows.grown(max(8, 2 * b))
            self._view_barriers(b + 1)
        return b

    def _view_barriers(self, n: int) -> None:
        """`observed`, `released`, `carried` and `carrying` as views of the first `n` barriers' rows."""
        rows = self._barrier_rows
        self.observed = rows.observed[:n]  # [barrier, lane]: phases known complete
        self.released = rows.released[:n]  # [barrier, lane]: line of the lane's last arrive
        # [barrier, barrier]: what the arrivals on it had observed when they arrived, for its completed phases
        # (`carried`, what a waiter learns) and its pending one (`carrying`, published when it completes)
        self.carried = rows.carried[:n, :n]
        self.carrying = rows.carrying[:n, :n]

    def observe(self, key: tuple[int, int], lanes: np.ndarray, phase: int) -> None:
        """`lanes` saw the mbarrier at `key` in `phase` after a successful wait: they know every phase before
        it complete, and what the threads arriving on it had observed."""
        b = self.barrier(key)
        self.seen_runs.clear()
        columns = consecutive(lanes)
        if isinstance(columns, slice):  # consecutive lanes (a warpgroup, a CTA's consumers): in place
            observed = self.observed[:, columns]
            np.maximum(observed[b], phase, out=observed[b])
            np.maximum(observed, self.carried[b][:, None], out=observed)
        else:
            self.observed[b, lanes] = np.maximum(self.observed[b, lanes], phase)
            self.observed[:, lanes] = np.maximum(self.observed[:, lanes], self.carried[b][:, None])
        self.last_wait[lanes] = b
        for sources in (self.copy_sources, self.global_sources):
            if sources.landed:  # a landed copy's completion happens before this wait
                sources.observed(key, lanes)

    def arriving(self, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive on the mbarrier at `key` (called before the arrivals apply, so that the one completing
        the phase counts in it): the waiters of the phase they arrive in learn what they had observed, once it
        completes (`published`), not the waiters of a phase completed before: a thread that waits phase p of
        barrier X and then arrives on Y lets Y's next phase's waiters read X's phase-p bytes, and an arrival
        before that wait does not."""
        b = self.barrier(key)
        if len(self.observed):
            self.carrying[b] = np.maximum(self.carrying[b], self.observed[:, lanes].max(axis=1))

    def observe_ctas(self, keys: list[tuple[int, int]], block: tuple[slice, slice], phases: list[int]) -> None:
        """`observe` of the lanes of each CTA of `block` (`ranges.lane_block`) on its own mbarrier `keys[k]`
        (each with its instance: `barrier` makes them in the order of its calls) in `phases[k]`, at once."""
        barriers = np.array([self.barriers[key] for key in keys])
        ctas, within = block
        self.seen_runs.clear()
        # [barrier, CTA, lane]
        observed = self.observed.reshape(len(self.observed), -1, self.m.threads)[:, ctas, within]
        k = np.arange(len(keys))
        observed[barriers, k] = np.maximum(observed[barriers, k], np.array(phases, observed.dtype)[:, None])
        carried = self.carried[barriers].T  # [barrier, CTA]: only the barriers some arrival had seen a phase of
        rows = np.flatnonzero(carried.any(axis=1))
        if len(rows) == len(carried):
            np.maximum(observed, carried[:, :, None], out=observed)
        elif len(rows):
            observed[rows] = np.maximum(observed[rows], carried[rows][:, :, None])
        self.last_wait.reshape(-1, self.m.threads)[ctas, within] = barriers[:, None]
        for sources in (self.copy_sources, self.global_sources):
            if sources.landed:
                t = self.m.threads
                for k, key in enumerate(keys):
                    sources.observed(key, np.arange((ctas.start + k) * t + within.start,
                                                    (ctas.start + k) * t + within.stop))

    def arriving_ctas(self, keys: list[tuple[int, int]], block: tuple[slice, slice]) -> None:
        """`arriving` of the lanes of each CTA of `block` (`ranges.lane_block`) on its own mbarrier
        `keys[k]`, at once (the barriers' instances made first, in order, as one by one)."""
        barriers = [self.barrier(key) for key in keys]
        if len(self.observed):
            ctas, within = block
            seen = self.observed.reshape(len(self.observed), -1, self.m.threads)[:, ctas, within].max(axis=2)
            self.carrying[barriers] = np.maximum(self.carrying[barriers], seen.T)

    def published(self, key: tuple[int, int]) -> None:
        """The pending phase of the mbarrier at `key` completed: its waiters learn what its arrivals carried."""
        b = self.barrier(key)
        if any_set(self.carrying[b]):
            self.carried[b] = np.maximum(self.carried[b], self.carrying[b])
            self.carrying[b] = 0

    def arrived(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrived on the mbarrier at `key` (for the messages: the last arrival of each lane)."""
        b = self.barrier(key)
        self.released[b, lanes] = inst.line
        self.last_arrival[key] = (inst.line, int(lanes[-1]))

    def shared_by_barrier(self, waiters: np.ndarray, key: tuple[int, int]) -> None:
        """Named barrier `key` = (barrier, CTA slot) completed: its waiters acquire what each participant released
        when it arrived (`HappensBefore.bar_arrived`) and know what every participant had observed then."""
        self.hb.bar_completed(key, waiters)
        self.share_observed(key, waiters)

    def barrier_arriving(self, key: tuple, lanes: np.ndarray) -> None:
        """`lanes` arrive at the named or cluster barrier `key`: what they have observed so far is what its
        waiters will know once the phase completes; what they observe after arriving (a `bar.arrive` thread's
        later mbarrier wait) is not, as their accesses after arriving are not released either."""
        if len(self.observed) and len(lanes):
            seen = self.observed[:, consecutive(lanes)].max(axis=1)  # (a CTA's lanes: a view, mostly)
            if any_set(seen):  # (nothing observed yet: the bar.sync after the mbarrier.inits)
                before = self.bar_seen.get(key)
                if before is not None:
                    seen[:len(before)] = np.maximum(seen[:len(before)], before)  # (mbarriers made since: rows added)
                self.bar_seen[key] = seen

    def share_observed(self, key: tuple, waiters: np.ndarray) -> None:
        """Barrier `key` completed: `waiters` know the mbarrier phases its arrivals had observed when they arrived."""
        seen = self.bar_seen.pop(key, None)
        if seen is None or not len(waiters):
            return
        self.seen_runs.clear()
        rows = slice(0, len(seen))
        columns = consecutive(waiters)
        if isinstance(columns, slice):
            observed = self.observed[rows, columns]
            np.maximum(observed, seen[:, None], out=observed)
        else:
            self.observed[rows, waiters] = np.maximum(self.observed[rows, waiters], seen[:, None])

    # endregion
    # region bulk stores
    def bulk_store_reads(self, inst, lane: int, flat: np.ndarray, what: str, span: slice | None = None) -> None:
        """A bulk/TMA store of `lane` reads `flat` (filling `span`, when it fills a range) until its bulk group
        is waited for (`.read`)."""
        self.async_read(inst, np.array([lane]), flat, what, span)
        self.bulk_reads.append((lane, int(self.bulk_open[lane]), flat, inst))

    def bulk_commit(self, lanes: np.ndarray) -> None:
        self.bulk_open[lanes] += 1

    def bulk_wait(self, lanes: np.ndarray, keep: int, inst, writes: bool = True) -> None:
        """cp.async.bulk.wait_group{.read} `keep` of `lanes`: their bulk groups but the last `keep` have read their
        sources; without .read (`writes`) their writes of global memory have completed too (`global_order`)."""
        self.bulk_done[lanes] = np.maximum(self.bulk_done[lanes], self.bulk_open[lanes] - 1 - keep)
        order = self.m.global_order
        if writes and order is not None:
            order.writes_completed(lanes, self.bulk_open[lanes] - 1 - keep)
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
            if not all_set(m.status[m.lane_cta == cta] == EXITED):
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


class _BarrierRows:
    """The storage of `AsyncTracker`'s per-barrier arrays for `capacity` barriers (zeros where unused)."""

    def __init__(self, capacity: int, lanes: int):
        self.capacity = capacity
        self.observed = np.zeros((capacity, lanes), np.int32)  # (phases: int32, as the tags' `phase`)
        self.released = np.zeros((capacity, lanes), np.int32)
        self.carried = np.zeros((capacity, capacity), np.int32)
        self.carrying = np.zeros((capacity, capacity), np.int32)

    def grown(self, capacity: int) -> "_BarrierRows":
        """A copy with room for `capacity` barriers."""
        rows = _BarrierRows(capacity, self.observed.shape[1])
        n = self.capacity
        rows.observed[:n], rows.released[:n] = self.observed, self.released
        rows.carried[:n, :n], rows.carrying[:n, :n] = self.carried, self.carrying
        return rows

    def clear(self, used: int) -> None:
        """Zero the rows of the first `used` barriers (a new batch)."""
        for array in (self.observed, self.released):
            array[:used] = 0
        for array in (self.carried, self.carrying):
            array[:used, :used] = 0


__all__ = ["AsyncTracker", "PtxDeadlockError", "PtxHazardError"]
