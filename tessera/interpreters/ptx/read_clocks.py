"""The readers of each shared-memory byte since its last write, as FastTrack keeps them: an epoch while the
reads are ordered, a read vector clock once two concurrent threads have read the byte.

A write must happen after *every* read of the byte since the previous write. Keeping only the last reader
misses the race in

    thread 0: ld [x]                      (no barrier between thread 0 and thread 1's store)
    thread 1: ld [x]; ...; st [x]         (thread 1's own read hides thread 0's)

so a byte is in one of two modes [FastTrack, Flanagan and Freund, PLDI 2009]:

- *epoch* (`lane`, `clock`, `line`): one read (or a chain of reads each ordered after the one before); a new
  read replaces it when the old one happens before it (or is the same thread's), since a write ordered after
  the new read is then ordered after the old one too;
- *shared*: `row[byte] = k + 1`, and row k of the pool holds, per thread of the CTA, the epoch of its last
  read since the write (0: none), with the line and the lane of that read for the report.

Rows are shared between bytes: the bytes one instruction's lanes read with the same previous state get the
same new row (computed once, vectorised), so a tile read concurrently by four warps costs a few rows, not a
vector clock per byte. The pool is compacted when it fills. A write checks the epoch or every entry of the
row against its clock and clears the byte.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.truth import all_set, any_set

_POOL_START = 256
_POOL_LIMIT = 1 << 12
"""Rows the pool grows to by doubling; beyond, it grows only when half of it is still referred to after a
compaction (rows no byte refers to any more are dropped)."""


class ReadClocks:
    """The read records of `size` bytes read by lanes of CTAs of `threads` threads (lane % threads is the
    thread); see the module docstring."""

    def __init__(self, size: int, threads: int):
        self.size, self.threads = size, threads
        self.lane = np.zeros(size, np.int32)
        self.clock = np.zeros(size, np.int32)  # epoch mode: 0 when no read since the last write
        self.line = np.zeros(size, np.int32)
        self.row = np.zeros(size, np.int32)  # shared mode: pool row + 1
        self._allocate(_POOL_START)
        self.shared = False  # some byte is in shared mode
        self.any = False  # some byte may hold a read (`record` ran since the last `reset`)

    def _allocate(self, rows: int) -> None:
        self.pool_clock = np.zeros((rows, self.threads), np.int32)
        self.pool_line = np.zeros((rows, self.threads), np.int32)
        self.pool_lane = np.zeros((rows, self.threads), np.int32)
        self.used = 0

    def reset(self) -> None:
        if self.any:  # (else no read recorded since the last reset: every record is zero)
            self.clock.fill(0)
            self.row.fill(0)
        self.used = 0
        self.shared = False
        self.any = False

    def clear(self, index) -> None:
        """A write (checked) or an asynchronous copy replaced the bytes `index`: no read since."""
        self.clock[index] = 0
        if self.shared:
            self.row[index] = 0

    def any_in(self, span: slice) -> bool:
        """Whether some byte of the range `span` was read since its last write."""
        return self.any and bool(np.count_nonzero(self.clock[span])
                                 or (self.shared and np.count_nonzero(self.row[span])))

    # region recording reads
    def record(self, lanes: np.ndarray, index: np.ndarray, epochs: np.ndarray, line: int, clocks: np.ndarray) -> None:
        """`lanes` (epochs: their own clock entries) read `index` [lanes, bytes] at `line`; `clocks` is the
        machine's [lane, thread] clock matrix (which earlier reads happen before these)."""
        self.any = True
        n, k = index.shape
        flat = index.reshape(-1)
        readers = np.repeat(lanes, k)
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        first = np.r_[True, ordered[1:] != ordered[:-1]]
        single = np.ones(len(flat), bool)
        if not all_set(first):  # bytes several lanes of this instruction read: concurrent reads
            starts = np.flatnonzero(first)
            counts = np.diff(np.r_[starts, len(flat)])
            single[order] = np.repeat(counts == 1, counts)
        old_clock, old_lane, old_row = self.clock[flat], self.lane[flat], self.row[flat]
        reader_epochs = np.repeat(epochs, k)
        simple = single & (old_row == 0)
        if any_set(simple):
            before = old_clock[simple]
            replace = (before == 0) | (old_lane[simple] == readers[simple]) | \
                (clocks[readers[simple], old_lane[simple] % self.threads] >= before)
            where = np.flatnonzero(simple)
            if not all_set(replace):
                simple[where[~replace]] = False
                where = where[replace]
            b = flat[where]
            self.lane[b] = readers[where]
            self.clock[b] = reader_epochs[where]
            self.line[b] = line
        rest = np.flatnonzero(~simple)
        if len(rest):
            self._share(flat[rest], readers[rest], reader_epochs[rest], line, old_clock[rest], old_lane[rest],
                        old_row[rest])

    def _share(self, flat, readers, epochs, line, old_clock, old_lane, old_row) -> None:
        """Put the bytes `flat` (with repeats: one element per reader) in shared mode: each gets the row of its
        previous state joined with this instruction's readers of it. Bytes with the same previous state and the
        same readers share the new row."""
        old_line = self.line[flat]
        # the previous state of each byte as a key: its row, or its epoch (lane, clock, line)
        previous = np.stack([old_row.astype(np.int64), np.where(old_row == 0, old_lane, -1),
                             np.where(old_row == 0, old_clock, -1), np.where(old_row == 0, old_line, -1)], axis=1)
        byte_ids, byte_of = np.unique(flat, return_inverse=True)
        byte_of = byte_of.reshape(-1)
        # the readers of each byte as a set: a hash of its sorted lanes (bytes read by the same lanes agree)
        mix = (readers.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        with np.errstate(over="ignore"):
            digest = np.zeros(len(byte_ids), np.uint64)
            np.bitwise_xor.at(digest, byte_of, mix)
            count = np.bincount(byte_of, minlength=len(byte_ids))
        first = np.zeros(len(byte_ids), np.int64)
        first[byte_of[::-1]] = np.arange(len(flat))[::-1]
        keys = np.concatenate([previous[first], digest.view(np.int64)[:, None], count[:, None]], axis=1)
        unique_keys, key_of = np.unique(keys, axis=0, return_inverse=True)
        key_of = key_of.reshape(-1)
        rows = self._new_rows(len(unique_keys))
        base = unique_keys[:, 0]
        shared_base = base > 0
        if any_set(shared_base):
            src = base[shared_base] - 1
            self.pool_clock[rows[shared_base]] = self.pool_clock[src]
            self.pool_line[rows[shared_base]] = self.pool_line[src]
            self.pool_lane[rows[shared_base]] = self.pool_lane[src]
        epoch_base = ~shared_base & (unique_keys[:, 2] > 0)
        if any_set(epoch_base):
            r, lane = rows[epoch_base], unique_keys[epoch_base, 1]
            t = lane % self.threads
            self.pool_clock[r, t] = unique_keys[epoch_base, 2]
            self.pool_line[r, t] = unique_keys[epoch_base, 3]
            self.pool_lane[r, t] = lane
        element_rows = rows[key_of[byte_of]]
        t = readers % self.threads
        self.pool_clock[element_rows, t] = epochs
        self.pool_line[element_rows, t] = line
        self.pool_lane[element_rows, t] = readers
        self.row[byte_ids] = rows[key_of] + 1
        self.clock[byte_ids] = 0
        self.shared = True

    def _new_rows(self, count: int) -> np.ndarray:
        if self.used + count > len(self.pool_clock):
            self._compact(count)
        rows = np.arange(self.used, self.used + count)
        self.pool_clock[rows] = 0
        self.used += count
        return rows

    def _compact(self, extra: int) -> None:
        """Drop the rows no byte refers to; grow the pool if the live rows and `extra` still do not fit."""
        live = np.unique(self.row[self.row > 0]) - 1
        keep = (self.pool_clock[live], self.pool_line[live], self.pool_lane[live])
        need = len(live) + extra
        size = len(self.pool_clock)
        if need > size // 2 or size < _POOL_LIMIT:
            size = max(2 * need, min(2 * size, _POOL_LIMIT), size)
        self._allocate(size)
        self.pool_clock[:len(live)], self.pool_line[:len(live)], self.pool_lane[:len(live)] = keep
        remap = np.zeros(int(live.max()) + 2 if len(live) else 1, np.int32)
        remap[live + 1] = np.arange(1, len(live) + 1, dtype=np.int32)
        self.row[self.row > 0] = remap[self.row[self.row > 0]]
        self.used = len(live)

    # endregion
    def unordered(self, lanes: np.ndarray, index: np.ndarray, clocks: np.ndarray, rows: np.ndarray | None = None):
        """The first read of `index` [lanes, bytes] that does not happen before the lane of its row (the
        writer): (row i, column j, reader lane, line), or None. `rows` [lanes, threads]: the writers' clocks in
        the frame of the bytes' CTA when they are of another CTA of the cluster (what each knows of this CTA's
        threads; no read is then the writer's own), else `clocks`, the machine's [lane, thread] matrix."""
        epochs = self.clock[index]
        if any_set(epochs):
            other = self.lane[index]
            if rows is None:
                bad = (epochs > clocks[lanes[:, None], other % self.threads]) & (other != lanes[:, None])
            else:
                bad = epochs > rows[np.arange(len(lanes))[:, None], other % self.threads]
            if any_set(bad):
                i, j = np.unravel_index(np.argmax(bad), bad.shape)
                b = int(index[i, j])
                return int(i), int(j), int(other[i, j]), int(self.line[b])
        if not self.shared:
            return None
        row_of = self.row[index]
        if not any_set(row_of):
            return None
        i_all, j_all = np.nonzero(row_of)
        pairs = np.stack([row_of[i_all, j_all].astype(np.int64), i_all.astype(np.int64)], axis=1)
        unique_pairs, first = np.unique(pairs, axis=0, return_index=True)
        row_clock = self.pool_clock[unique_pairs[:, 0] - 1]  # [pairs, threads]
        writer = unique_pairs[:, 1]  # the writer's position in `lanes`
        if rows is None:
            bad = row_clock > clocks[lanes[writer]]
            bad[np.arange(len(writer)), lanes[writer] % self.threads] = False  # the writer's own reads: program order
        else:
            bad = row_clock > rows[writer]
        if not any_set(bad):
            return None
        p, t = np.unravel_index(np.argmax(bad), bad.shape)
        r = int(unique_pairs[p, 0]) - 1
        e = int(first[p])
        return int(i_all[e]), int(j_all[e]), int(self.pool_lane[r, t]), int(self.pool_line[r, t])


__all__ = ["ReadClocks"]
