"""Happens-before for global memory in the CTA simulator: which accesses of the same bytes, by different threads
or CTAs, nothing orders (`tessera.sm90.memory_model.GLOBAL_WRITE_ORDER`, `ATOMICS_DO_NOT_RACE`).

Every global access the simulator makes is recorded per byte of the tensor it touches (who made it, when, and
whether atomically: the record structures are in `global_race_records`); this module holds the checks of an
access against those records and their update. An access races with a recorded one if at least one of the two
writes, not both are atomic (atomics never race each other: each is one indivisible read-modify-write, and their
order only decides rounding), and neither the same thread made both nor happens-before orders them:

- inside a CTA, as for shared memory: `hb.ordered[w, r] > t` (named barriers, mbarrier phases, transitively);
- between CTAs: a semaphore, per thread [`memory_model.RELEASE_ACQUIRE`]. `sem_signal` (`red.release.gpu`)
  releases on the semaphore word what its signalling thread knows: its own accesses, those of its CTA's threads
  ordered before the signal (a `bar_sync` before it), and what it had learnt of other CTAs; a `sem_try_wait` that
  succeeds (`ld.acquire.gpu`) gives the waiting thread every release the word holds (the adds of one word form
  a release sequence). The other threads of the waiting CTA learn it only through a later edge (the `bar_sync`
  after the wait), carried with every edge of the CTA (`HappensBefore.grid`). So a signal without the barrier
  before it releases only the signalling thread's accesses, and threads that access after a wait without the
  barrier after it are not ordered after the signalling CTA's. The CTAs of one cluster, which order through
  cluster barriers, are not checked against each other here.

A race is reported with both sides: the op and thread of this access, the op, thread and CTA of the earlier one,
and what synchronisation was missing. With `races=False` nothing is checked (the records are still kept).

Proxies (`memory_model.PROXY_FENCE_STATE_SPACE`): a TMA copy reads global memory through the async proxy
(`GlobalMemory.note_async_read`, charged to the issuing thread at issue) and bulk reductions write through it;
every other access is the generic proxy's. An async-proxy read of bytes whose last write came through the
generic proxy needs, besides happens-before, a `fence.proxy.async` covering global memory on a causality path
from the write to the read; Target IR's `fence_proxy_async` is `.shared::cta` only, so such a read is reported
(same thread, same CTA or another), naming the write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.byte_box import put, take
from tessera.interpreters.ptx.release_acquire import join_cta_knowledge
from tessera.interpreters.sm90.global_race_records import (
    NONE,
    _AsyncRead,
    _distinct,
    _per_byte,
    _Side,
    _TensorRecord,
    _Until,
    _words,
)
from tessera.interpreters.sm90.registers import WORD_BYTES
from tessera.interpreters.truth import all_set, any_set

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView


def grid_rank(cta: CtaView) -> int:
    """The linear index of the CTA in its grid (x fastest)."""
    (x, y, z), (gx, gy, _) = cta.cta_id, cta.grid
    return x + gx * (y + gy * z)


@dataclass
class GlobalAccesses:
    """The global-memory happens-before records of one launch (or one group of CTAs run on its own)."""

    names: list[str]
    grid: tuple[int, int, int]
    tensors: dict[int, _TensorRecord] = field(default_factory=dict)
    ops: list[Operation] = field(default_factory=list)
    _op_index: dict[int, int] = field(default_factory=dict)
    released: dict[tuple[int, int], dict[int, np.ndarray]] = field(default_factory=dict)
    """Per semaphore word (tensor, byte offset): the join of its signals' releases, CTA rank -> [T] times of that
    CTA's threads (`HappensBefore.grid`)."""
    pool: object = None
    """The launch's `record_pool.RecordPool`, which lends the per-byte arrays for the whole launch (None: they are
    allocated); set by the launch (`batches.run_batches`)."""

    def _index(self, op: Operation) -> int:
        index = self._op_index.get(id(op))
        if index is None:
            index = self._op_index[id(op)] = len(self.ops)
            self.ops.append(op)
        return index

    def _record(self, tensor: int, size: int) -> _TensorRecord:
        record = self.tensors.get(tensor)
        if record is None:
            record = self.tensors[tensor] = _TensorRecord(*(_Side.empty(size, self.pool) for _ in range(3)))
        return record

    # region accesses
    def access(self, cta: CtaView, op: Operation, tensor: int, size: int, offsets: np.ndarray, threads: np.ndarray,
               write: bool, atomic: bool = False, proxy_async: bool = False) -> None:
        """`threads` (one per entry) access the bytes `offsets` (flat, same length) of tensor `tensor` (of `size`
        bytes), through the async proxy if `proxy_async`: check them against the recorded accesses (if
        `cta.races`), then record this one."""
        if not len(offsets):
            return
        record = self._record(tensor, size)
        if record.deferred:
            self._settle(record)
        rank, now = grid_rank(cta), cta.tick()
        span = None
        if cta.races and write and not atomic:
            span = self._check_together(cta, op, tensor, offsets, threads)
        if cta.races:
            if write and record.until is not None:
                self._check_until(cta, op, tensor, offsets, threads, rank, record.until)
            sides = (record.write, record.read, record.other_read) if write else (record.write,)
            for side in sides:
                self._check(cta, op, tensor, offsets, threads, rank, side, write, atomic, record.until)
            if proxy_async and not write:
                self._check_proxy(cta, op, tensor, offsets, threads, record.write)
        here = self._index(op)
        if write and atomic:
            self._note_add(record, rank, threads, now, proxy_async, cta.threads)
        if write:
            record.written = True
            record.write.set(offsets, rank, threads, now, here, atomic, proxy_async, span)
            cleared = [side.cta for side in (record.read, record.other_read) if side.recorded]
            if record.until is not None:
                cleared.append(record.until.cta)
            for records in cleared:
                if span is None:
                    put(records, offsets, NONE)
                else:
                    records[span[0]:span[1]] = NONE
            return
        self._record_read(record, offsets, rank, threads, now, here, atomic, proxy_async)

    @staticmethod
    def _note_add(record: _TensorRecord, rank: int, threads: np.ndarray, now: int, proxy_async: bool,
                  count: int) -> None:
        """`threads` of CTA `rank` added into the tensor at time `now` (their latest add: the clock only grows)."""
        if proxy_async:
            record.bulk_added = True
            return
        latest = record.adders.get(rank)
        if latest is None:
            latest = record.adders[rank] = np.full(count, NONE, np.int64)
        latest[threads] = now

    def unordered_add(self, cta: CtaView, tensor: int, threads: np.ndarray, ranks=None) -> tuple[int, int] | None:
        """(CTA rank, thread) of an atomic add into tensor `tensor` by another CTA (of `ranks`, or any) that
        happens-before does not order before the present point of every one of `threads` (this CTA's, about to
        read the tensor plainly), or None where every such add is ordered: the adding CTAs signalled a semaphore
        after their adds, and the readers acquired it (the last block of a split reduction reading the total,
        CUDA's threadFenceReduction). A bulk reduction's adds are never ordered so (in flight past their issue)."""
        record = self.tensors.get(tensor)
        rank = grid_rank(cta)
        others = [r for r in (record.adders if record is not None else {}) if r != rank
                  and (ranks is None or r in ranks) and r not in self._peers(cta)]
        if record is not None and record.bulk_added:
            return next(iter(others), NONE), NONE
        readers = np.unique(threads)
        for r in others:
            times = record.adders[r]
            adders = np.flatnonzero(times != NONE)
            known = cta.hb.grid.get(r)
            if known is None:
                return r, int(adders[0])
            late = known[np.ix_(adders, readers)] <= times[adders][:, None]
            if any_set(late):
                return r, int(adders[int(np.argwhere(late)[0][0])])
        return None

    def store_words(self, cta: CtaView, op: Operation, tensor: int, size: int, words: np.ndarray,
                    threads: np.ndarray) -> bool:
        """A plain store by `threads` (one per word) of the aligned 4-byte words `words` (word indices) of tensor
        `tensor` (of `size` bytes, a multiple of 4): checked and recorded as `access` does it byte by byte, but
        word by word (a word's four records one item, `_words`), where the checks find nothing to look at: the
        words are distinct, no byte of them has a recorded access, and no TMA read of the tensor is pending or
        reads until a phase (`until`). Returns False, having changed nothing, where any of that fails: `access`
        then checks and records the bytes one by one and reports what it finds."""
        if not len(words):
            return True
        record = self._record(tensor, size)
        if record.deferred or record.until is not None:
            return False
        distinct, span = _distinct(words)
        if not distinct:
            return False
        span = None if span is None else (span[0] * WORD_BYTES, span[1] * WORD_BYTES)
        sides = [side for side in (record.write, record.read, record.other_read) if side.recorded]
        if any(np.count_nonzero(_words(side.cta)[words].view(side.cta.dtype) != NONE) for side in sides):
            return False
        rank, now, here = grid_rank(cta), cta.tick(), self._index(op)
        record.written = True
        side = record.write
        for records, value in ((side.cta, rank), (side.thread, threads), (side.time, now), (side.op, here),
                               (side.atomic, False), (side.proxy_async, False)):
            if span is not None and np.ndim(value) == 0:
                records[span[0]:span[1]] = value
            else:
                _words(records)[words] = _per_byte(value, records.dtype, len(words))
        for records in (read.cta for read in (record.read, record.other_read) if read.recorded):
            if span is not None:
                records[span[0]:span[1]] = NONE
            else:
                _words(records)[words] = _per_byte(NONE, records.dtype, len(words))
        return True

    def read_until(self, cta: CtaView, op: Operation, tensor: int, size: int, offsets: np.ndarray, thread: int,
                   barrier: int, phase: int) -> None:
        """A TMA copy issued by `thread` (after `access` recorded its read) reads `offsets` until it completes phase
        `phase` of mbarrier instance `barrier`: a write of those bytes by the CTA's threads must come after that
        completion (`memory_model.TMA_READ_UNTIL_COMPLETE`)."""
        record = self._record(tensor, size)
        if record.deferred:
            self._settle(record)
        self._until(record, size, offsets, grid_rank(cta), thread, self._index(op), barrier, phase)

    @staticmethod
    def _until(record: _TensorRecord, size: int, offsets, rank: int, thread: int, op: int, barrier: int,
               phase: int) -> None:
        if record.until is None:
            record.until = _Until.empty(size)
        until = record.until
        for records, value in ((until.cta, rank), (until.thread, thread), (until.op, op), (until.barrier, barrier),
                               (until.phase, phase)):
            put(records, offsets, value)

    def async_read(self, cta: CtaView, op: Operation, tensor: int, size: int, offsets: np.ndarray, thread: int,
                   until: tuple[int, int] | None) -> None:
        """A TMA copy issued by `thread` reads `offsets` of tensor `tensor` through the async proxy (until it
        completes `until`, (mbarrier instance, phase), if given): `access` and `read_until` in one, checked now
        and recorded per byte when something next needs the tensor's read records (`_settle`: any other access
        of the tensor), so that the reads of a tensor nothing writes (a kernel's inputs) cost no per-byte work.

        The records a sequence of reads leaves are, per byte, the latest reader and the latest one before the
        final run of readers of one CTA (`access`: `other_read`), and the latest `until`. Of the reads of one
        byte set, only the latest, the latest of another CTA than it and the latest with an `until` can be
        those for any byte (a read of the same set after another supersedes it), so only they are kept and
        replayed in their order: the records are those of recording every read at once."""
        if not len(offsets):
            return
        record = self._record(tensor, size)
        rank, now = grid_rank(cta), cta.tick()
        if cta.races and record.written:  # nothing but a write races with a read
            threads = np.full(len(offsets), thread, np.int32)
            self._check(cta, op, tensor, offsets, threads, rank, record.write, False, False, record.until)
            self._check_proxy(cta, op, tensor, offsets, threads, record.write)
        read = _AsyncRead(record.reads, offsets, rank, thread, now, self._index(op), until)
        record.reads += 1
        box = getattr(offsets, "box", None)
        key = box if box is not None else offsets.tobytes()
        kept = record.deferred.get(key)
        if kept is None:
            record.deferred[key] = [read, None, read if until is not None else None]
            return
        latest = kept[0]
        if latest.rank != rank:
            kept[1] = latest
        kept[0] = read
        if until is not None:
            kept[2] = read

    def _settle(self, record: _TensorRecord) -> None:
        """Record the deferred TMA reads of `record` per byte, in their order (`async_read`)."""
        steps: dict[int, tuple[_AsyncRead, bool, bool]] = {}
        for latest, other, timed in record.deferred.values():
            for read in (latest, other):
                if read is not None:
                    steps[read.seq] = (read, True, steps.get(read.seq, (read, False, False))[2])
            if timed is not None:
                steps[timed.seq] = (timed, steps.get(timed.seq, (timed, False, False))[1], True)
        record.deferred = {}
        size = record.read.size
        for seq in sorted(steps):
            read, reads, timed = steps[seq]
            if reads:
                self._record_read(record, read.offsets, read.rank, read.thread, read.time, read.op, False, True)
            if timed:
                self._until(record, size, read.offsets, read.rank, read.thread, read.op, *read.until)

    @staticmethod
    def _record_read(record: _TensorRecord, offsets, rank: int, threads, now: int, op: int, atomic: bool,
                     proxy_async: bool) -> None:
        """Note a read in `record`: the latest reader of each byte, and the one it replaces if of another CTA."""
        if not record.read.recorded:
            record.read.set(offsets, rank, threads, now, op, atomic, proxy_async)
            return
        readers = take(record.read.cta, offsets)
        moved = (readers != NONE) & (readers != rank)
        if all_set(moved):
            record.other_read.copy_from(record.read, offsets)
        elif any_set(moved):
            record.other_read.copy_from(record.read, offsets[moved])
        record.read.set(offsets, rank, threads, now, op, atomic, proxy_async)

    def _check_until(self, cta: CtaView, op: Operation, tensor: int, offsets: np.ndarray, threads: np.ndarray,
                     rank: int, until: _Until) -> None:
        """A write by `threads` of this CTA of bytes a TMA copy of this CTA reads: the writer must have observed
        the copy's phase complete (a successful wait of its own, or a bar_sync after one), whatever the
        happens-before of the issuing thread says: ordered after the issue is not after the read."""
        mine = take(until.cta, offsets) == rank
        if not any_set(mine):
            return
        where = np.flatnonzero(mine)
        barrier, phase = until.barrier[offsets[where]], until.phase[offsets[where]]
        unseen = cta.mbarriers.observed[barrier, threads[where]] <= phase
        if not any_set(unseen):
            return
        i = int(where[np.argmax(unseen)])
        at = int(offsets[i])
        mbarrier = cta.mbarriers.instances[int(until.barrier[at])]
        cta.fail(op, f"writes tensor {self.names[tensor]} at byte offset {at}, which "
                     f"`{describe_op(self.ops[int(until.op[at])])}` ({cta.thread_name(int(until.thread[at]))}) reads "
                     f"through the async proxy until it completes phase {int(until.phase[at])} of the mbarrier at "
                     f"{cta.smem.locate(mbarrier.address)}, which this thread has not observed (race: the copy may "
                     "still read the bytes; a successful mbarrier_try_wait_parity for that phase, or a bar_sync "
                     "after one, before this write is missing)", int(threads[i]))

    def _check_proxy(self, cta: CtaView, op: Operation, tensor: int, offsets: np.ndarray, threads: np.ndarray,
                     writes: _Side) -> None:
        """An async-proxy read of bytes last written through the generic proxy (`memory_model.PROXY_FENCE_STATE_SPACE`:
        Target IR has no proxy fence for global memory, so no causality path carries one)."""
        if not writes.recorded:
            return
        generic = (take(writes.cta, offsets) != NONE) & ~take(writes.proxy_async, offsets)
        if not any_set(generic):
            return
        i = int(np.argmax(generic))
        at = int(offsets[i])
        rank, thread = int(writes.cta[at]), int(writes.thread[at])
        who = cta.thread_name(thread) if rank == grid_rank(cta) else f"thread {thread} of CTA {self._cta_name(rank)}"
        cta.fail(op, f"reads tensor {self.names[tensor]} at byte offset {at} through the async proxy (a TMA copy), "
                     f"which `{describe_op(self.ops[int(writes.op[at])])}` ({who}) wrote through the generic proxy "
                     "in this launch: the async proxy sees that write only after a fence.proxy.async covering global "
                     "memory on a causality path between them, and sm90.fence_proxy_async is .shared::cta only "
                     "(proxy race: write the tensor in an earlier launch, or read it with ld_global)",
                 int(threads[i]))

    def _check(self, cta: CtaView, op: Operation, tensor: int, offsets: np.ndarray, threads: np.ndarray, rank: int,
               side: _Side, write: bool, atomic: bool, until: _Until | None = None) -> None:
        if not side.recorded:
            return
        other_cta = take(side.cta, offsets)
        candidate = other_cta != NONE
        if not any_set(candidate):
            return
        if atomic:
            candidate &= ~take(side.atomic, offsets)  # atomics never race each other
        if until is not None and side is not self.tensors[tensor].write:
            # this CTA's TMA reads: `_check_until` judges them by their completion
            candidate &= ~(take(side.proxy_async, offsets) & (other_cta == rank) & (take(until.cta, offsets) == rank))
        if not any_set(candidate):
            return
        where = np.flatnonzero(candidate)
        their_cta, their_thread = other_cta[where], side.thread[offsets[where]]
        their_time = side.time[offsets[where]]
        mine = their_cta == rank
        unordered = np.zeros(len(where), bool)
        if any_set(mine):
            same_thread = their_thread[mine] == threads[where][mine]
            ordered = cta.hb.ordered[their_thread[mine], threads[where][mine]] > their_time[mine]
            unordered[mine] = ~(same_thread | ordered)
        if any_set(~mine):
            peers = self._peers(cta)
            seen = np.full(int((~mine).sum()), NONE, np.int64)
            peer = np.zeros(len(seen), bool)
            others, theirs, readers = their_cta[~mine], their_thread[~mine], threads[where][~mine]
            for r in np.unique(others).tolist():
                of = others == r
                peer[of] = r in peers
                known = cta.hb.grid.get(r)
                if known is not None:
                    seen[of] = known[theirs[of], readers[of]]
            unordered[~mine] = ~(peer | (seen > their_time[~mine]))
        if not any_set(unordered):
            return
        i = int(where[np.argmax(unordered)])
        j = int(np.argmax(unordered))
        self._race(cta, op, tensor, int(offsets[i]), int(threads[i]), write, side, int(offsets[i]),
                   int(their_cta[j]) != rank)

    def _check_together(self, cta: CtaView, op: Operation, tensor: int, offsets: np.ndarray,
                        threads: np.ndarray) -> tuple[int, int] | None:
        """Threads of one plain store writing the same byte: nothing orders them (one instruction, many threads).
        A store whose bytes are all distinct (the usual) is told so by `_distinct`; only one with a byte written
        twice takes the stable sort that finds the first pair from two threads. Returns (low, high) where the bytes
        are every byte of [low, high) once (a contiguous tile: `_Side.set` writes it as a slice)."""
        if len(offsets) < 2:
            return None
        distinct, span = _distinct(offsets)
        if distinct:
            return span
        order = np.argsort(offsets, kind="stable")
        ordered_offsets, ordered_threads = offsets[order], threads[order]
        clash = (ordered_offsets[1:] == ordered_offsets[:-1]) & (ordered_threads[1:] != ordered_threads[:-1])
        if any_set(clash):
            i = int(np.argmax(clash))
            cta.fail(op, f"writes tensor {self.names[tensor]} at byte offset {int(ordered_offsets[i])} in two threads "
                         f"at once ({cta.thread_name(int(ordered_threads[i]))} writes it too), and no synchronisation "
                         "orders the two (race: two threads store to the same bytes)", int(ordered_threads[i + 1]))

    def _peers(self, cta: CtaView) -> frozenset[int]:
        cluster = getattr(cta, "cluster", None)
        if cluster is None or not getattr(cluster, "members", None):
            return frozenset()
        return frozenset(grid_rank(member) for member in cluster.members)

    def _race(self, cta: CtaView, op: Operation, tensor: int, offset: int, thread: int, write: bool, side: _Side,
              at: int, between_ctas: bool) -> None:
        other_rank, other_thread = int(side.cta[at]), int(side.thread[at])
        other_op = self.ops[int(side.op[at])]
        did = "wrote" if side is self.tensors[tensor].write else "read"
        did = f"{'atomically ' if side.atomic[at] else ''}{did}"
        if between_ctas:
            who = f"thread {other_thread} of CTA {self._cta_name(other_rank)}"
            missing = ("nothing orders accesses of two CTAs to the same bytes but a semaphore: no sem_signal of that "
                       "CTA after its access (by that thread, or after a bar_sync that follows it) was acquired by a "
                       "sem_try_wait of this thread (its own, or one before a bar_sync this thread passed)")
        else:
            who = cta.thread_name(other_thread)
            missing = "a bar_sync or an mbarrier release/wait between the two accesses is missing"
        verb = "writes" if write else "reads"
        cta.fail(op, f"{verb} tensor {self.names[tensor]} at byte offset {offset}, which `{describe_op(other_op)}` "
                     f"({who}) {did}, and no synchronisation orders the two (race: {missing})", thread)

    def _cta_name(self, rank: int) -> str:
        gx, gy, _ = self.grid
        return str((rank % gx, rank // gx % gy, rank // (gx * gy)))

    # endregion
    # region semaphores: release and acquire between CTAs
    def release(self, cta: CtaView, tensor: int, offset: int, thread: int) -> None:
        """A `sem_signal` by `thread` of the semaphore word at (tensor, offset): what the thread knows now (its CTA's
        accesses ordered before it, and of other CTAs) is released on the word."""
        word = (tensor, offset)
        self.released[word] = join_cta_knowledge(self.released.get(word), cta.hb.knowledge(thread, grid_rank(cta)))

    def acquire(self, cta: CtaView, tensor: int, offset: int, threads: np.ndarray) -> None:
        """A successful `sem_try_wait` by `threads` on the word: they acquire every release the word holds (their
        CTA's own release orders its threads as any other edge does)."""
        released = self.released.get((tensor, offset))
        if not released:
            return
        rank = grid_rank(cta)
        others = {r: times for r, times in released.items() if r != rank}
        if others:
            cta.hb.learn(threads, others)
        if rank in released:
            ordered = cta.hb.ordered
            ordered[:, threads] = np.maximum(ordered[:, threads], released[rank][:, None])

    # endregion


__all__ = ["GlobalAccesses", "grid_rank"]
