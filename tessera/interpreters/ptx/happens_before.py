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
CTA's bytes by its peers (`ld.shared::cluster` through `mapa`) are kept apart; their records and checks are
`PeerAccesses`' (`peer_accesses`).

Other CTAs (`remote`): global memory (`global_order`) is shared by every CTA of the grid, and only atomics
and strong accesses with release/acquire semantics order accesses of different CTAs. What a lane knows of
another CTA's threads (rank -> [thread] epochs, acquired from a release of that CTA) travels with the
clocks along every edge above; it is empty, and costs nothing, until a kernel acquires across CTAs.

Proxies: a generic write is visible to an async-proxy read (a TMA or bulk store, a wgmma operand) when a
`fence.proxy.async` lies on a causality path between them. `fenced[t, u]`, kept here and carried along every edge
that carries `clock`, records the fences; the check of an async-proxy read is `ProxyFenceChecks`'
(`proxy_fences`, whose docstring has the rule).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.async_records import AsyncRecords
from tessera.interpreters.ptx.byte_ranges import cta_hulls, meets_any, with_range
from tessera.interpreters.ptx.peer_accesses import PeerAccesses
from tessera.interpreters.ptx.proxy_fences import ProxyFenceChecks
from tessera.interpreters.ptx.read_clocks import ReadClocks
from tessera.interpreters.ptx.sync_edges import SyncEdges
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

_CHUNK = facts.SWIZZLE_CHUNK_BYTES


