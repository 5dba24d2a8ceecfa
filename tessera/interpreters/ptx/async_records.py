"""Asynchronous accesses in the PTX executor's happens-before (`happens_before`, whose docstring has the model): the
completion records of async-proxy reads (wgmma operands, bulk stores and reductions, completed by their waits) and
the writes of TMA, bulk and cp.async copies.

A completed async read of a byte (`completions`, `r_async`, `wgmma_groups`) is a read at the point of the wait
that completed it: a later generic write of the byte must happen after that point of one of the waiting lanes
(a refill racing the wgmma that still reads the slot). An asynchronous write must come after the last generic
read and write of each byte it overwrites, and resets the byte's generic records; a cp.async landing is a write
by its issuing thread.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.byte_ranges import cta_hulls
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

_CHUNK = facts.SWIZZLE_CHUNK_BYTES


class AsyncRecords:
    """The asynchronous accesses of `HappensBefore` (its base class: the clocks and records are `HappensBefore`'s)."""

    def reads_completed(self, flat: np.ndarray | list, lanes: np.ndarray, inst, group: int, reader: str = "",
                        by: str = "the wgmma") -> None:
        """A wait of `lanes` (a wgmma.wait_group of warpgroup `group`, or the issuing thread's
        cp.async.bulk.wait_group covering a bulk store's or reduction's read: `reader` names it, in the row
        `group` the caller keeps for such reads, "... read until its <wait>") completed async-proxy reads of `flat`: a later write of those
        bytes must happen after this point of one of the lanes, whatever order the executor ran them in. `flat`
        may be a list of pieces, each an index array or a range (a slice)."""
        reader = reader or f"a wgmma of warpgroup {group} read until its wgmma.wait_group"
        self.completions.append((lanes, self.own_epochs(lanes), inst.line, reader, by))
        self.completed_groups.append((0, -1))
        self.r_any = True
        if group >= len(self.r_async):
            self.r_async = np.vstack([self.r_async, np.zeros((group + 1 - len(self.r_async), self.shared), np.int32)])
        for piece in flat if isinstance(flat, list) else (flat,):
            self.r_async[group, piece] = len(self.completions)

    def wgmma_wait_completed(self, found: list[tuple], lanes: np.ndarray, inst) -> None:
        """`wgmma_groups_completed` of each (warpgroup, first group, last group, its lanes, where they lie in
        `lanes`: a slice or a mask) of `found`, the groups one wgmma.wait_group of `lanes` completed, in order:
        the lanes' present points gathered once for the wait, not once per warpgroup. Where each completed one
        group of its own warpgroup (a consumer's wait) that no earlier wait completed, their completions are
        appended in order and their groups set to them in one assignment, as one call each would."""
        epochs = self.own_epochs(lanes)  # (a gather, never modified: each record keeps a part)
        ws, firsts, lasts = (list(column) for column in zip(*(entry[:3] for entry in found)))
        if firsts == lasts and len(set(ws)) == len(ws) and max(lasts) < self.wgmma_groups.shape[1]:
            at = (ws, firsts)
            if not any_set(self.wgmma_groups[at]):
                start = len(self.completions)
                for w, first, _, members, where in found:
                    self.completions.append(self._wgmma_record(w, members, epochs[where], inst))
                    self.completed_groups.append((first, first))
                self.wgmma_groups[at] = np.arange(start + 1, len(self.completions) + 1)
                return
        for w, first, last, members, where in found:
            self.wgmma_groups_completed(w, first, last, members, inst, epochs[where])

    def _wgmma_record(self, w: int, lanes: np.ndarray, epochs: np.ndarray, inst) -> tuple:
        """The completion (`completions`) of a wgmma.wait_group of `lanes`, at `epochs`, of warpgroup `w`'s reads."""
        return (lanes, epochs, inst.line, f"a wgmma of warpgroup {w % self._per_cta()} read until its wgmma.wait_group",
                "the wgmma")

    def wgmma_groups_completed(self, w: int, first: int, last: int, lanes: np.ndarray, inst,
                               epochs: np.ndarray | None = None) -> None:
        """A wgmma.wait_group of `lanes` completed wgmma groups `first`..`last` of warpgroup `w` (of the batch):
        the shared bytes whose last wgmma read belongs to one of them (`wgmma_reads`) were read until this point
        of one of the lanes; a later write of them must happen after it (`_after_async_reads`). A group is one
        per warpgroup, so any thread's wait that completed it frees its bytes [memory_model.WGMMA_GROUP_PER_WARPGROUP]:
        a group an earlier wait of other warps completed is free after either wait (CUTLASS's and FA3's
        consumer_release signals from one thread after its own warp's wait, whichever warp waited first).
        `epochs`: the lanes' present points (`clock`), where the caller gathered them (never modified after)."""
        if last >= self.wgmma_groups.shape[1]:
            grown = np.zeros((len(self.wgmma_groups), max(2 * self.wgmma_groups.shape[1], last + 1)), np.int32)
            grown[:, :self.wgmma_groups.shape[1]] = self.wgmma_groups
            self.wgmma_groups = grown
        groups = self.wgmma_groups[w, first:last + 1]
        record = self._wgmma_record(w, lanes, self.own_epochs(lanes) if epochs is None else epochs, inst)
        for c in sorted(set(groups.tolist())):  # (np.unique's order; a handful of groups: no array sort)
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
        if not (self.races and flat.size and span is not None):
            self._async_write_checks(inst, lanes, flat, what, known, clocks)
            self.async_written(flat if span is None else span)
            return
        # a range: its records read as a range, and cleared only where some are (a refill of a slot whose bytes no
        # generic access touched since the last copy, the main loop's, clears nothing)
        index, rows = flat[None, :], None if known is None else clocks
        read, written = self.reads.any_in(span), self.written_in(span)
        if read:
            self._check_reads(inst, lanes[:1], index, f"{what} writes", rows)
        if written:
            self._check(inst, lanes[:1], index, self.w_lane, self.w_clock, self.w_line, "wrote", f"{what} writes", rows)
        self._after_peer_reads(inst, lanes[:1], index, f"{what} writes")
        if read or self.peer_read_any or self.strong_read_any:
            self.clear_reads(span)
        if written:
            self.w_clock[span] = 0

    def async_writes_clear(self, lanes: np.ndarray, slots: np.ndarray, rows: slice | np.ndarray,
                           dense: tuple[int, int]) -> bool:
        """Whether `async_write` of one copy by each of `lanes` into the range `dense` (offsets, whole 16-byte
        chunks) of its own CTA's shared memory (`slots`; `rows`, the same as a slice where they are consecutive)
        passes every check and clears no generic record: with races on, no generic read or write, peer or strong
        read or completed bulk-store read (`r_async`) recorded in the ranges, and every completed wgmma read of
        their bytes (`_span_completions`, here over the CTAs' ranges at once) ordered before the lane's present
        point.
        Changes nothing."""
        if not self.races or self.r_any or self.peer_read_any or self.strong_read_any:
            return False
        size = self._cta_bytes()
        spans = [slice(slot * size + dense[0], slot * size + dense[1]) for slot in slots.tolist()]
        if self.reads.any and any(self.reads.any_in(span) for span in spans):
            return False
        if self.w_any and any(self.written_in(span) for span in spans):
            return False
        if not self.completions or self.wgmma_reads is None:
            return True
        per_cta = self._per_cta()
        reads = self.wgmma_reads.reshape(per_cta, len(self.wgmma_groups) // per_cta, -1)[
            :, rows, dense[0] // _CHUNK:-(-dense[1] // _CHUNK)]  # [warpgroup of its CTA, CTA, chunk]
        lows, highs, width = reads.min(axis=2).tolist(), reads.max(axis=2).tolist(), self.wgmma_groups.shape[1]
        for i, (lane, slot) in enumerate(zip(lanes.tolist(), slots.tolist())):
            found: set[int] = set()
            for r in range(per_cta):
                for last in (lows[r][i],) if lows[r][i] == highs[r][i] else _present(reads[r, i], lows[r][i]):
                    if 0 < last <= width:
                        found.add(int(self.wgmma_groups[slot * per_cta + r, last - 1]))
            found.discard(0)
            clock = self.clock[lane]
            if not all(self._knows_completion(clock, c) for c in found):
                return False
        return True

    def _knows_completion(self, clock: np.ndarray, c: int) -> bool:
        """Whether the point whose clock row is `clock` comes after completion `c` (1-based, `completions`): after
        the wait of one of the lanes that completed it. Its first lane is asked first: a slot's refill follows the
        arrive of the warpgroup whose wait completed the reads, so the first lane decides it, mostly."""
        readers, epochs = self.completions[c - 1][:2]
        t = self.threads
        if clock[int(readers[0]) % t] >= epochs[0]:
            return True
        return any_set(clock[readers % t] >= epochs)

    def async_writes(self, rows: slice | np.ndarray, first: int, stop: int) -> None:
        """`async_write` of the copies `async_writes_clear` passed (their chunks [first, stop) of each CTA of
        `rows`): their bytes' completed wgmma reads no longer apply (`_forget_async_reads`), at once."""
        if self.races and self.completions and self.wgmma_reads is not None:
            per_cta = self._per_cta()
            self.wgmma_reads.reshape(per_cta, len(self.wgmma_groups) // per_cta, -1)[:, rows, first:stop] = 0

    def _async_write_checks(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, known, clocks) -> None:
        """`async_write`'s generic checks of the bytes `flat`, byte by byte."""
        if self.races and flat.size:
            index = flat[None, :]
            rows = None if known is None else clocks
            self._check_reads(inst, lanes[:1], index, f"{what} writes", rows)
            self._check(inst, lanes[:1], index, self.w_lane, self.w_clock, self.w_line, "wrote", f"{what} writes",
                        rows)
            self._after_peer_reads(inst, lanes[:1], index, f"{what} writes")

    def _after_async_reads(self, inst, lanes: np.ndarray, index: np.ndarray, what: str, clocks: np.ndarray | None,
                           span: slice | None = None, hulls: list[slice] | None = None) -> None:
        """Each write of `index` [rows, bytes] (row i by `lanes[i]`, whose clock is `clocks[i]`; None: the lanes' own
        clocks, gathered only for the rows a completion concerns) must happen after
        the wgmma.wait_group that completed every async read of its bytes, of each warpgroup: checked row by row,
        as one instruction of many threads (a store of two warpgroups at once) is many writes. `span`: the range
        the one row of `index` fills, when it fills one (read as a range; a finding is located byte by byte).
        `hulls`: `byte_ranges.cta_hulls` of `index`, where the caller has them."""
        if not (self.races and self.completions):
            return  # r_async is all zero: no completed async read recorded
        if span is not None:
            for c in self._span_completions(span):
                if not self._knows_completion(self.clock[lanes[0]] if clocks is None else clocks[0], c):
                    self._after_async_reads(inst, lanes, index, what, clocks)  # raises, naming the byte
            self._forget_async_reads(span)
            return
        hulls = cta_hulls(index.reshape(-1), self._cta_bytes()) if hulls is None else hulls
        if hulls is not None and not any(self._async_read_in(hull) for hull in hulls):
            return  # (a store of the batch's CTAs over bytes no completed async read recorded: the key-bias table)
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
            known = self.clock[lanes[rows]] if clocks is None else clocks[rows]
            ordered = (known[:, readers % self.threads] >= epochs).any(axis=1)
            if not all_set(ordered):
                r = int(rows[np.argmin(ordered)])
                byte = int(index[r, np.argmax((ends[:, r] == c).any(axis=0))])
                raise self.hazard(inst, f"{what} overwrites {self.where(byte)}, which {reader} at line {line}, "
                                        "and no synchronisation orders that wait before this "
                                        f"write (race: the slot was released before {by} reading it completed)",
                                  int(lanes[r]))
        self._forget_async_reads(index.reshape(-1))

    def _async_read_in(self, span: slice) -> bool:
        """Whether some byte of the range `span` (one CTA's) may hold a completed async read's record (`r_async`,
        or `wgmma_reads` of its chunks): when none does, `_async_ends` finds none at any byte of it."""
        if self.r_any and np.count_nonzero(self.r_async[:, span]):
            return True
        return self.wgmma_reads is not None and np.count_nonzero(self.wgmma_reads[:, self.chunk_span(span)]) > 0

    def _forget_async_reads(self, where: np.ndarray | slice) -> None:
        """The bytes `where` were written after their completed async reads: those no longer apply."""
        if self.r_any:
            self.r_async[:, where] = 0
        if self.wgmma_reads is not None:  # no wgmma reads them now (`asynchrony` refuses writes before)
            touched = self.chunk_span(where) if isinstance(where, slice) else self.chunk_of(where)
            if np.count_nonzero(self.wgmma_reads[:, touched]):
                self.wgmma_reads[:, self._whole_chunks(where)] = 0

    def _span_completions(self, span: slice) -> set[int]:
        """The completed async reads (1 + index into `completions`) of some byte of the range `span` (one CTA's),
        found row by row: a row whose bytes agree (a slot read by one group, or by none) costs no gather."""
        found: set[int] = set()
        if span.stop <= span.start:
            return found
        ends = self.r_async[:, span]
        if self.r_any and np.count_nonzero(ends):  # (a count, cheaper than the bounds, finds a range no bulk store read)
            for row, low, high in _row_bounds(ends):
                found.update((low,) if low == high else _present(row, low))
        chunks = None if self.wgmma_reads is None else self.wgmma_reads[:, self.chunk_span(span)]
        if chunks is not None and np.count_nonzero(chunks):
            per_cta = self._per_cta()
            first = span.start // self._cta_bytes() * per_cta
            width = self.wgmma_groups.shape[1]
            for r, (row, low, high) in enumerate(_row_bounds(chunks)):
                for last in (low,) if low == high else _present(row, low):
                    if 0 < last <= width:
                        found.add(int(self.wgmma_groups[first + r, last - 1]))
        found.discard(0)
        return found

    def async_written(self, flat: np.ndarray) -> None:
        """An asynchronous copy wrote `flat`: the generic records no longer apply."""
        self.w_clock[flat] = 0
        self.clear_reads(flat)

    def landed(self, lanes: np.ndarray, index: np.ndarray, lines: np.ndarray, through_mbarrier: bool) -> None:
        """cp.async copies of `lanes` (from the instructions at `lines`) completed into `index` [lanes, bytes] at
        the issuing threads' present point: a write by them, as a generic store is; `through_mbarrier`: completed
        by a cp.async.mbarrier.arrive, which makes them visible to the async proxy of the threads the completion
        happens before [memory_model.CP_ASYNC_PROXY], not by a cp.async.wait_group."""
        self.w_lane[index] = lanes[:, None]
        self.w_clock[index] = self.own_epochs(lanes)[:, None]
        self.note_written(index)
        self.w_line[index] = lines[:, None]
        self.w_mbarrier[index] = through_mbarrier
        self.clear_reads(index)


def _row_bounds(rows: np.ndarray):
    """(row, least value, greatest value) of each row of `rows` [rows, bytes > 0], the bounds found for all rows
    in two reductions."""
    return zip(rows, rows.min(axis=1).tolist(), rows.max(axis=1).tolist())


def _present(values: np.ndarray, low: int) -> list[int]:
    """The distinct values of `values` (small non-negative integers, the least `low`), ascending: a count, not a
    sort."""
    return (np.flatnonzero(np.bincount(values - low if low else values)) + low).tolist()
