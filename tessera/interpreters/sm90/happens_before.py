"""Happens-before in the CTA simulator: which synchronisation orders which shared-memory access, as the PTX memory
model defines it (`tessera.sm90.memory_model`), whatever order the simulator happened to run the strands in.

The other units check what the schedule exposes (a read of bytes still in flight, a write over bytes a pending
wgmma reads). This unit keeps the orders themselves, incrementally (bookkeeping per synchronisation and per
access, never a walk over past accesses):

- `ordered[w, r]` (a [T, T] matrix of simulator times) is the latest time t such that thread w's accesses
  before t happen before thread r's present point. It is a vector clock per thread (column r) whose entries are
  times of the one CTA clock, so the units compare it with the times they record per byte (`written_at`, ...):
  w's access at time a is ordered before r iff w == r or `ordered[w, r] > a`.
- Releases set the releasing threads' own entries to now and join their columns into a message; acquires take
  the element-wise maximum. Edges: a named barrier (`bar_sync`/`bar_arrive`) completing (every participant
  releases, every waiter acquires); an mbarrier arrive (a release into the barrier's pending phase), the phase
  completing (its releases are published), a successful `mbarrier_try_wait_parity` (acquires what the barrier
  published). Ordering is transitive: a consumer's release reaches the producer through the empty barrier and
  the consumer's earlier reads are ordered before the producer's refill.
- `fenced[w, r]`: the latest time of w's accesses that a `fence_proxy_async` on a happens-before path into r
  covers. A fence by f covers everything ordered before f; every edge that carries `ordered` carries `fenced`.
  So a generic store followed by a barrier and a fence in the thread that issues the async-proxy read is
  visible to that read, as the memory model's proxy-preserved causality order says.

Per shared byte, the generic reads since the last write are kept here (the last generic write is the shared
memory's `writer`/`written_at`), FastTrack style: while each read happens after the one before, one reader
(thread, time, op) stands for all of them (a write ordered after it is ordered after the earlier ones); when a
read is concurrent with the byte's last one (not ordered after it, or by another thread of the same
instruction), the byte gets a read vector clock (`read_clock[row]`: each thread's latest read time, -1 none),
kept until the next write. `check_write` refuses a write that an earlier read (any thread of the vector clock)
or write of another thread, or a completed wgmma read (`WgmmaGroups.completed_at`), does not happen before: a
write racing an earlier reader is reported even when a later reader, ordered before the write, came between.
With `races=False` the write checks are skipped (the edges are still kept: the other units' checks use them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.byte_box import look, put, take
from tessera.interpreters.ptx.release_acquire import join_cta_knowledge
from tessera.interpreters.ranges import consecutive
from tessera.interpreters.sm90.record_pool import records
from tessera.interpreters.sm90.shared_memory import GENERIC
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView


Message = tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None, dict | None]
"""What a release carries to its acquirers: `ordered` [T] and `fenced` [T] (the join of the releasing threads'
columns), `observed` [mbarrier instances] (the phases of each barrier they had observed complete), in a
cluster what they knew of its CTAs' releases ([C, T] `Cluster.known`, and the latest cluster barrier
completion they passed, `Cluster.passed_at`): a producer that learns of a peer's release of a slot only through
another thread of its CTA (which waited on the empty barrier and then arrived on a barrier the producer waits on)
may refill the slot; and what they knew of other CTAs of the grid through semaphores (`grid`: rank -> [T] times
of that CTA's threads; None when nothing)."""


def _columns(threads: np.ndarray):
    """Thread indices (or a [T] mask) as a slice where they are consecutive (a view), else as an index array."""
    if threads.dtype == np.bool_:
        threads = np.nonzero(threads)[0]
    return consecutive(threads) if len(threads) else threads


class HappensBefore:
    """The happens-before state of one CTA (see the module docstring)."""

    def __init__(self, cta: CtaView, races: bool = True):
        threads = cta.threads
        self.cta = cta
        self.races = races
        # int32 clocks (a CTA's clock counts its events, far below 2^31), as the PTX executor's: an acquire's
        # column-wise maximum passes half the bytes of int64. Each is the transposed view of an array whose rows are
        # the threads' clocks (`ordered[w, r]` is row r, entry w): an acquire's maximum over its threads' columns and
        # a release's join of them run over whole rows (a third of the time of strided columns)
        self.ordered = records(cta, (threads, threads), -1, np.int32).T
        self.fenced = records(cta, (threads, threads), -1, np.int32, self._fenced_changed).T
        self.fenced_written = False
        """Whether `fenced` has been written (a fence_proxy_async, an acquire of a release that carried fenced
        times): until then it is -1 everywhere, and its pool refills none of it (`records`)."""
        self.unfenced = np.full(threads, -1, np.int32)
        """The `fenced` times of a release made before any fence_proxy_async (-1 for every thread: read-only, one
        array for all such messages, so that an acquire and a join tell it by identity and skip it)."""
        self.unfenced.flags.writeable = False
        self.fences = False
        """Whether a fence_proxy_async has run (`fence_proxy_async`): until then `fenced` is -1 everywhere, and
        releases carry `unfenced` instead of a column-wise maximum of it (flash attention has none)."""
        self.pending: dict[int, Message] = {}
        self.published: dict[int, Message] = {}
        self.cluster_pending: dict[int, Message] = {}
        self.grid: dict[int, np.ndarray] = {}
        """What this CTA's threads know of other CTAs' threads through semaphores (`global_races`): rank ->
        [T_rank, T] times, `grid[c][w, r]` the latest time such that thread w of CTA c's accesses before it happen
        before thread r's present point (as `ordered`, on CTA c's clock). Carried by every edge; empty (and free)
        in a kernel without semaphores."""
        # per byte, its latest generic read (reader, time, op; -1 none) and bytes read concurrently since their last
        # write: read_row[byte] (-1: none) indexes read_clock/read_ops. Allocated at the first generic read
        # (`_read_records`): a kernel whose shared memory is read only by wgmma and TMA stores fills none of them.
        self.reader = self.read_at = self.read_op = self.read_row = None
        self.read_clock = np.full((0, threads), -1, np.int64)
        self.read_ops = np.full((0, threads), -1, np.int32)
        self._free_rows: list[int] = []
        self.generic_reads = False
        """Whether any generic read has been noted (`note_read`): until then the per-byte read records are None
        (-1 at every byte), so a write has no read to be ordered after and none to clear (`check_write`)."""
        self.ops: list[Operation] = []
        self._op_index: dict[int, int] = {}

    def op_index(self, op: Operation) -> int:
        """A small integer naming `op` in the per-byte records."""
        index = self._op_index.get(id(op))
        if index is None:
            index = self._op_index[id(op)] = len(self.ops)
            self.ops.append(op)
        return index

    # region edges
    def release(self, threads: np.ndarray) -> Message:
        """`threads` release now: the join of their clocks (ordered, fenced) and of the mbarrier phases they have
        observed complete (`MBarriers.observed`)."""
        columns = _columns(threads)
        now = self.cta.tick()
        index = np.arange(self.cta.threads)[columns]
        self.ordered[index, index] = now
        observed = self.cta.mbarriers.observed
        cluster = self.cta.cluster
        peers = None if cluster is None else (cluster.known[self.cta.rank, columns].max(axis=0),
                                              int(cluster.passed_at[self.cta.rank, columns].max()))
        grid = {rank: known[:, columns].max(axis=1) for rank, known in self.grid.items()} if self.grid else None
        fenced = self.fenced.T[columns].max(axis=0) if self.fences else self.unfenced
        return (self.ordered.T[columns].max(axis=0), fenced, observed[:, columns].max(axis=1, initial=0), peers,
                grid)

    def _fenced_changed(self):
        """What of `fenced` may differ from -1 (`records`): all of it once written, else nothing."""
        return Ellipsis if self.fenced_written else None

    def acquire(self, threads: np.ndarray, message: Message) -> None:
        columns = _columns(threads)
        ordered, fenced, observed, peers, grid = message
        if grid:
            self.learn(columns, grid)
        if peers is not None:  # what the releasing threads knew of the cluster's releases (`Cluster.known`)
            cluster, rank = self.cta.cluster, self.cta.rank
            known = cluster.known[rank]
            known[columns] = np.maximum(known[columns], peers[0])
            passed = cluster.passed_at[rank]
            passed[columns] = np.maximum(passed[columns], peers[1])
        clocks = self.ordered.T  # rows: the acquiring threads' clocks
        if isinstance(columns, slice):
            np.maximum(clocks[columns], ordered, out=clocks[columns])
            if fenced is not self.unfenced:  # the maximum with -1 everywhere changes nothing
                self.fenced_written = True
                np.maximum(self.fenced.T[columns], fenced, out=self.fenced.T[columns])
        else:
            clocks[columns] = np.maximum(clocks[columns], ordered)
            if fenced is not self.unfenced:
                self.fenced_written = True
                self.fenced.T[columns] = np.maximum(self.fenced.T[columns], fenced)
        if any_set(observed):  # a phase completion observed before the release is observed after the acquire
            known = self.cta.mbarriers.observed
            rows = slice(0, len(observed))
            known[rows, columns] = np.maximum(known[rows, columns], observed[:, None])

    @staticmethod
    def join(old: Message | None, new: Message) -> Message:
        """The join of two messages (the observed phases of barriers initialised since `old` count as 0 there)."""
        if old is None:
            return new
        a, b = old[2], new[2]
        if len(a) != len(b):
            a, b = (np.pad(v, (0, max(len(a), len(b)) - len(v))) for v in (a, b))
        peers = old[3] if new[3] is None else new[3] if old[3] is None else (np.maximum(old[3][0], new[3][0]),
                                                                            max(old[3][1], new[3][1]))
        fenced = old[1] if old[1] is new[1] else np.maximum(old[1], new[1])  # `unfenced` stays itself
        return np.maximum(old[0], new[0]), fenced, np.maximum(a, b), peers, \
            join_cta_knowledge(old[4], new[4])

    def learn(self, threads, grid: dict) -> None:
        """`threads` (columns) learn `grid` (rank -> [T_rank] times of that CTA's threads): a semaphore acquire,
        or an edge from threads that had learnt it."""
        for rank, times in grid.items():
            known = self.grid.get(rank)
            if known is None:
                known = self.grid[rank] = np.full((len(times), self.cta.threads), -1, np.int64)
            known[:, threads] = np.maximum(known[:, threads], times[:, None])

    def knowledge(self, thread: int, rank: int) -> dict:
        """What `thread` releases to other CTAs now (a semaphore signal), as `grid` holds it: its column of
        `ordered`, with its own entry now, as the times of its CTA (grid rank `rank`), and what it knows of
        other CTAs."""
        self.ordered[thread, thread] = self.cta.tick()
        known = {other: times[:, thread].copy() for other, times in self.grid.items()}
        known[rank] = self.ordered[:, thread].copy()
        return known

    def barrier(self, participants: np.ndarray, waiters: np.ndarray) -> None:
        """A named barrier completed: `participants` arrived, `waiters` leave it."""
        message = self.release(participants)
        if any_set(waiters):
            self.acquire(waiters, message)

    def arrive(self, barrier: int, threads: np.ndarray) -> None:
        """`threads` arrive on mbarrier instance `barrier`: a release into its pending phase."""
        self.pending[barrier] = self.join(self.pending.get(barrier), self.release(threads))

    def phase_completed(self, barrier: int) -> None:
        """The pending phase of mbarrier instance `barrier` completed: its releases reach later waiters."""
        new = self.pending.pop(barrier, None)
        if new is None:
            return
        self.published[barrier] = self.join(self.published.get(barrier), new)

    def waited(self, barrier: int, threads: np.ndarray) -> None:
        """`threads` observed a completed phase of mbarrier instance `barrier`."""
        done = self.published.get(barrier)
        if done is not None and len(threads):
            self.acquire(threads, done)

    def cluster_arrive(self, generation: int, threads: np.ndarray) -> None:
        """`threads` arrive at the cluster barrier's phase `generation`: a release (this CTA's side of it)."""
        self.cluster_pending[generation] = self.join(self.cluster_pending.get(generation), self.release(threads))

    def cluster_wait(self, generations: np.ndarray, threads: np.ndarray) -> None:
        """`threads` passed the cluster barrier phases `generations` (one per thread): they acquire what this
        CTA's threads released into them."""
        for generation in np.unique(generations).tolist():
            message = self.cluster_pending.get(generation)
            if message is not None:
                self.acquire(threads[generations == generation], message)

    def fence_proxy_async(self, threads: np.ndarray) -> None:
        """fence_proxy_async by `threads`: what happens before it is visible to the async proxy on every path
        through it."""
        columns = _columns(threads)
        now = self.cta.tick()
        index = np.arange(self.cta.threads)[columns]
        self.ordered[index, index] = now
        self.fences = self.fenced_written = True
        self.fenced[:, columns] = np.maximum(self.fenced[:, columns], self.ordered[:, columns])

    # endregion
    # region accesses
    def note_read(self, op: Operation, addresses: np.ndarray, threads: np.ndarray) -> None:
        """A generic read of `addresses` (flat bytes) by `threads` (same shape)."""
        if not self.generic_reads:
            self._read_records()
        now, index = self.cta.tick(), self.op_index(op)
        previous, before = self.reader[addresses], self.read_at[addresses]
        concurrent = (previous >= 0) & (previous != threads)
        if any_set(concurrent):
            concurrent[concurrent] = self.ordered[previous[concurrent], threads[concurrent]] <= before[concurrent]
        order = np.argsort(addresses, kind="stable")
        same = addresses[order][1:] == addresses[order][:-1]
        if any_set(same):  # threads of this instruction reading one byte: concurrent with each other
            shared = same & (threads[order][1:] != threads[order][:-1])
            concurrent[order[1:][shared]] = True
        inflated = self.read_row[addresses] >= 0
        if any_set(concurrent) or any_set(inflated):
            self._note_concurrent(addresses, threads, concurrent & ~inflated, inflated | concurrent, now, index)
        self.generic_reads = True
        self.reader[addresses] = threads
        self.read_at[addresses] = now
        self.read_op[addresses] = index

    def _read_records(self) -> None:
        """The per-byte read records, -1 everywhere (no byte read yet)."""
        size = self.cta.smem_bytes
        self.reader = records(self.cta, size, -1, np.int32)
        self.read_at = records(self.cta, size, -1, np.int64)
        self.read_op = records(self.cta, size, -1, np.int32)
        self.read_row = records(self.cta, size, -1, np.int32)

    def _note_concurrent(self, addresses, threads, new, kept, now: int, index: int) -> None:
        """Give the bytes `addresses[new]` a read vector clock holding their last read, then note this read in
        the clocks of `addresses[kept]`."""
        fresh = np.unique(addresses[new])
        if len(fresh):
            rows = self._rows(len(fresh))
            self.read_row[fresh] = rows
            readers = self.reader[fresh]
            had = readers >= 0
            self.read_clock[rows[had], readers[had]] = self.read_at[fresh][had]
            self.read_ops[rows[had], readers[had]] = self.read_op[fresh][had]
        rows = self.read_row[addresses[kept]]
        self.read_clock[rows, threads[kept]] = now
        self.read_ops[rows, threads[kept]] = index

    def _rows(self, count: int) -> np.ndarray:
        """`count` free rows of the read vector clocks (the table grows by doubling)."""
        while len(self._free_rows) < count:
            old = len(self.read_clock)
            grown = max(64, 2 * old)
            self.read_clock = np.concatenate([self.read_clock, np.full((grown - old, self.cta.threads), -1, np.int64)])
            self.read_ops = np.concatenate([self.read_ops, np.full((grown - old, self.cta.threads), -1, np.int32)])
            self._free_rows.extend(range(grown - 1, old - 1, -1))
        rows = np.array([self._free_rows.pop() for _ in range(count)], np.int32)
        self.read_clock[rows] = -1
        self.read_ops[rows] = -1
        return rows

    def check_write(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str) -> None:
        """A write of `addresses` (flat bytes) by `threads` (same shape): every earlier generic read and write
        of another thread, and every completed wgmma read, must happen before it. Clears the read records."""
        if self.races:
            if self.generic_reads:
                self._after_reads(op, addresses, threads, what)
                self._after_concurrent_reads(op, addresses, threads, what)
            if self.cta.smem.may_hold_generic(addresses):
                self._after_writes(op, addresses, threads, what)
            self._after_wgmma_reads(op, addresses, threads, what)
        if self.generic_reads:
            put(self.reader, addresses, -1)
            rows = take(self.read_row, addresses)
            if any_set(rows >= 0):
                freed = np.unique(rows[rows >= 0])
                self._free_rows.extend(freed.tolist())
                put(self.read_row, addresses, -1)
        wgmma = self.cta.wgmma
        for w, groups in enumerate(wgmma.read_group):
            if wgmma.newest_read[w] >= 0:  # else the row is -1 everywhere already (no wgmma of w read)
                put(groups, addresses, -1)

    def _race(self, op: Operation, what: str, address: int, other: Operation | None, other_thread: int, did: str,
              thread: int, missing: str) -> None:
        smem = self.cta.smem
        other_side = f"`{describe_op(other)}`" if other is not None else "a cp.async"
        self.cta.fail(op, f"{what} writes {smem.locate(address)}, which {other_side} "
                          f"({self.cta.thread_name(other_thread)}) {did}, and no synchronisation orders the two "
                          f"(race: {missing})", thread)

    def _after_reads(self, op, addresses, threads, what) -> None:
        readers = take(self.reader, addresses)
        other = (readers >= 0) & (readers != threads)
        if not any_set(other):
            return
        unordered = other.copy()
        unordered[other] = self.ordered[readers[other], threads[other]] <= self.read_at[addresses[other]]
        if any_set(unordered):
            i = int(np.argmax(unordered))
            self._race(op, what, int(addresses[i]), self.ops[int(self.read_op[addresses[i]])], int(readers[i]),
                       "read", int(threads[i]), "a bar_sync or an mbarrier release/wait between the read and this "
                                                "write is missing")

    def _after_concurrent_reads(self, op, addresses, threads, what) -> None:
        """Every read in the read vector clocks of the written bytes must happen before the write."""
        rows = take(self.read_row, addresses)
        inflated = rows >= 0
        if not any_set(inflated):
            return
        rows, writers = rows[inflated], threads[inflated]
        times = self.read_clock[rows]  # [n, T]
        seen = self.ordered[:, writers].T  # [n, T]: what each writer has seen of every thread
        unordered = (times >= 0) & (seen <= times)
        unordered[np.arange(len(rows)), writers] = False
        if any_set(unordered):
            i, reader = np.unravel_index(int(np.argmax(unordered)), unordered.shape)
            self._race(op, what, int(addresses[inflated][i]), self.ops[int(self.read_ops[rows[i], reader])],
                       int(reader), "read", int(writers[i]), "a bar_sync or an mbarrier release/wait between the "
                                                              "read and this write is missing; a later read ordered "
                                                              "before this write does not order this one")

    def _after_writes(self, op, addresses, threads, what) -> None:
        smem = self.cta.smem
        writers = look(smem.writer, addresses)
        other = (look(smem.state, addresses) == GENERIC) & (writers >= 0) & (writers != threads)
        if not any_set(other):
            return
        unordered = other.copy()
        unordered[other] = self.ordered[writers[other], threads[other]] <= smem.written_at[addresses[other]]
        if any_set(unordered):
            i = int(np.argmax(unordered))
            writer_op = int(smem.write_op[addresses[i]])
            self._race(op, what, int(addresses[i]), self.ops[writer_op] if writer_op >= 0 else None, int(writers[i]),
                       "wrote", int(threads[i]),
                       "a bar_sync or an mbarrier release/wait between the two writes is missing")

    def _after_wgmma_reads(self, op, addresses, threads, what) -> None:
        """Each completed wgmma read of the written bytes must happen before the write: after a
        `wgmma_wait_group` of any thread of the reading warpgroup that completed the group
        [memory_model.WGMMA_GROUP_PER_WARPGROUP]. A writer of that warpgroup took part in the wait (a warpgroup
        waits converged here), so program order orders it; a writer of another warpgroup needs an edge from
        one of the warpgroup's threads released after the wait."""
        wgmma = self.cta.wgmma
        size = facts.WARPGROUP_SIZE
        # a TMA copy's issuing thread (a broadcast of it, stride 0: one thread without a look at every byte's)
        one_writer = len(threads) > 0 and ((threads.ndim == 1 and threads.strides[0] == 0)
                                           or bool(threads.min() == threads.max()))
        for w in range(wgmma.read_group.shape[0]):
            if wgmma.newest_read[w] < 0:
                continue  # no wgmma of this warpgroup has read shared memory
            if one_writer and int(threads[0]) // size == w:
                continue  # its own wait completed the group (pending reads: `check_not_read_by_pending`)
            groups = look(wgmma.read_group[w], addresses)  # read only, before `check_write` clears them
            if one_writer:
                # the latest release of any thread of warpgroup w (after its wait_group) the writer has seen,
                # against each group's completion time through a table over the groups (-1: not read)
                seen = self.ordered[w * size:(w + 1) * size, int(threads[0])].max()
                table = np.zeros(int(wgmma.open[w]) + 2, bool)
                table[1:] = seen <= wgmma.completed_at(w, np.arange(len(table) - 1))
                if not any_set(table):
                    continue
                unordered = table[groups + 1]
                if not any_set(unordered):
                    continue
                read = groups >= 0
                unordered = unordered[read]
            else:
                read = groups >= 0
                if not any_set(read):
                    continue
                completed = wgmma.completed_at(w, groups[read])
                writers = threads[read]
                unique, inverse = np.unique(writers, return_inverse=True)
                seen = self.ordered[w * size:(w + 1) * size, unique].max(axis=0)[inverse]
                unordered = (seen <= completed) & (writers // size != w)
            if any_set(unordered):
                i = int(np.argmax(unordered))
                address, group = int(addresses[read][i]), int(groups[read][i])
                reader = wgmma.group_ops[(w, group)]
                wait = wgmma.wait_ops.get((w, group))
                until = f" until `{describe_op(wait)}`" if wait is not None else ""
                self.cta.fail(op, f"{what} writes {self.cta.smem.locate(address)}, which `{describe_op(reader)}` of "
                                  f"warpgroup {w} read{until}, and no synchronisation orders that wait before this "
                                  "write (race: the slot was released before the wgmma reading it completed)",
                              int(threads[read][i]))

    # endregion


__all__ = ["HappensBefore"]