class HappensBefore(SyncEdges, AsyncRecords, PeerAccesses, ProxyFenceChecks):
    """Vector clocks of a machine's lanes and the per-byte access records of its shared memory; see the
    module docstring. `hazard(inst, message, lane)` builds the error to raise; `where(flat)` names a byte.
    The synchronisation edges are `SyncEdges`' (`sync_edges`), the asynchronous accesses `AsyncRecords'`
    (`async_records`), the reads of a peer CTA's bytes `PeerAccesses`' (`peer_accesses`), the check of an
    async-proxy read `ProxyFenceChecks`' (`proxy_fences`); this class holds the records and checks the generic
    accesses."""

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
        self.peer_strong_reads: ReadClocks | None = None  # ... strong ones of a scope wider than .cta (the same)
        self.strong_reads: ReadClocks | None = None  # strong loads since the last write (see `strong_read`)
        self.cta_reads: ReadClocks | None = None  # those of them of scope .cta (see `strong_read`)
        self.reset()

    def reset(self) -> None:
        n, s = self.lanes, self.shared
        if not hasattr(self, "clock"):  # allocated once, cleared for each batch
            self.wgmma_reads: np.ndarray | None = None  # set by asynchrony at the first wgmma read
            self.clock = np.zeros((n, self.threads), np.int32)  # [lane, thread of its CTA]
            # [lane]: the flat position in `clock` of its own epoch, clock[lane, lane % threads] (`own_epochs`)
            self.own_flat = np.arange(n, dtype=np.int64) * self.threads + np.arange(n, dtype=np.int64) % self.threads
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
            self.w_atomic = np.zeros(s, bool)  # the last generic write was an atom/red (`write`)
            self.w_cta = np.zeros(s, bool)  # ... of scope .cta: morally strong inside its CTA only
            self.reads = ReadClocks(s, self.threads)  # the generic reads since the last write
            # [warpgroup of its CTA, byte]: 1 + index into `completions`, the async read by that warpgroup that
            # ended last (one row per warpgroup: two warpgroups' wgmmas read the same bytes, unordered)
            self.r_async = np.zeros((1, s), np.int32)
        else:
            rows = np.flatnonzero(self.fenced_rows)  # the only rows of `fenced` that may hold a nonzero
            if len(rows) == n:
                self.fenced.fill(0)
            elif len(rows):
                self.fenced[rows] = 0
            cleared = [self.clock, self.fenced_rows]
            if self.r_any:
                cleared.append(self.r_async)
            for array in cleared:
                array.fill(0)
            for low, high in self.w_spans:  # (the only bytes whose write records may be nonzero)
                for array in (self.w_clock, self.w_mbarrier, self.w_atomic, self.w_cta):
                    array[low:high] = 0
            self.reads.reset()
        for reads in (self.peer_reads, self.peer_strong_reads):
            if reads is not None:
                reads.reset()
        for reads in (self.strong_reads, self.cta_reads):
            if reads is not None:
                reads.reset()
        self.peer_read_any = False  # some byte holds a peer's read (plain or strong) since its last write
        self.strong_read_any = False  # some byte holds a strong load since its last write
        self.cta_read_any = False  # ... a strong load of scope .cta
        self.w_cta_any = False  # some byte of `w_cta` may be true
        self.w_any = False  # some byte of `w_clock` may be nonzero (a generic write since the last reset)
        # ranges [low, high) holding every byte whose write records (`w_clock`, `w_mbarrier`, `w_atomic`, `w_cta`)
        # may be nonzero: each CTA's hull of a generic write or a cp.async landing since the reset (`note_written`)
        self.w_spans: list[tuple[int, int]] = []
        self.r_any = False  # some byte of `r_async` may be nonzero (`reads_completed` ran since the last reset)
        self.clock.reshape(-1)[self.own_flat] = 1
        # (CTA start, stop, thread start, stop) -> [low, high]: bounds of a block's clock rows (`sync_edges`)
        self.block_bounds: dict[tuple[int, int, int, int], list] = {}
        self.pending: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.published: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.bar_released: dict[tuple[int, int], tuple] = {}  # (barrier, CTA slot) -> its arrivals' releases
        self.bar_arrivals: dict[tuple[int, int], int] = {}  # ... and how many lanes made them (`bar_completed`)
        # cluster (index in the batch) -> {CTA grid rank: its .release arrivals' releases} (`cluster_arrived`), of
        # the barrier's pending phase, and of its completed phases
        self.cluster_pending: dict[int, dict[int, tuple]] = {}
        self.cluster_published: dict[int, dict[int, tuple]] = {}
        self.inits: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.inits_seen: set[tuple] = set()  # (keys, block) whose `_inits_seen` passed since the last init
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

    # region accesses
    def write(self, inst, lanes: np.ndarray, index: np.ndarray, atomic: bool = False,
              cta_scoped: bool = False, hulls: list[slice] | None = None) -> None:
        """A generic store of `lanes` at `index` [lanes, bytes] (a row of a peer's bytes, a distributed shared
        memory store, is judged by what its lane knows of the peer's threads [memory_model.WRITE_ORDER]).
        `atomic`: an atom/red or a strong store, morally strong with the other atomic and strong writes
        [memory_model.MORALLY_STRONG], so it is not judged against an earlier one of them, but a plain access on
        either side of it is; `cta_scoped` (.cta), morally strong with accesses of its own CTA only. `hulls`:
        `byte_ranges.cta_hulls` of `index`, where the caller has them (`_after_async_reads`)."""
        if self.races:
            peers = self._peer_rows(lanes, index)
            if peers is not None:
                foreign, rows = peers
                lanes_f, index_f = lanes[foreign], index[foreign]
                self._check(inst, lanes_f, index_f, self.w_lane, self.w_clock, self.w_line, "wrote", "writes", rows,
                            atomic, cta_scoped)
                self._check_reads(inst, lanes_f, index_f, "writes", rows)
                if self.strong_read_any and (not atomic or cta_scoped):  # the owner's strong reads: another CTA's
                    self._check_reads(inst, lanes_f, index_f, "writes", rows, reads=self.strong_reads)
                elif self.cta_read_any:  # a strong write of a wider scope: the owner's .cta strong reads
                    self._check_reads(inst, lanes_f, index_f, "writes", rows, reads=self.cta_reads)
                if self.completions:
                    self._after_async_reads(inst, lanes_f, index_f, "the store", rows)
                own = ~foreign
                self._write_checks(inst, lanes[own], index[own], atomic, cta_scoped)
            else:
                self._write_checks(inst, lanes, index, atomic, cta_scoped, hulls)
            self._after_peer_reads(inst, lanes, index, "writes", atomic, cta_scoped)
        self.w_atomic[index] = atomic
        if cta_scoped or self.w_cta_any:  # (kept untouched, all false, by kernels without .cta strong stores)
            self.w_cta[index] = cta_scoped
            self.w_cta_any |= cta_scoped
        self.w_lane[index] = lanes[:, None]
        self.w_clock[index] = self.own_epochs(lanes)[:, None]
        self.note_written(index, hulls)
        self.w_line[index] = inst.line
        self.w_mbarrier[index] = False
        self.clear_reads(index)

    def note_written(self, index: np.ndarray, hulls: list[slice] | None = None) -> None:
        """The write records of the bytes `index` (flat, any shape) become nonzero: their CTAs' hulls (`hulls`, where
        the caller has them, `byte_ranges.cta_hulls`) join `w_spans` (`byte_ranges.with_range`)."""
        self.w_any = True
        flat = np.asarray(index).reshape(-1)
        if not flat.size:
            return
        hulls = cta_hulls(flat, self._cta_bytes()) if hulls is None else hulls
        spans = [(int(flat.min()), int(flat.max()) + 1)] if hulls is None else [(h.start, h.stop) for h in hulls]
        for low, high in spans:
            self.w_spans = with_range(self.w_spans, low, high)

    def written_in(self, span: slice) -> bool:
        """Whether some byte of the range `span` holds a generic write record (`w_clock`): only a range meeting
        `w_spans` may, and a count of it decides."""
        return self.w_any and meets_any(self.w_spans, span.start, span.stop) and \
            bool(np.count_nonzero(self.w_clock[span]))

    def own_epochs(self, lanes: np.ndarray) -> np.ndarray:
        """Each of `lanes`' own epoch, clock[lane, lane % threads], through its flat position (`own_flat`): two
        gathers, no remainder and no 2-D index (a store of a batch's lanes, or a release, asks it of 1,024)."""
        return self.clock.reshape(-1)[self.own_flat[lanes]]

    def clear_reads(self, index) -> None:
        """A write of `index` (flat bytes or a slice): the reads recorded since the last one no longer apply."""
        self.reads.clear(index)
        if self.peer_read_any:
            for reads in (self.peer_reads, self.peer_strong_reads):
                if reads is not None:
                    reads.clear(index)
        if self.strong_read_any:
            self.strong_reads.clear(index)
        if self.cta_read_any:
            self.cta_reads.clear(index)

    def _write_checks(self, inst, lanes: np.ndarray, index: np.ndarray, atomic: bool = False,
                      cta_scoped: bool = False, hulls: list[slice] | None = None) -> None:
        if len(lanes):
            self._check(inst, lanes, index, self.w_lane, self.w_clock, self.w_line, "wrote", "writes", None, atomic,
                        cta_scoped)
            self._check_reads(inst, lanes, index, "writes")
            if self.strong_read_any and not atomic:  # a plain store after a strong load [memory_model.DATA_RACE]
                self._check_reads(inst, lanes, index, "writes", reads=self.strong_reads)
            if self.completions:
                self._after_async_reads(inst, lanes, index, "the store", None, hulls=hulls)

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
        self.reads.record(lanes, index, self.own_epochs(lanes), inst.line, self.clock)

    def strong_read(self, inst, lanes: np.ndarray, index: np.ndarray, cta_scoped: bool = False) -> None:
        """A strong load (.relaxed/.acquire/.volatile) of `lanes` at `index` [lanes, bytes]: morally strong with an
        atomic or strong write, so judged only against the last write when that was a plain one, and recorded apart
        from the plain loads (`strong_reads`), for a later plain store only [memory_model.DATA_RACE] (the polls of a
        flag are synchronisation: a strong store after them is no race). A load of a peer's bytes (distributed
        shared memory) is recorded in the peer's frame: a .cta one (`cta_scoped`), morally strong with no access of
        the peer, as a plain peer read, so any later write of the peer's is judged against it; a wider one in
        `peer_strong_reads`, so a later plain or .cta write of another CTA is [memory_model.MORALLY_STRONG]. The
        owner's .cta load of its own bytes in a cluster is kept apart too (`cta_reads`), which a peer's strong
        store must follow."""
        if not self.races:
            return
        peers = self._peer_rows(lanes, index)
        if peers is not None:
            foreign, rows = peers
            self._check(inst, lanes[foreign], index[foreign], self.w_lane, self.w_clock, self.w_line, "wrote", "reads",
                        rows, atomic=True, cta_scoped=cta_scoped)
            self._peer_read(inst, lanes[foreign], index[foreign], strong=not cta_scoped)
            lanes, index = lanes[~foreign], index[~foreign]
            if not len(lanes):
                return
        self._check(inst, lanes, index, self.w_lane, self.w_clock, self.w_line, "wrote", "reads", atomic=True,
                    cta_scoped=cta_scoped)
        if self.strong_reads is None:
            self.strong_reads = ReadClocks(self.shared, self.threads)
        self.strong_reads.record(lanes, index, self.own_epochs(lanes), inst.line, self.clock)
        self.strong_read_any = True
        if cta_scoped and self.peer_frame is not None:  # morally strong with no peer's write (distributed memory)
            if self.cta_reads is None:
                self.cta_reads = ReadClocks(self.shared, self.threads)
            self.cta_reads.record(lanes, index, self.own_epochs(lanes), inst.line, self.clock)
            self.cta_read_any = True

    def _check_reads(self, inst, lanes: np.ndarray, index: np.ndarray, does: str, rows: np.ndarray | None = None,
                     reads: ReadClocks | None = None) -> None:
        """Every generic read of `index` [lanes, bytes] since its last write (in `reads`: the plain ones by
        default) must happen before `lanes` (whose clocks in the bytes' CTA's frame are `rows` when it is another
        CTA's)."""
        found = (self.reads if reads is None else reads).unordered(lanes, index, self.clock, rows)
        if found is not None:
            i, j, reader, line = found
            raise self.hazard(inst, f"{does} {self.where(int(index[i, j]))}, which the instruction at line {line} "
                                    f"({self.describe_lane(reader)}) read, and no synchronisation orders the two "
                                    "(race: a bar.sync or an mbarrier wait between them is missing)", int(lanes[i]))

    def _check(self, inst, lanes, index, who, when, line, did: str, does: str, rows: np.ndarray | None = None,
               atomic: bool = False, cta_scoped: bool = False) -> None:
        epochs = when[index]
        if not any_set(epochs):
            return
        other = who[index]
        if atomic:  # an atomic against an atomic write: morally strong, never a race, unless a .cta scope of either
            strong = self.w_atomic[index]  # holds no thread of the other's CTA (distributed shared memory)
            if cta_scoped or self.w_cta_any and any_set(self.w_cta[index]):
                strong = strong & ((other // self.threads == (lanes // self.threads)[:, None])
                                   | ~(self.w_cta[index] | cta_scoped))
            epochs = np.where(strong, 0, epochs)
        if rows is None:
            unordered = epochs > self.clock[lanes[:, None], other % self.threads]
            if self.peer_frame is not None:  # a peer's store into this CTA (distributed shared memory)
                cross = (epochs > 0) & (other // self.threads != (lanes // self.threads)[:, None])
                if any_set(cross):
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
        if any_set(unordered):
            i, j = np.unravel_index(np.argmax(unordered), unordered.shape)
            b = int(index[i, j])
            # both strong, so a .cta scope left the other CTA's thread out
            scope = "; a .cta scope holds no thread of another CTA" if atomic and self.w_atomic[b] else ""
            raise self.hazard(inst, f"{does} {self.where(b)}, which the instruction at line {int(line[b])} "
                                    f"({self.describe_lane(int(other[i, j]))}) {did}, and no synchronisation orders "
                                    f"the two (race: a bar.sync or an mbarrier wait between them is missing{scope})",
                              int(lanes[i]))

    # endregion


__all__ = ["HappensBefore"]
