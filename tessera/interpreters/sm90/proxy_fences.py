"""The async proxy's fence rule for generic stores in a simulated CTA's shared memory (`shared_memory.SharedMemory`
takes it as a base): a generic store (st_shared, or a cp.async outside `CtaState.strict_proxy`'s exception) read
through the async proxy (a wgmma operand, a bulk copy's source) needs a fence_proxy_async on a happens-before path
from the store into each reader that must see it: the one issuing thread of a bulk copy; for a warpgroup's wgmma,
the writer itself if it reads, and every reader outside the writer's warp (a warp's threads execute the fence and
the wgmma together).

Each check reads the writers' latest write times (`_latest_writes`) and the CTA's fenced clocks; what it found is
kept while no tag of the bytes' lines changes (`SharedMemory.changed`) and, for reader groups found covered, for
good (fenced clocks only grow): a table written once and read by every later wgmma (the causal bias table) is
searched and sorted once.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.ranges import consecutive
from tessera.interpreters.sm90.shared_tags import EPOCH_BYTES, GENERIC, Buffer
from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts


def _needed(writers: np.ndarray, readers: np.ndarray) -> np.ndarray:
    """[writers, readers]: the (writer, reader) pairs where the reader must see the writer's store through a
    fence (`SharedMemory._check_proxy_fenced`): every pair for one reader (a bulk copy's thread), else the readers
    outside the writer's warp and the writer itself."""
    if len(readers) <= 1:
        return np.ones((len(writers), len(readers)), bool)
    return (readers[None, :] // facts.WARP_SIZE != writers[:, None] // facts.WARP_SIZE) | \
        (readers[None, :] == writers[:, None])


@lru_cache(maxsize=64)
def _needed_block(writer: int, writers: int, reader: int, readers: int) -> np.ndarray:
    """`_needed` of the consecutive writers writer .. writer + writers - 1 and readers reader .. (read-only)."""
    needed = _needed(np.arange(writer, writer + writers), np.arange(reader, reader + readers))
    needed = np.ascontiguousarray(needed.T).T  # laid out reader-major, as `HappensBefore.fenced`'s rows (`_uncovered`)
    needed.flags.writeable = False
    return needed


def _same_bytes(a: np.ndarray | slice, b: np.ndarray | slice) -> bool:
    """Whether two byte sets as `_latest_writes` takes them are the same (a slice is the same only as a slice)."""
    if isinstance(a, slice) or isinstance(b, slice):
        return isinstance(a, slice) and isinstance(b, slice) and a == b
    return equal_arrays(a, b)


class ProxyFenceChecks:
    """The fence rule's checks over a `SharedMemory`'s tags and records (`cta`, `state`, `writer`, `written_at`,
    `changed`, `buffers`, `_latest_writes_of`, `_buffer_writes`, `locate`)."""

    def _buffer_holding(self, addresses: np.ndarray) -> Buffer | None:
        """The first declared buffer that holds every one of `addresses` (None: none does)."""
        low, high = int(addresses.min()), int(addresses.max())
        return next((b for b in self.buffers.values() if b.offset <= low and high < b.offset + b.size), None)

    def _buffer_fenced(self, addresses: np.ndarray, readers: np.ndarray) -> bool:
        """Whether every generic-written byte of the shared buffer holding `addresses` is fenced for `readers`
        (`_check_proxy_fenced`'s rule): then so are those among `addresses` (each writer's latest write there is
        no later than in the whole buffer). One check per buffer and reader group while the buffer's lines are
        unchanged, for every window of it a wgmma reads (the causal bias table's, a different window each trip);
        False sends the read to the exact check, which names the byte."""
        buffer = self._buffer_holding(addresses)
        if buffer is None or len(readers) != readers[-1] - readers[0] + 1:
            return False
        lines = slice(buffer.offset // EPOCH_BYTES, (buffer.offset + buffer.size - 1) // EPOCH_BYTES + 1)
        stamp = int(self.changed[lines].max())
        kept = self._buffer_writes.get((buffer.offset, buffer.size))
        if kept is not None and kept[0] == stamp:  # no tag of the buffer changed: the same stores
            writers, latest, covered = kept[1]
        else:
            span = slice(buffer.offset, buffer.offset + buffer.size)
            generic = self.state[span] == GENERIC
            count = np.count_nonzero(generic)
            if not count:
                return False
            # every byte stored (a table): the range itself, its records read as views
            stored = span if count == buffer.size else np.flatnonzero(generic) + buffer.offset
            writers, latest, covered = self._latest_writes(stored)
            self._buffer_writes[(buffer.offset, buffer.size)] = (stamp, (writers, latest, covered))
        group = (int(readers[0]), len(readers))
        if group not in covered and not any_set(self._uncovered(writers, latest, readers)):
            covered.add(group)
        return group in covered

    def fenced_lines(self, addresses: np.ndarray, readers: np.ndarray) -> slice | None:
        """The EPOCH_BYTES-byte lines inside the shared buffer holding `addresses` whose every byte is a generic
        write fenced for `readers` (`_buffer_fenced`), or None: an async-proxy read of any of their bytes by
        `readers` passes `check_async_read` until a write changes one of those lines (the bytes stay GENERIC and
        their writers' fences only grow), as lines `readable_lines` found do (`wgmma.WgmmaUnit._check_read`)."""
        buffer = self._buffer_holding(addresses)
        if buffer is None:
            return None
        lines = slice(-(-buffer.offset // EPOCH_BYTES), (buffer.offset + buffer.size) // EPOCH_BYTES)
        if lines.stop <= lines.start:
            return None
        span = self.state[lines.start * EPOCH_BYTES:lines.stop * EPOCH_BYTES]
        if np.count_nonzero(span != GENERIC) or not self._buffer_fenced(addresses, readers):
            return None
        return lines

    def _uncovered(self, writers: np.ndarray, latest: np.ndarray, readers: np.ndarray) -> np.ndarray:
        """[writers, readers]: where a reader that must see a writer's latest store has no fence after it on a
        happens-before path (`_check_proxy_fenced`). Consecutive writers and readers (a bias table that whole
        warpgroups stored, read by a warpgroup: [256, 128]) take their fenced times as a view and the pairs that
        must see the fence from a kept array, not by a two-dimensional gather (some 0.5 ms a check)."""
        rows, columns = consecutive(writers), consecutive(readers)
        if isinstance(rows, slice) and isinstance(columns, slice):
            # reader-major, as the fenced clocks and the kept pairs lie: each pass without a buffered copy
            fenced = self.cta.hb.fenced[rows, columns].T
            needed = _needed_block(rows.start, len(writers), columns.start, len(readers)).T
            return ((fenced <= latest.astype(fenced.dtype)[None, :]) & needed).T
        fenced = self.cta.hb.fenced[writers[:, None], readers[None, :]]
        return (fenced <= latest.astype(fenced.dtype)[:, None]) & _needed(writers, readers)  # (int32 times)

    def _latest_writes(self, stored: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray, set]:
        """(the threads that wrote the bytes `stored` (distinct addresses, or a slice: every byte of a range, whose
        records are read as views), each one's latest write time, the reader groups found fenced for them
        (`_check_proxy_fenced`: fenced clocks only grow, so a group found covered stays so)): kept per set of bytes
        while no tag of their lines changes (`changed`: every write of `writer` and `written_at` stamps its lines),
        so a table written once and read by every later wgmma (the causal bias's) is sorted once."""
        whole = isinstance(stored, slice)
        low, high = (stored.start, stored.stop - 1) if whole else (int(stored.min()), int(stored.max()))
        stamp = int(self.changed[low // EPOCH_BYTES:high // EPOCH_BYTES + 1].max())
        key = (low, high, high - low + 1 if whole else len(stored))
        cached = self._latest_writes_of.get(key)
        if cached is not None and cached[0] == stamp and _same_bytes(cached[1], stored):
            return cached[2], cached[3], cached[4]
        w, t = self.writer[stored], self.written_at[stored]
        # a store writes its bytes with one writer and time: one entry per run of equal (writer, time) (a 16-byte
        # st.shared.v4's 16 bytes) loses nothing and sorts a sixteenth as much
        runs = np.flatnonzero(np.concatenate(([True], (w[1:] != w[:-1]) | (t[1:] != t[:-1]))))
        writers, inverse = np.unique(w[runs], return_inverse=True)
        latest = np.full(len(writers), -1, t.dtype)  # the times' own dtype: `maximum.at` without a cast
        np.maximum.at(latest, inverse, t[runs])
        self._latest_writes_of[key] = (stamp, stored if whole else stored.copy(), writers, latest, set())
        return writers, latest, self._latest_writes_of[key][4]

    def _check_proxy_fenced(self, op: Operation, stored: np.ndarray, readers: np.ndarray, what: str) -> None:
        """Generic stores at `stored` read through the async proxy by `readers` (a warpgroup's wgmma, or one
        thread's bulk copy) need a fence_proxy_async on a happens-before path from the store into each reader
        that must see it: the one issuing thread, or, for a warpgroup, the writer itself if it is a reader and
        every reader outside the writer's warp (a warp's threads execute the fence and the wgmma together)."""
        hb = self.cta.hb
        writers, latest, covered = self._latest_writes(stored)
        group = (int(readers[0]), len(readers))
        if group in covered:
            return
        # every (writer, reader) pair at once: the common case, all covered, takes no Python loop over the writers
        # (a table every thread of the block stored has hundreds); a failure is found and named below, as before
        if not any_set(self._uncovered(writers, latest, readers)):
            if len(readers) == readers[-1] - readers[0] + 1:  # a contiguous group (a warpgroup, one thread)
                covered.add(group)
            return
        for writer, when in zip(writers.tolist(), latest.tolist()):
            if len(readers) > 1:
                needed = readers[(readers // facts.WARP_SIZE != writer // facts.WARP_SIZE) | (readers == writer)]
            else:
                needed = readers
            if not len(needed):
                continue
            uncovered = hb.fenced[writer, needed] <= when
            if not any_set(uncovered):
                continue
            address = int(stored[np.argmax(self.writer[stored] == writer)])
            reader = int(needed[np.argmax(uncovered)])
            if hb.fenced[writer, writer] <= when:
                ordered = reader != writer and hb.ordered[writer, reader] > when
                why = (": the store is ordered before this read, but no fence_proxy_async lies on any "
                       "synchronisation path between them" if ordered else "")
                how = "st_shared" if self.state[address] == GENERIC else "a cp.async"
                self.cta.fail(op, f"reads {what} at {self.locate(address)}, which thread {writer} stored with "
                                  f"{how} and has not made visible to the async proxy (missing fence_proxy_async "
                                  f"after the store{why})", readers[0] if reader == writer else reader)
            self.cta.fail(op, f"reads {what} at {self.locate(address)}, which thread {writer} stored and fenced with "
                              "no bar_sync since then ordering it before this warp", reader)
