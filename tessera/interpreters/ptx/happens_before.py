"""Happens-before in the PTX executor: races on shared memory and proxy fences judged by the PTX memory model's
causality order, whatever order the executor happened to run the threads in.

`asynchrony` checks what the schedule the executor ran exposes (a read of bytes still in flight, a write
over bytes a wgmma still reads). This module adds the orders the memory model defines, so that a bug is
reported on every schedule and a correct kernel on none:

Vector clocks (FastTrack-style, incremental: bookkeeping per access, never a walk per access).
`clock[t]` is thread t's vector clock (`clock[t, u]`: the last epoch of thread u known to happen before t's
present point); `clock[t, t]` is t's own epoch, advanced at each release and each proxy fence, so accesses
between two releases share one epoch. Synchronisation adds the edges [P#memory-consistency-model
-causality-order]:

- named and CTA barriers (`bar.sync`/`barrier.sync`/`bar.arrive`/`bar.red`): every participant releases
  when it arrives (a `bar.arrive` thread runs on: what it does next is not released), and when the barrier
  completes every waiter acquires the join of those releases;
- mbarriers: an arrive (`mbarrier.arrive{.expect_tx}`, `cp.async.mbarrier.arrive`) releases into the
  barrier's pending phase; the phase completing (the last arrival, or the last complete_tx of a TMA copy)
  publishes it; a successful `try_wait`/`test_wait` acquires every published phase;
- `mbarrier.init` is a write of the barrier by its thread: an arrive or wait of another thread that the
  init does not happen before is a race (the `bar.sync` after `mbarrier.init` is missing);
- asynchronous writes (TMA and bulk loads, cp.async) are ordered by the mbarrier phases and wait groups
  `asynchrony` tracks; the last generic read and write of each byte they overwrite must happen before
  their issue (a refill racing the threads that still read or transpose the slot); they reset a byte's
  generic records.

Per shared-memory byte: the last generic write (thread, epoch, line) and every generic read since it
(`read_clocks`: an epoch while the reads are ordered, a read vector clock once two threads read it
concurrently, as FastTrack keeps them). A write checks the write and every read against the writer's clock,
a read checks the write: an access whose other side does not happen before it is a race, reported with both
sides (instruction, line, thread) and the synchronisation that would have ordered them. A write racing an
earlier reader is reported even when a later reader, ordered before the write, read the byte since. Reads of a
CTA's bytes by its peers (`ld.shared::cluster` through `mapa`) are kept apart (`peer_reads`: a column per thread of
the cluster), and a write of those bytes is judged by what the writer knows of the reading peer's threads.

Other CTAs (`remote`): global memory (`global_order`) is shared by every CTA of the grid, and only atomics
and strong accesses with release/acquire semantics order accesses of different CTAs. What a lane knows of
another CTA's threads (rank -> [thread] epochs, acquired from a release of that CTA) travels with the
clocks along every edge above; it is empty, and costs nothing, until a kernel acquires across CTAs.

Proxies [P#memory-consistency-model-proxy-preserved-base-causality-order]: a generic write W is visible
to an async-proxy read R (a TMA or bulk store, a wgmma operand) when a `fence.proxy.async` lies on a
causality path from W to R. `fenced[t, u]` is the last epoch of thread u that a proxy fence on a path into
t's present point covers: a fence by t sets `fenced[t] = clock[t]`, and every edge that carries `clock`
carries `fenced` too. So a warpgroup that stores its tile, meets on a named barrier and lets one thread
fence and issue the TMA store is correct (the barrier carries the stores to the fence), and the same without
the barrier, or with the fence before the barrier, is reported.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.read_clocks import ReadClocks
from tessera.sm90 import facts

_CHUNK = facts.SWIZZLE_CHUNK_BYTES


class HappensBefore:
    """Vector clocks of a machine's lanes and the per-byte access records of its shared memory; see the
    module docstring. `hazard(inst, message, lane)` builds the error to raise; `where(flat)` names a byte."""

    def __init__(self, lanes: int, threads: int, shared: int, hazard, where, describe_lane, races: bool = True):
        self.lanes, self.threads, self.shared = lanes, threads, shared
        self.hazard, self.where, self.describe_lane = hazard, where, describe_lane
        self.races = races  # check generic read/write races (the proxy rule is always checked)
        # the ISA's letter for cp.async bytes read by the async proxy (a fence.proxy.async even after an mbarrier
        # completed them) instead of what NVIDIA's kernels rely on [memory_model.CP_ASYNC_PROXY]; set by `launch`
        self.strict_proxy = False
        self.peer_frame = None  # in a cluster: (shared bytes per CTA, CTA slot -> grid rank), set by the tracker
        self.cluster_size = 1  # CTAs per cluster (the batch's CTA slots of a cluster are consecutive)
        self.peer_reads: ReadClocks | None = None  # reads of a CTA's bytes by its peers (see `_peer_read`)
        self.reset()

    def reset(self) -> None:
        n, s = self.lanes, self.shared
        if not hasattr(self, "clock"):  # allocated once, cleared for each batch
            self.wgmma_reads: np.ndarray | None = None  # set by asynchrony at the first wgmma read
            self.clock = np.zeros((n, self.threads), np.int32)  # [lane, thread of its CTA]
            # [lane, thread]: shared memory's columns, then global memory's (a proxy fence is limited to the
            # state space it names: fence.proxy.async.shared::cta orders no global bytes) [memory_model.PROXY_FENCE]
            self.fenced = np.zeros((n, 2 * self.threads), np.int32)
            # [lane]: whether its `fenced` row may be nonzero (a fence of its own or one carried to it): a join
            # of lanes none of whose rows may be skips their `fenced` rows (most releases, before any fence)
            self.fenced_rows = np.zeros(n, bool)
            self.w_lane, self.w_line = np.zeros(s, np.int32), np.zeros(s, np.int32)
            self.w_clock = np.zeros(s, np.int32)  # 0: no generic write since the last asynchronous one
            # the last write was a cp.async completed by a cp.async.mbarrier.arrive [memory_model.CP_ASYNC_PROXY]
            self.w_mbarrier = np.zeros(s, bool)
            self.reads = ReadClocks(s, self.threads)  # the generic reads since the last write
            # [warpgroup of its CTA, byte]: 1 + index into `completions`, the async read by that warpgroup that
            # ended last (one row per warpgroup: two warpgroups' wgmmas read the same bytes, unordered)
            self.r_async = np.zeros((1, s), np.int32)
        else:
            for array in (self.clock, self.fenced, self.fenced_rows, self.w_clock, self.w_mbarrier, self.r_async):
                array.fill(0)
            self.reads.reset()
        if self.peer_reads is not None:
            self.peer_reads.reset()
        self.peer_read_any = False  # some byte holds a peer's read since its last write
        self.clock[np.arange(n), np.arange(n) % self.threads] = 1
        self.pending: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.published: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.bar_released: dict[tuple[int, int], tuple] = {}  # (barrier, CTA slot) -> its arrivals' releases
        self.inits: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.completions: list[tuple[np.ndarray, np.ndarray, int, int]] = []
        # the wgmma groups (first, last) each completion was made for (reads_completed's: none, (0, -1))
        self.completed_groups: list[tuple[int, int]] = []
        # [warpgroup of the batch, wgmma group]: 1 + index into `completions` of the wait that completed the
        # group, 0 while none has; with `wgmma_reads` ([warpgroup of its CTA, 16-byte chunk]: 1 + the last group
        # that read the chunk, kept by `asynchrony`), a byte's completed wgmma read is found without a record per
        # byte
        self.wgmma_groups = np.zeros((self.lanes // max(self.threads, 1) * self._per_cta(), 8), np.int32)
        # lane -> {CTA rank: [thread] epochs known, then [thread] epochs whose global stores a proxy fence covers}
        self.remote: dict[int, dict[int, np.ndarray]] = {}

    def _per_cta(self) -> int:
        return -(-self.threads // facts.WARPGROUP_SIZE)

    # region wgmma read records, one per 16-byte chunk
    # A wgmma reads whole 16-byte chunks of its CTA's shared memory: a descriptor's start address and strides are
    # in 16-byte units and each core matrix row is one chunk, which every swizzle keeps together
    # [descriptor.SWIZZLE_CHUNK_BYTES]. So `wgmma_reads` has a column per chunk, not per byte: a CTA's bytes
    # [0, S) are its chunks 0 .. ceil(S / 16) - 1 (the last one short when S is not a multiple of 16).
    def _cta_bytes(self) -> int:
        return max(self.shared // max(self.lanes // max(self.threads, 1), 1), 1)

    def chunk_count(self) -> int:
        """The chunks of the batch's shared memory: the columns of `wgmma_reads`."""
        return self.lanes // max(self.threads, 1) * -(-self._cta_bytes() // _CHUNK)

    def chunk_of(self, flat: np.ndarray) -> np.ndarray:
        """The chunk (column of `wgmma_reads`) of each flat shared byte."""
        size = self._cta_bytes()
        if size % _CHUNK == 0:
            return flat // _CHUNK
        return flat // size * -(-size // _CHUNK) + flat % size // _CHUNK

    def chunk_span(self, span: slice) -> slice:
        """The chunks holding some byte of `span` (bytes of one CTA)."""
        if span.stop <= span.start:
            return slice(0, 0)
        first, last = self.chunk_of(np.array([span.start, span.stop - 1])).tolist()
        return slice(first, last + 1)

    def _whole_chunks(self, where: np.ndarray | slice) -> np.ndarray | slice:
        """The chunks every byte of which is in `where` (bytes of one CTA for a range). A write of them ends their
        wgmma read records; a chunk written in part keeps its record, which still holds for its other bytes."""
        size = self._cta_bytes()
        per_cta = -(-size // _CHUNK)
        if isinstance(where, slice):
            if where.stop <= where.start:
                return slice(0, 0)
            cta, start = divmod(where.start, size)
            stop = where.stop - cta * size
            first = -(-start // _CHUNK)
            last = per_cta if stop >= size else stop // _CHUNK
            return slice(cta * per_cta + first, cta * per_cta + max(last, first))
        chunks = self.chunk_of(np.unique(where))
        if not len(chunks):
            return chunks
        low = int(chunks[0])
        counts = np.bincount(chunks - low)
        present = np.flatnonzero(counts) + low
        full = np.minimum(_CHUNK, size - present % per_cta * _CHUNK)  # a CTA's last chunk may be short
        return present[counts[present - low] == full]

    # endregion

    # region synchronisation edges
    @staticmethod
    def _rows(lanes: np.ndarray):
        """`lanes` as a slice where they are consecutive (a view: no copy), else as they are."""
        first, last = int(lanes[0]), int(lanes[-1])
        return slice(first, last + 1) if last - first + 1 == len(lanes) and (len(lanes) < 2 or lanes[1] > first) \
            else lanes

    def _release(self, lanes: np.ndarray) -> tuple:
        """(clock, fenced, remote): the join of `lanes`' clocks, fenced clocks and knowledge of other CTAs
        (None: none); their own epochs advance past it."""
        rows = self._rows(lanes)
        c = self.clock[rows].max(axis=0)
        f = self.fenced[rows].max(axis=0) if self.fenced_rows[rows].any() else np.zeros(2 * self.threads, np.int32)
        self.clock[lanes, lanes % self.threads] += 1
        return c, f, self._remote_of(lanes)

    def _remote_of(self, lanes: np.ndarray) -> dict | None:
        if not self.remote:
            return None
        joined: dict[int, np.ndarray] = {}
        for lane in np.asarray(lanes).tolist():
            for rank, row in self.remote.get(lane, {}).items():
                joined[rank] = row if rank not in joined else np.maximum(joined[rank], row)
        return joined or None

    def learn(self, lanes, known: dict | None) -> None:
        """`lanes` acquire `known` ({CTA rank: [thread] epochs}) about other CTAs."""
        if not known:
            return
        for lane in np.asarray(lanes).reshape(-1).tolist():
            mine = self.remote.setdefault(lane, {})
            for rank, row in known.items():
                mine[rank] = row if rank not in mine else np.maximum(mine[rank], row)

    @staticmethod
    def join(a: tuple | None, b: tuple) -> tuple:
        """The join of two released (clock, fenced, remote) triples."""
        if a is None:
            return b
        remote = dict(a[2] or {})
        for rank, row in (b[2] or {}).items():
            remote[rank] = row if rank not in remote else np.maximum(remote[rank], row)
        return np.maximum(a[0], b[0]), np.maximum(a[1], b[1]), remote or None

    def _acquire(self, lanes: np.ndarray, c: np.ndarray, f: np.ndarray, r: dict | None = None) -> None:
        self.learn(lanes, r)
        rows = self._rows(lanes)
        fenced = bool(f.any())
        if isinstance(rows, slice):
            np.maximum(self.clock[rows], c, out=self.clock[rows])
            if fenced:
                np.maximum(self.fenced[rows], f, out=self.fenced[rows])
        else:
            self.clock[rows] = np.maximum(self.clock[rows], c)
            if fenced:
                self.fenced[rows] = np.maximum(self.fenced[rows], f)
        if fenced:
            self.fenced_rows[rows] = True

    def barrier(self, participants: np.ndarray, waiters: np.ndarray) -> None:
        """A barrier completed: `participants` arrived (released), `waiters` leave it (acquire)."""
        if len(participants):
            released = self._release(participants)
            if len(waiters):
                self._acquire(waiters, *released)

    def bar_arrived(self, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive at named barrier `key` = (barrier, CTA slot) (bar.sync, bar.arrive, bar.red): a release
        at this point of theirs. A `bar.arrive` thread runs on, so what it does after arriving is not released
        to the waiters, whenever the barrier completes [memory_model.BARRIER_ORDERING]."""
        if len(lanes):
            self.bar_released[key] = self.join(self.bar_released.get(key), self._release(lanes))

    def bar_completed(self, key: tuple[int, int], waiters: np.ndarray) -> None:
        """Named barrier `key` completed: `waiters` acquire what its arrivals released."""
        released = self.bar_released.pop(key, None)
        if released is not None and len(waiters):
            self._acquire(waiters, *released)

    def arrive(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive on the mbarrier at `key`: a release into its pending phase."""
        self.check_init(inst, key, lanes)
        self.pending[key] = self.join(self.pending.get(key), self._release(lanes))

    def arrive_from_peer(self, key: tuple[int, int], lanes: np.ndarray, rank: int, home: int) -> None:
        """`lanes` (all of the CTA of grid rank `rank`) arrive on the mbarrier at `key` of another CTA of their
        cluster (grid rank `home`), through a shared::cluster address: a release into its pending phase, carried
        in the barrier's CTA's frame. Clock columns are threads of one CTA, so the arrivals' clocks travel as what
        the waiters learn of CTA `rank` (`remote`), and what the arrivals knew of CTA `home` as its columns: a
        producer that waits on its own empty barrier, which its peer's consumers release remotely (CUTLASS's
        cluster pipelines), is ordered after their reads of their own slots [memory_model.WRITE_ORDER]."""
        c, f, r = self._release(lanes)
        known = (r or {}).get(home)
        t = self.threads
        clock = known[:t].copy() if known is not None else np.zeros(t, np.int32)
        fenced = np.zeros(2 * t, np.int32)
        if known is not None:
            fenced[t:] = known[t:]
        remote = {k: v for k, v in (r or {}).items() if k != home}
        remote[rank] = np.concatenate([c, f[t:]]) if rank not in remote else \
            np.maximum(remote[rank], np.concatenate([c, f[t:]]))
        self.pending[key] = self.join(self.pending.get(key), (clock, fenced, remote))

    def cluster_barrier(self, members: list[tuple[np.ndarray, int]]) -> None:
        """A cluster barrier phase completed over `members` ([(lanes of one CTA, its grid rank)]): each CTA's
        threads acquire what the others' threads released, as what they know of those CTAs (`remote`); inside
        each CTA the caller's `barrier` orders its own threads."""
        if len(members) < 2:
            return
        t = self.threads
        released = []
        for lanes, rank in members:
            rows = self._rows(lanes)
            row = np.concatenate([self.clock[rows].max(axis=0), self.fenced[rows, t:].max(axis=0)])
            released.append((rank, row, self._remote_of(lanes)))
        for lanes, rank in members:
            known: dict[int, np.ndarray] = {}
            for other, row, remote in released:
                for k, v in [(other, row)] + list((remote or {}).items()):
                    if k != rank:
                        known[k] = v if k not in known else np.maximum(known[k], v)
            self.learn(lanes, known)

    def peer_known(self, lane: int, rank: int) -> np.ndarray:
        """[threads] epochs: what `lane` knows of the threads of the CTA of grid rank `rank` (another CTA)."""
        row = self.remote.get(lane, {}).get(rank)
        return row[:self.threads] if row is not None else np.zeros(self.threads, np.int32)

    def cluster_rows(self, lanes: np.ndarray) -> np.ndarray:
        """[lanes, cluster threads]: what each lane knows of every thread of its cluster, column = the thread's
        position in the cluster (CTA rank x threads + thread): its own clock for its CTA's threads, `peer_known`
        for the others'."""
        t, size = self.threads, self.cluster_size
        rows = np.zeros((len(lanes), size * t), np.int32)
        rank_of = self.peer_frame[1]
        for i, lane in enumerate(np.asarray(lanes).tolist()):
            mine = lane // t
            first = mine - mine % size
            for slot in range(first, first + size):
                columns = slice((slot - first) * t, (slot - first + 1) * t)
                rows[i, columns] = self.clock[lane] if slot == mine else self.peer_known(lane, rank_of(slot))
        return rows

    def phase_completed(self, key: tuple[int, int]) -> None:
        """The pending phase of the mbarrier at `key` completed: its releases are published to waiters."""
        new = self.pending.pop(key, None)
        if new is None:
            return
        self.published[key] = self.join(self.published.get(key), new)

    def waited(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` waited successfully on the mbarrier at `key`: they acquire its completed phases."""
        self.check_init(inst, key, lanes)
        done = self.published.get(key)
        if done is not None:
            self._acquire(lanes, *done)

    def init(self, inst, key: tuple[int, int], lane: int) -> None:
        """`mbarrier.init` by `lane`: a write of the barrier that its later users must be ordered after."""
        self.inits[key] = (lane, int(self.clock[lane, lane % self.threads]), inst.line)
        self.pending.pop(key, None)
        self.published.pop(key, None)

    def check_init(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        record = self.inits.get(key)
        if record is None or not self.races:
            return
        lane, epoch, line = record
        unseen = self.clock[lanes, lane % self.threads] < epoch
        if unseen.any():
            i = int(np.argmax(unseen))
            raise self.hazard(inst, f"uses the mbarrier at shared address {key[1]:#x}, which the mbarrier.init at line "
                                    f"{line} ({self.describe_lane(lane)}) initialises, with no synchronisation "
                                    "ordering the init before this use (race: missing bar.sync after mbarrier.init)",
                              int(lanes[i]))

    def fence(self, lanes: np.ndarray, shared: bool = True, global_: bool = True) -> None:
        """fence.proxy.async by `lanes`: every generic write that happens before it is made visible to the
        async proxy along any path through it, in the state spaces it names (`shared`, `global_`: both for a
        fence.proxy.async without one)."""
        t = self.threads
        for on, columns in ((shared, slice(0, t)), (global_, slice(t, 2 * t))):
            if on:
                self.fenced[lanes, columns] = np.maximum(self.fenced[lanes, columns], self.clock[lanes])
                self.fenced_rows[lanes] = True
        if global_ and self.remote:  # other CTAs' stores known to happen before: fenced too (new rows: shared)
            for lane in np.asarray(lanes).reshape(-1).tolist():
                known = self.remote.get(lane)
                for rank, row in (known or {}).items():
                    known[rank] = np.concatenate([row[:t], np.maximum(row[t:], row[:t])])
        self.clock[lanes, lanes % self.threads] += 1

    def global_fenced(self, lanes: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """The epochs of `threads` [lanes, k] (of each lane's CTA) whose generic global writes a
        fence.proxy.async on a path into each lane has made visible to the async proxy."""
        return self.fenced[lanes[:, None], self.threads + threads]

    # endregion
    # region accesses
    def reads_completed(self, flat: np.ndarray | list, lanes: np.ndarray, inst, group: int, reader: str = "",
                        by: str = "the wgmma") -> None:
        """A wait of `lanes` (a wgmma.wait_group of warpgroup `group`, or the issuing thread's
        cp.async.bulk.wait_group covering a bulk store's or reduction's read: `reader` names it, in the row
        `group` the caller keeps for such reads, "... read until its <wait>") completed async-proxy reads of `flat`: a later write of those
        bytes must happen after this point of one of the lanes, whatever order the executor ran them in. `flat`
        may be a list of pieces, each an index array or a range (a slice)."""
        reader = reader or f"a wgmma of warpgroup {group} read until its wgmma.wait_group"
        self.completions.append((lanes, self.clock[lanes, lanes % self.threads].copy(), inst.line, reader, by))
        self.completed_groups.append((0, -1))
        if group >= len(self.r_async):
            self.r_async = np.vstack([self.r_async, np.zeros((group + 1 - len(self.r_async), self.shared), np.int32)])
        for piece in flat if isinstance(flat, list) else (flat,):
            self.r_async[group, piece] = len(self.completions)

    def wgmma_groups_completed(self, w: int, first: int, last: int, lanes: np.ndarray, inst) -> None:
        """A wgmma.wait_group of `lanes` completed wgmma groups `first`..`last` of warpgroup `w` (of the batch):
        the shared bytes whose last wgmma read belongs to one of them (`wgmma_reads`) were read until this point
        of one of the lanes; a later write of them must happen after it (`_after_async_reads`). A group is one
        per warpgroup, so any thread's wait that completed it frees its bytes [memory_model.WGMMA_GROUP_PER_WARPGROUP]:
        a group an earlier wait of other warps completed is free after either wait (CUTLASS's and FA3's
        consumer_release signals from one thread after its own warp's wait, whichever warp waited first)."""
        if last >= self.wgmma_groups.shape[1]:
            grown = np.zeros((len(self.wgmma_groups), max(2 * self.wgmma_groups.shape[1], last + 1)), np.int32)
            grown[:, :self.wgmma_groups.shape[1]] = self.wgmma_groups
            self.wgmma_groups = grown
        groups = self.wgmma_groups[w, first:last + 1]
        local = w % self._per_cta()
        record = (lanes, self.clock[lanes, lanes % self.threads].copy(), inst.line,
                  f"a wgmma of warpgroup {local} read until its wgmma.wait_group", "the wgmma")
        for c in np.unique(groups).tolist():
            if not c:  # completed by no earlier wait: by this one
                self.completions.append(record)
                self.completed_groups.append((first, last))
                groups[groups == 0] = len(self.completions)
                continue
            readers, epochs, line, reader, by = self.completions[c - 1]
            merged = (np.concatenate([readers, lanes]), np.concatenate([epochs, record[1]]), line, reader, by)
            low, high = self.completed_groups[c - 1]
            if first <= low and high <= last:  # this wait completed every group of that one: either frees them
                self.completions[c - 1] = merged
            else:  # only some: those groups get a completion of their own
                self.completions.append(merged)
                self.completed_groups.append((max(low, first), min(high, last)))
                groups[groups == c] = len(self.completions)

    def _async_ends(self, index: np.ndarray) -> np.ndarray:
        """[reader row, row of `index`, byte]: 1 + the index into `completions` of each completed async read of
        the bytes (a wgmma's, through its group and the byte's chunk: one row per warpgroup of the CTA; a bulk
        store's: `r_async`)."""
        ends = self.r_async[:, index]
        if self.wgmma_reads is None:
            return ends
        last = self.wgmma_reads[:, self.chunk_of(index)]
        top = int(last.max(initial=0))
        if not top:
            return ends
        # lookup[w, 1 + group]: the completion of the group (0: none, or no read)
        per_cta, known = self._per_cta(), min(top, self.wgmma_groups.shape[1])
        lookup = np.zeros((len(self.wgmma_groups), top + 1), np.int32)
        lookup[:, 1:known + 1] = self.wgmma_groups[:, :known]
        done = lookup[index[None] // self._cta_bytes() * per_cta + np.arange(per_cta)[:, None, None], last]
        return np.concatenate([done, ends])

    def async_write(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, span: slice | None = None,
                    known: np.ndarray | None = None) -> None:
        """A copy issued by `lanes` writes `flat`: each completed async read of those bytes, and the last generic
        read and write of each byte (a producer refilling a slot that threads still read or transpose), must
        happen before its issue, whatever order the executor ran them in. `span`: the range `flat` fills, when
        it fills one: the records are read as a range, and only a range holding some is walked byte by byte.
        `known` [threads]: for bytes of another CTA of the cluster (a multicast into a peer), what the issuing
        thread knows of that CTA's threads (`peer_known`) [memory_model.WRITE_ORDER]; every check, on the range
        path as on the byte path, judges by it."""
        clocks = self.clock[lanes].max(axis=0)[None] if known is None else known[None]
        self._after_async_reads(inst, lanes[:1], flat[None, :], what, clocks, span)
        if self.races and flat.size:
            index = flat[None, :]
            rows = None if known is None else clocks
            if span is None or self.reads.any_in(span):
                self._check_reads(inst, lanes[:1], index, f"{what} writes", rows)
            if span is None or self.w_clock[span].any():
                self._check(inst, lanes[:1], index, self.w_lane, self.w_clock, self.w_line, "wrote", f"{what} writes",
                            rows)
            self._after_peer_reads(inst, lanes[:1], index, f"{what} writes")
        self.async_written(flat if span is None else span)

    def _after_async_reads(self, inst, lanes: np.ndarray, index: np.ndarray, what: str, clocks: np.ndarray,
                           span: slice | None = None) -> None:
        """Each write of `index` [rows, bytes] (row i by `lanes[i]`, whose clock is `clocks[i]`) must happen after
        the wgmma.wait_group that completed every async read of its bytes, of each warpgroup: checked row by row,
        as one instruction of many threads (a store of two warpgroups at once) is many writes. `span`: the range
        the one row of `index` fills, when it fills one (read as a range; a finding is located byte by byte)."""
        if not (self.races and self.completions):
            return  # r_async is all zero: no completed async read recorded
        if span is not None:
            for c in self._span_completions(span):
                readers, epochs = self.completions[c - 1][:2]
                if not (clocks[0, readers % self.threads] >= epochs).any():
                    self._after_async_reads(inst, lanes, index, what, clocks)  # raises, naming the byte
            self._forget_async_reads(span)
            return
        ends = self._async_ends(index)  # [reader row, row, byte]
        low, high = int(ends.min(initial=0)), int(ends.max(initial=0))
        if not high:
            return
        present = [high] if low == high else np.flatnonzero(np.bincount(ends.reshape(-1))).tolist()  # no sort
        for c in present:
            if not c:
                continue
            readers, epochs, line, reader, by = self.completions[c - 1]
            rows = np.flatnonzero((ends == c).any(axis=(0, 2)))
            ordered = (clocks[rows][:, readers % self.threads] >= epochs).any(axis=1)
            if not ordered.all():
                r = int(rows[np.argmin(ordered)])
                byte = int(index[r, np.argmax((ends[:, r] == c).any(axis=0))])
                raise self.hazard(inst, f"{what} overwrites {self.where(byte)}, which {reader} at line {line}, "
                                        "and no synchronisation orders that wait before this "
                                        f"write (race: the slot was released before {by} reading it completed)",
                                  int(lanes[r]))
        self._forget_async_reads(index.reshape(-1))

    def _forget_async_reads(self, where: np.ndarray | slice) -> None:
        """The bytes `where` were written after their completed async reads: those no longer apply."""
        self.r_async[:, where] = 0
        if self.wgmma_reads is not None:  # no wgmma reads them now (`asynchrony` refuses writes before)
            touched = self.chunk_span(where) if isinstance(where, slice) else self.chunk_of(where)
            if self.wgmma_reads[:, touched].any():
                self.wgmma_reads[:, self._whole_chunks(where)] = 0

    def _span_completions(self, span: slice) -> set[int]:
        """The completed async reads (1 + index into `completions`) of some byte of the range `span` (one CTA's),
        found row by row: a row whose bytes agree (a slot read by one group, or by none) costs no gather."""
        found: set[int] = set()
        if span.stop <= span.start:
            return found
        for row, low, high in _row_bounds(self.r_async[:, span]):
            found.update((low,) if low == high else _present(row, low))
        if self.wgmma_reads is not None:
            per_cta = self._per_cta()
            first = span.start // self._cta_bytes() * per_cta
            width = self.wgmma_groups.shape[1]
            for r, (row, low, high) in enumerate(_row_bounds(self.wgmma_reads[:, self.chunk_span(span)])):
                for last in (low,) if low == high else _present(row, low):
                    if 0 < last <= width:
                        found.add(int(self.wgmma_groups[first + r, last - 1]))
        found.discard(0)
        return found

    def async_written(self, flat: np.ndarray) -> None:
        """An asynchronous copy wrote `flat`: the generic records no longer apply."""
        self.w_clock[flat] = 0
        self.reads.clear(flat)
        if self.peer_read_any:
            self.peer_reads.clear(flat)

    def landed(self, lanes: np.ndarray, index: np.ndarray, lines: np.ndarray, through_mbarrier: bool) -> None:
        """cp.async copies of `lanes` (from the instructions at `lines`) completed into `index` [lanes, bytes] at
        the issuing threads' present point: a write by them, as a generic store is; `through_mbarrier`: completed
        by a cp.async.mbarrier.arrive, which makes them visible to the async proxy of the threads the completion
        happens before [memory_model.CP_ASYNC_PROXY], not by a cp.async.wait_group."""
        self.w_lane[index] = lanes[:, None]
        self.w_clock[index] = self.clock[lanes, lanes % self.threads][:, None]
        self.w_line[index] = lines[:, None]
        self.w_mbarrier[index] = through_mbarrier
        self.reads.clear(index)
        if self.peer_read_any:
            self.peer_reads.clear(index)

    def _peer_rows(self, lanes: np.ndarray, index: np.ndarray):
        """For accesses of a peer CTA's shared memory (a shared::cluster address through `mapa`, in a cluster):
        (the rows of `lanes` that access a peer's bytes, each such lane's clock in that peer's frame:
        `peer_known`), or None when every row is the lane's own CTA's."""
        if self.peer_frame is None or not index.size:
            return None
        size, rank_of = self.peer_frame
        slots = index[:, 0] // size
        foreign = slots != lanes // self.threads
        if not foreign.any():
            return None
        rows = np.stack([self.peer_known(int(lane), rank_of(int(slot)))
                         for lane, slot in zip(lanes[foreign], slots[foreign])])
        return foreign, rows

    def write(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """A generic store of `lanes` at `index` [lanes, bytes] (a row of a peer's bytes, a distributed shared
        memory store, is judged by what its lane knows of the peer's threads [memory_model.WRITE_ORDER])."""
        if self.races:
            peers = self._peer_rows(lanes, index)
            if peers is not None:
                foreign, rows = peers
                lanes_f, index_f = lanes[foreign], index[foreign]
                self._check(inst, lanes_f, index_f, self.w_lane, self.w_clock, self.w_line, "wrote", "writes", rows)
                self._check_reads(inst, lanes_f, index_f, "writes", rows)
                if self.completions:
                    self._after_async_reads(inst, lanes_f, index_f, "the store", rows)
                own = ~foreign
                self._write_checks(inst, lanes[own], index[own])
            else:
                self._write_checks(inst, lanes, index)
            self._after_peer_reads(inst, lanes, index, "writes")
        self.w_lane[index] = lanes[:, None]
        self.w_clock[index] = self.clock[lanes, lanes % self.threads][:, None]
        self.w_line[index] = inst.line
        self.w_mbarrier[index] = False
        self.reads.clear(index)
        if self.peer_read_any:
            self.peer_reads.clear(index)

    def _write_checks(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        if len(lanes):
            self._check(inst, lanes, index, self.w_lane, self.w_clock, self.w_line, "wrote", "writes")
            self._check_reads(inst, lanes, index, "writes")
            if self.completions:
                self._after_async_reads(inst, lanes, index, "the store", self.clock[lanes])

    def read(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """A generic load of `lanes` at `index` [lanes, bytes] (of a peer's bytes: judged in the peer's frame)."""
        if not self.races:
            return
        peers = self._peer_rows(lanes, index)
        if peers is not None:
            foreign, rows = peers
            self._check(inst, lanes[foreign], index[foreign], self.w_lane, self.w_clock, self.w_line, "wrote", "reads",
                        rows)
            self._peer_read(inst, lanes[foreign], index[foreign])
            lanes, index = lanes[~foreign], index[~foreign]
            if not len(lanes):
                return
        self._check(inst, lanes, index, self.w_lane, self.w_clock, self.w_line, "wrote", "reads")
        self.reads.record(lanes, index, self.clock[lanes, lanes % self.threads], inst.line, self.clock)

    def _peer_read(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """`lanes` read `index` [lanes, bytes] of a peer CTA's shared memory (`ld.shared::cluster` through `mapa`).
        Kept apart from the CTA's own readers (`reads`, whose columns are the threads of one CTA): `peer_reads`
        has a column per thread of the cluster (`cluster_rows`), so a later write of those bytes, by the owner or
        by an asynchronous copy, is judged by what the writer knows of the reading peer's threads
        [memory_model.WRITE_ORDER]."""
        if self.peer_reads is None:
            self.peer_reads = ReadClocks(self.shared, self.cluster_size * self.threads)
        clocks = np.zeros((self.lanes, self.cluster_size * self.threads), np.int32)  # rows of the readers only
        unique = np.unique(lanes)
        clocks[unique] = self.cluster_rows(unique)
        self.peer_reads.record(lanes, index, self.clock[lanes, lanes % self.threads], inst.line, clocks)
        self.peer_read_any = True

    def _after_peer_reads(self, inst, lanes: np.ndarray, index: np.ndarray, does: str) -> None:
        """Every peer's read of `index` [lanes, bytes] since its last write must happen before the writing lane."""
        if not self.peer_read_any:
            return
        reads = self.peer_reads
        if not (reads.clock[index].any() or (reads.shared and reads.row[index].any())):
            return
        found = reads.unordered(lanes, index, self.clock, self.cluster_rows(lanes))
        if found is not None:
            i, j, reader, line = found
            raise self.hazard(inst, f"{does} {self.where(int(index[i, j]))}, which the instruction at line {line} "
                                    f"({self.describe_lane(reader)}) read through a shared::cluster address, and no "
                                    "synchronisation orders the two (race: a cluster barrier, or a release of the "
                                    "peer's read on an mbarrier this thread waits on, is missing)", int(lanes[i]))

    def _check_reads(self, inst, lanes: np.ndarray, index: np.ndarray, does: str, rows: np.ndarray | None = None
                     ) -> None:
        """Every generic read of `index` [lanes, bytes] since its last write must happen before `lanes` (whose
        clocks in the bytes' CTA's frame are `rows` when it is another CTA's)."""
        found = self.reads.unordered(lanes, index, self.clock, rows)
        if found is not None:
            i, j, reader, line = found
            raise self.hazard(inst, f"{does} {self.where(int(index[i, j]))}, which the instruction at line {line} "
                                    f"({self.describe_lane(reader)}) read, and no synchronisation orders the two "
                                    "(race: a bar.sync or an mbarrier wait between them is missing)", int(lanes[i]))

    def _check(self, inst, lanes, index, who, when, line, did: str, does: str, rows: np.ndarray | None = None
               ) -> None:
        epochs = when[index]
        if not epochs.any():
            return
        other = who[index]
        if rows is None:
            unordered = epochs > self.clock[lanes[:, None], other % self.threads]
            if self.peer_frame is not None:  # a peer's store into this CTA (distributed shared memory)
                cross = (epochs > 0) & (other // self.threads != (lanes // self.threads)[:, None])
                if cross.any():
                    rank_of = self.peer_frame[1]
                    ii, jj = np.nonzero(cross)
                    slots = other[ii, jj] // self.threads
                    for i, slot in np.unique(np.stack([ii, slots], axis=1), axis=0).tolist():
                        sel = (ii == i) & (slots == slot)
                        known = self.peer_known(int(lanes[i]), rank_of(slot))
                        at = (ii[sel], jj[sel])
                        unordered[at] = epochs[at] > known[other[at] % self.threads]
        else:
            unordered = epochs > rows[np.arange(len(lanes))[:, None], other % self.threads]
        if unordered.any():
            i, j = np.unravel_index(np.argmax(unordered), unordered.shape)
            b = int(index[i, j])
            raise self.hazard(inst, f"{does} {self.where(b)}, which the instruction at line {int(line[b])} "
                                    f"({self.describe_lane(int(other[i, j]))}) {did}, and no synchronisation orders "
                                    "the two (race: a bar.sync or an mbarrier wait between them is missing)",
                              int(lanes[i]))

    def async_read(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, span: slice | None = None,
                   hull: slice | None = None, own_rows: bool = False) -> None:
        """The async proxy reads `flat` for `lanes`: each generic write of those bytes needs a
        fence.proxy.async on a happens-before path into every issuing warp (a path into one of its threads: the
        warp issues the copy or its part of the wgmma as one). A wgmma is issued by the four warps of its
        warpgroup, each `.sync.aligned` across its own warp only, and every warp reads the whole B operand: a
        store by one warp needs a path (a named barrier) into each of the others; the writer's own fence does not
        order it before another warp's read. `own_rows`: `flat` is a shared-memory A operand, row by row, of the
        one warpgroup `lanes`: each warp reads its own quarter of the rows [memory_model.WGMMA_A_ROWS_PER_WARP],
        so the path is needed into that warp only. `span`: the range `flat` fills, when it fills one (no generic
        write in it: nothing to check, decided without a gather); `hull`: a range holding `flat`, the same way.
        Bytes a cp.async.mbarrier.arrive completed need no fence, only the completion happening before the read
        (unless `strict_proxy`) [memory_model.CP_ASYNC_PROXY]."""
        if span is not None and not self.w_clock[span].any():
            return
        if hull is not None and not self.w_clock[hull].any():
            return
        epochs = self.w_clock[flat]
        if not epochs.any():
            return
        writers = self.w_lane[flat]
        per_warp = self._per_warp(self.fenced[lanes, :self.threads])
        owner = None
        if own_rows and len(per_warp) == facts.WARPS_PER_WARPGROUP and not len(flat) % facts.WARPS_PER_WARPGROUP:
            owner = np.arange(len(flat)) * facts.WARPS_PER_WARPGROUP // len(flat)  # the warp of each byte's row
            bad = epochs > per_warp[owner, writers % self.threads]
        else:
            bad = epochs > per_warp.min(axis=0)[writers % self.threads]
        if not bad.any():
            return
        completed = bad & self.w_mbarrier[flat] if not self.strict_proxy else None
        if completed is not None and completed.any():  # visible to the async proxy of whoever it happens before
            known = self._per_warp(self.clock[lanes])
            column = writers % self.threads
            seen = known[owner, column] if owner is not None else known.min(axis=0)[column]
            bad &= ~(completed & (epochs <= seen))
            if not bad.any():
                return
        i = int(np.argmax(bad))
        writer, b = int(writers[i]), int(flat[i])
        warp = int(owner[i]) if owner is not None else int(np.argmin(per_warp[:, writer % self.threads]))
        reader = int(lanes[warp * facts.WARP_SIZE]) if len(per_warp) < len(lanes) else int(lanes[warp])
        ordered = int(self.clock[reader, writer % self.threads]) >= int(epochs[i])
        why = ("no fence.proxy.async lies between the store and this read on any synchronisation path" if ordered
               else "no synchronisation orders the store before this read")
        raise self.hazard(inst, f"{what} reads {self.where(b)}, which {self.describe_lane(writer)} stored through "
                                "the generic proxy and has not made visible to the async proxy (missing "
                                f"fence.proxy.async after the store at line {int(self.w_line[b])}: {why})",
                          reader)

    @staticmethod
    def _per_warp(rows: np.ndarray) -> np.ndarray:
        """Per issuing warp, the best of its lanes' rows (`rows` [lanes, threads]; lanes in whole warps, else
        one row per lane)."""
        if len(rows) % facts.WARP_SIZE:
            return rows
        return rows.reshape(-1, facts.WARP_SIZE, rows.shape[1]).max(axis=1)

    # endregion


def _row_bounds(rows: np.ndarray):
    """(row, least value, greatest value) of each row of `rows` [rows, bytes > 0], the bounds found for all rows
    in two reductions."""
    return zip(rows, rows.min(axis=1).tolist(), rows.max(axis=1).tolist())


def _present(values: np.ndarray, low: int) -> list[int]:
    """The distinct values of `values` (small non-negative integers, the least `low`), ascending: a count, not a
    sort."""
    return (np.flatnonzero(np.bincount(values - low if low else values)) + low).tolist()


__all__ = ["HappensBefore"]
