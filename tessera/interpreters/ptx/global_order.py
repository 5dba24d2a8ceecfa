"""Happens-before on global memory in the PTX executor: races between threads and between CTAs, and the
release/acquire edges of atomics and strong accesses.

Global memory is shared by every CTA of the grid, and nothing but its own accesses orders two CTAs: without a
grid-wide barrier, only atomics and strong accesses with release/acquire semantics do
[memory_model.RELEASE_ACQUIRE]. Each global byte keeps its last write and its last read, and the last read by
a CTA other than that reader's, each as (CTA rank + 1, thread, epoch, line, kind); the records last the whole
launch, across batches (a CTA runs in one batch: its epochs are those of `happens_before`'s clocks then).
Two accesses to a byte, one a write, are a race [memory_model.DATA_RACE] unless

- they are ordered: by the same CTA's clocks (barriers, mbarriers, and release/acquire pairs inside the CTA),
  or, for another CTA's access, by what the accessing thread acquired of that CTA (`HappensBefore.remote`);
- or they are *morally strong* [memory_model.MORALLY_STRONG]: both strong (atom, red, ld/st with .relaxed,
  .acquire, .release or .volatile; bulk reductions), through the same proxy, each with a scope that includes
  the other's thread (.cta only within one CTA). Atomics never race with each other.

The report names both sides: the instruction and line, thread and CTA, the proxy (generic, or async: TMA
loads and stores, bulk copies and reductions) and the synchronisation that was missing.

Release and acquire patterns [memory_model.RELEASE_ACQUIRE] on a location M (its first byte; a shared-memory
flag is the location -1 - its flat index, and orders threads of the CTA the same way):
- a release operation (st.release, red/atom.release or .acq_rel), or a strong write after a fence.acq_rel /
  fence.sc / fence.release / membar of the same thread (the release is the fence's point), publishes the
  thread's clock, and what it knows of other CTAs, at M;
- an acquire operation (ld.acquire, atom.acquire or .acq_rel) of M, or a strong read of M followed by such a
  fence (`atom` reads; `red` does not: its strong read forms no acquire pattern), takes in every release
  published at M by a thread whose scope and its own include each other.
Joining every release at M so far (not only the one whose value the read returns) can hide a race whose
acquire read an older value; it never reports a correct kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tessera.interpreters.byte_box import box_offsets, box_view

WEAK, STRONG_CTA, STRONG_GPU, ASYNC, ASYNC_REDUCE = 1, 2, 3, 4, 5
"""How an access is made: a weak generic ld/st; a strong generic access of scope .cta, or .cluster/.gpu/.sys;
the async proxy (TMA and bulk copies); a bulk reduction (async proxy, element-wise atomic)."""
_STRONG = np.array([False, False, True, True, False, True])
_WIDE = np.array([False, False, False, True, False, True])  # a scope wider than the CTA
_ASYNC = np.array([False, False, False, False, True, True])
_PROXY = {WEAK: "the generic proxy", STRONG_CTA: "the generic proxy (strong, .cta)",
          STRONG_GPU: "the generic proxy (strong)", ASYNC: "the async proxy",
          ASYNC_REDUCE: "the async proxy (bulk reduction)"}
_SCOPES = {"cta": STRONG_CTA}


def strong_kind(modifiers) -> int:
    """The kind of an ld/st/atom/red from its modifiers: strong when it has .relaxed/.acquire/.release/
    .acq_rel/.volatile (atom and red always are), of scope .cta or wider (default .gpu)."""
    return STRONG_CTA if "cta" in modifiers else STRONG_GPU


@dataclass(frozen=True)
class StridedBox:
    """The global bytes start + sum_k i_k * strides[k] (0 <= i_k < shape[k]), in that row-major order: the
    bytes of a TMA box that lies inside its tensor. Their records are read and written through strided views
    (`view`), with no index array, and `index` lists them where a finding must name a byte."""

    start: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def view(self, array: np.ndarray) -> np.ndarray:
        """The box's elements of the per-byte `array` (a writable view)."""
        return box_view(array, self.start, self.shape, self.strides)

    def index(self) -> np.ndarray:
        """[1, bytes]: the flat positions, in order."""
        return box_offsets(self.start, self.shape, self.strides).reshape(1, -1)

    def hull(self) -> tuple[int, int]:
        """[low, high): the least range holding every byte of the box."""
        reach = [(n - 1) * stride for n, stride in zip(self.shape, self.strides)]
        return self.start + sum(min(r, 0) for r in reach), self.start + sum(max(r, 0) for r in reach) + 1

    def meets(self, other: "StridedBox") -> bool:
        """Whether the two boxes share a byte."""
        (a, wa), (b, wb) = _runs(self), _runs(other)
        if (len(a) > 1 and (np.diff(a) < wa).any()) or (len(b) > 1 and (np.diff(b) < wb).any()):
            return bool(np.intersect1d(self.index(), other.index()).size)  # runs that overlap themselves
        last = np.searchsorted(b, a + wa) - 1  # per run of `a`, the last run of `b` starting before its end
        return bool(((last >= 0) & (b[np.maximum(last, 0)] + wb > a)).any())


@lru_cache(maxsize=1024)
def _runs(box: StridedBox) -> tuple[np.ndarray, int]:
    """(first bytes, ascending; length): the box as runs of consecutive bytes, a row of its innermost dimension
    each where that dimension's stride is 1, else a byte each (kept: a grid's boxes recur in every launch)."""
    if box.strides and box.strides[-1] == 1:
        starts, width = box_offsets(box.start, box.shape[:-1], box.strides[:-1]), box.shape[-1]
    else:
        starts, width = box_offsets(box.start, box.shape, box.strides), 1
    starts = np.sort(starts)
    starts.setflags(write=False)
    return starts, width


def _put(array: np.ndarray, where, value) -> None:
    """array[where] = value, `where` an index or a `StridedBox`."""
    if isinstance(where, StridedBox):
        where.view(array)[...] = value
    else:
        array[where] = value


class GlobalOrder:
    """The access records of a launch's global memory and the release records of its locations; see the
    module docstring. `m` is the machine (its `tracker.hb` holds the clocks), `size` the bytes of global
    memory. Records are allocated at the first access (zeroed pages cost nothing until touched)."""

    keep_boxes = True
    """Keep the records of TMA boxes as one per box (`boxes`); False records each read in the per-byte tables at
    once (the same records: tests compare the two)."""

    FIELDS = ("who", "epoch", "line")
    """Per byte and side: `who` packs (CTA rank + 1) << 16 | thread << 3 | kind (0: none; thread < 1024 needs
    13 bits with the kind), then the epoch and the line."""

    def __init__(self, m, size: int):
        self.m, self.size = m, size
        self.records: dict[str, dict[str, np.ndarray]] = {}
        # location -> {(releasing CTA rank, scope wider than the CTA): [kind, clock, remote, fenced]}: the join of
        # every release published there by that CTA at that scope (an acquire takes in all of them, so their join
        # is what it takes: one entry, not one per release, however often a lock changes hands)
        self.releases: dict[int, dict[tuple[int, bool], list]] = {}
        self.read_set: np.ndarray | None = None  # per byte: 0, or its readers' set in `sets` (`_record_read`)
        self.sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(np.zeros(0, np.int64),) * 3]
        self._memo: dict[tuple, int] = {}  # (old readers, new readers, line) -> set: bytes read alike share one
        self.until: dict[str, np.ndarray] | None = None  # TMA loads' reads until their complete-tx (`read_until`)
        # TMA boxes whose bytes' read records are all alike, kept once per box rather than per byte: box ->
        # [read set, who, epoch, line (as the "read" table and `read_set` would hold them), the `until` record
        # (who, barrier, phase, line) or None], with its hull; written into the per-byte tables (`_settle`) when
        # another access reaches the hull. `touched`: ranges of global memory the per-byte tables may hold a
        # record in (outside them every record is zero)
        self.boxes: dict[StridedBox, list] = {}
        self.hulls: dict[StridedBox, tuple[int, int]] = {}
        self.touched: list[tuple[int, int]] = []
        self.reset_batch()

    def reset_batch(self) -> None:
        """A new batch of CTAs: lanes are new threads (their fences and pending acquires are gone)."""
        m = self.m
        self.fence_release: dict[int, tuple] = {}  # lane -> released (clock, fenced, remote) at its last fence
        self.pending_acquire: dict[int, list] = {}  # lane -> releases its strong reads saw since its last fence
        gx, gy, _ = m.grid
        cid = m.ctaid[m.lane_cta]
        self.lane_rank = (cid[:, 0] + gx * (cid[:, 1] + gy * cid[:, 2])).astype(np.int64)
        self.lane_who = (self.lane_rank + 1) << 16 | (np.arange(m.lanes) % m.threads) << 3

    def _table(self, side: str) -> dict[str, np.ndarray]:
        """The records of one side ("write", "read", "other"), allocated at its first use: zeroed pages cost
        nothing until touched, so memory grows with the bytes the kernel touches (12 bytes a side, 16 for
        grids of 2^15 CTAs or more, whose packed `who` needs 64 bits)."""
        table = self.records.get(side)
        if table is None:
            wide = int(np.prod(self.m.grid)) >= (1 << 15) - 1  # (rank + 1) << 16 must fit in 31 bits
            table = self.records[side] = {"who": np.zeros(self.size, np.int64 if wide else np.int32),
                                          "epoch": np.zeros(self.size, np.int32), "line": np.zeros(self.size, np.int32)}
        return table

    # region accesses
    def access(self, inst, lanes: np.ndarray, index: np.ndarray, write: bool, kind: int) -> None:
        """`lanes` access the global bytes `index` [lanes, bytes] (flat buffer positions) as `kind`; a race with an
        earlier access is raised (`PtxHazardError`), then the access is recorded."""
        hb = self.m.tracker.hb
        if not hb.races or index.size == 0:
            return
        index = np.asarray(index, np.int64).reshape(len(lanes), -1)
        low, high = int(index.min()), int(index.max()) + 1
        self._settle(low, high)
        self._touch(low, high)
        judged = self._check_until(inst, lanes, index) if write and self.until is not None else None
        for side in ("write", "read") if write else ("write",):
            if side in self.records:
                table = self.records[side]
                who = table["who"][index]
                if side == "read" and self.read_set is not None:
                    who = np.where(self.read_set[index] == 0, who, 0)  # those bytes' readers are in their set
                if side == "read" and judged is not None:
                    who = np.where(judged & (who == self.until["who"][index]), 0, who)  # by their completion
                self._check(inst, lanes, index, who, table["epoch"][index], table["line"][index], write, kind, side)
        if write and self.read_set is not None:
            self._check_sets(inst, lanes, index, kind)
        if write and not _STRONG[kind] and len(lanes) > 1:
            self._check_together(inst, lanes, index, kind)
        if _ASYNC[kind] and (not write or kind == ASYNC_REDUCE) and "write" in self.records:
            self._check_proxy_fenced(inst, lanes, index, kind)  # a bulk reduction reads what it adds to
        who = (self.lane_who[lanes] | kind)[:, None]
        epochs = hb.clock[lanes, lanes % self.m.threads][:, None]
        if write:
            if self.until is not None:
                self.until["phase"][index] = 0
            table = self._table("write")
            table["who"][index], table["epoch"][index], table["line"][index] = who, epochs, inst.line
            if "read" in self.records:
                self.records["read"]["who"][index] = 0
            if self.read_set is not None:
                self.read_set[index] = 0
            return
        self._record_read(inst, lanes, index, who, epochs)

    def read_box(self, inst, lane: int, box: StridedBox, kind: int) -> None:
        """`access` of one thread's async-proxy read of `box` (a TMA load), through strided views of the records:
        decided once for the whole box where its bytes' records agree (no earlier write, the same earlier
        readers: every byte of a box read alike before), else by `access`, byte by byte."""
        hb = self.m.tracker.hb
        if not hb.races:
            return
        lanes = np.array([lane])
        entry = self.boxes.get(box)
        if entry is None:
            low, high = box.hull()
            self._settle(low, high, box)
            if self.keep_boxes and not self._touched(low, high):  # every record is zero: kept as one from now
                entry = self.boxes[box] = [0, 0, 0, 0, None]
                self.hulls[box] = (low, high)
        if entry is not None:
            self._read_box_records(inst, lane, entry, kind)
            return
        writes = self.records.get("write")
        if writes is not None and box.view(writes["who"]).any():
            self.access(inst, lanes, box.index(), False, kind)
            return
        read = self._table("read")
        who, epoch, line = (box.view(read[f]) for f in self.FIELDS)
        ids = None if self.read_set is None else box.view(self.read_set)
        if not (_uniform(who) and _uniform(epoch) and _uniform(line) and (ids is None or _uniform(ids))):
            self.access(inst, lanes, box.index(), False, kind)
            return
        mine = int(self.lane_who[lane]) | kind
        now = int(hb.clock[lane, lane % self.m.threads])
        s, w, e, l_ = (0 if ids is None else int(ids.flat[0])), int(who.flat[0]), int(epoch.flat[0]), int(line.flat[0])
        if not s and (not w or self._ordered(lanes, np.array([[w]]), np.array([[e]]))[0, 0]):
            who[...], epoch[...], line[...] = mine, now, inst.line
            return
        if self.read_set is None:
            self.read_set = np.zeros(self.size, np.int32)
        self._read_into(box, s, 0 if s else w, 0 if s else e, l_, lanes, np.array([mine], np.int64),
                        np.array([now], np.int64), inst.line)

    def _read_box_records(self, inst, lane: int, entry: list, kind: int) -> None:
        """`read_box` of a box whose records are kept as one (`boxes`): the same decision on its one record."""
        hb = self.m.tracker.hb
        lanes = np.array([lane])
        mine = int(self.lane_who[lane]) | kind
        now = int(hb.clock[lane, lane % self.m.threads])
        s, w, e, l_ = entry[:4]
        if not s and (not w or self._ordered(lanes, np.array([[w]]), np.array([[e]]))[0, 0]):
            entry[:4] = 0, mine, now, inst.line
            return
        new = self._next_set(s, 0 if s else w, 0 if s else e, l_, lanes, np.array([mine], np.int64),
                             np.array([now], np.int64), inst.line)
        entry[0] = new
        if not new:
            entry[1:4] = mine, now, inst.line

    def _touched(self, low: int, high: int) -> bool:
        """Whether the per-byte tables may hold a record in [low, high)."""
        return any(lo < high and hi > low for lo, hi in self.touched)

    def _touch(self, low: int, high: int) -> None:
        """The per-byte tables may hold records in [low, high) from now (ranges merged where they meet; past 64,
        one range holds them all)."""
        kept = []
        for lo, hi in self.touched:
            if lo <= high and hi >= low:
                low, high = min(lo, low), max(hi, high)
            else:
                kept.append((lo, hi))
        kept.append((low, high))
        if len(kept) > 64:
            kept = [(min(lo for lo, _ in kept), max(hi for _, hi in kept))]
        self.touched = kept

    def _settle(self, low: int, high: int, reaching: StridedBox | None = None) -> None:
        """Write the records of the boxes kept as one (`boxes`) whose hull meets [low, high) (and that share a
        byte with the box `reaching`, the access's, when it is one) into the per-byte tables, where every other
        access reads them."""
        if not self.boxes:
            return
        for box in [b for b, (lo, hi) in self.hulls.items()
                    if lo < high and hi > low and (reaching is None or b.meets(reaching))]:
            s, who, epoch, line, until = self.boxes.pop(box)
            self._touch(*self.hulls.pop(box))
            if s or self.read_set is not None:
                if self.read_set is None:
                    self.read_set = np.zeros(self.size, np.int32)
                _put(self.read_set, box, s)
            if not s:
                read = self._table("read")
                for field, value in zip(self.FIELDS, (who, epoch, line)):
                    _put(read[field], box, value)
            if until is not None:
                self._put_until(box, *until)

    def read_until(self, inst, lane: int, index: np.ndarray | StridedBox, barrier: int, phase: int) -> None:
        """The TMA load `inst` of `lane` (recorded by `access`) reads the global bytes `index` until its complete-tx
        on the tracker's mbarrier instance `barrier` in `phase` [memory_model.TMA_READ_UNTIL_COMPLETE]."""
        who = int(self.lane_who[lane]) | ASYNC
        entry = self.boxes.get(index) if isinstance(index, StridedBox) else None
        if entry is not None:
            entry[4] = (who, barrier, phase, inst.line)
            return
        flat = index if isinstance(index, StridedBox) else np.asarray(index, np.int64).reshape(-1)
        if not isinstance(flat, StridedBox) and not flat.size:  # a box wholly outside the tensor reads nothing
            return
        low, high = index.hull() if isinstance(index, StridedBox) else (int(flat.min()), int(flat.max()) + 1)
        self._settle(low, high)
        self._touch(low, high)
        self._put_until(flat, who, barrier, phase, inst.line)

    def _put_until(self, flat: np.ndarray | StridedBox, who: int, barrier: int, phase: int, line: int) -> None:
        if self.until is None:
            self.until = {"who": np.zeros(self.size, np.int64), "barrier": np.zeros(self.size, np.int32),
                          "phase": np.zeros(self.size, np.int64), "line": np.zeros(self.size, np.int32)}
        # phase + 1 (0: no load reads the byte): zeroed pages cost nothing until touched
        for field, value in (("who", who), ("barrier", barrier), ("phase", phase + 1), ("line", line)):
            _put(self.until[field], flat, value)

    def _check_until(self, inst, lanes: np.ndarray, index: np.ndarray) -> np.ndarray | None:
        """A write of `index` [lanes, bytes] by threads of the CTA whose TMA load reads them: the writer must have
        observed the load's phase complete (a successful wait, or a barrier or mbarrier release after one), not
        merely be ordered after its issue [memory_model.TMA_READ_UNTIL_COMPLETE]. Returns the bytes it judged
        (their read records are then not judged by the issuing thread's clock)."""
        until = self.until
        phase = until["phase"][index] - 1
        mine = (phase >= 0) & ((until["who"][index] >> 16) == (self.lane_rank[lanes] + 1)[:, None])
        if not mine.any():
            return None
        tracker = self.m.tracker
        rows = np.broadcast_to(lanes[:, None], index.shape)[mine]
        unseen = tracker.observed[until["barrier"][index][mine], rows] <= phase[mine]
        if unseen.any():
            k = int(np.argmax(unseen))
            i, j = (int(x[k]) for x in np.nonzero(mine))
            b = int(index[i, j])
            who = int(until["who"][b])
            raise tracker.hb.hazard(
                inst, f"writes {self.where(b)}, which the TMA load at line {int(until['line'][b])} "
                      f"({self.describe((who >> 16) - 1, (who >> 3) & 0x1FFF)}) reads "
                      f"through the async proxy until it completes phase {int(phase[i, j])} of "
                      f"{tracker.barrier_name(int(until['barrier'][b]))}, which this thread has not observed (race: "
                      "the copy may still read the bytes; a successful mbarrier wait for that phase before this "
                      "write is missing)", int(lanes[i]))
        return mine

    def _record_read(self, inst, lanes: np.ndarray, index: np.ndarray, who: np.ndarray, epochs: np.ndarray) -> None:
        """Keep every read of `index` since its last write that no later read of it happens after (FastTrack's
        read epoch, inflated to a set of readers when two reads are concurrent) [memory_model.DATA_RACE]: a
        byte's one reader in the "read" table while each read happens after the one before, else its readers in
        `sets[read_set[byte]]`. A read drops the readers that happen before it (a write ordered after it is
        ordered after them); two threads reading one byte in one instruction are concurrent."""
        read = self._table("read")
        if len(lanes) > 1 and (index == index[:1]).all():
            # every lane reads the same bytes (a broadcast load): one set of readers for bytes read alike before
            row = index[0]
            if self.read_set is None:
                self.read_set = np.zeros(self.size, np.int32)
            s0, pw, pe, pl = self.read_set[row], read["who"][row], read["epoch"][row], read["line"][row]
            if _uniform(s0) and _uniform(pw) and _uniform(pe) and _uniform(pl):
                s = int(s0[0])
                self._read_into(row, s, 0 if s else int(pw[0]), 0 if s else int(pe[0]), int(pl[0]), lanes,
                                who[:, 0], epochs[:, 0], inst.line)
                return
        prev_who, prev_epoch = read["who"][index], read["epoch"][index]
        ids = self.read_set[index] if self.read_set is not None else None
        if len(lanes) == 1 and _uniform(prev_who) and _uniform(prev_epoch) and (ids is None or _uniform(ids)):
            # one thread's bytes (a TMA box, a bulk copy) all read by the same readers before: one decision
            s, pw, pe = (0 if ids is None else int(ids[0, 0])), int(prev_who[0, 0]), int(prev_epoch[0, 0])
            if not s and (not pw or self._ordered(lanes, prev_who[:, :1], prev_epoch[:, :1])[0, 0]):
                read["who"][index], read["epoch"][index], read["line"][index] = who, epochs, inst.line
                return
            lines = read["line"][index]
            if _uniform(lines):
                if self.read_set is None:
                    self.read_set = np.zeros(self.size, np.int32)
                self._read_into(index.reshape(-1), s, 0 if s else pw, 0 if s else pe, int(lines[0, 0]), lanes,
                                who[:, 0], epochs[:, 0], inst.line)
                return
        simple = (prev_who == 0) | self._ordered(lanes, prev_who, prev_epoch)
        if ids is not None:
            simple &= ids == 0
        twice = np.zeros(index.shape, bool)
        if len(lanes) > 1:  # bytes two lanes of this instruction read
            flat = index.reshape(-1)
            order = np.argsort(flat, kind="stable")
            same = flat[order][1:] == flat[order][:-1]
            if same.any():
                hit = np.zeros(flat.size, bool)
                hit[order[1:][same]] = hit[order[:-1][same]] = True
                twice = hit.reshape(index.shape)
                simple &= ~twice
        if simple.all():
            read["who"][index], read["epoch"][index], read["line"][index] = who, epochs, inst.line
            return
        rows = np.broadcast_to(np.arange(len(lanes))[:, None], index.shape)
        read["who"][index[simple]] = np.broadcast_to(who, index.shape)[simple]
        read["epoch"][index[simple]] = np.broadcast_to(epochs, index.shape)[simple]
        read["line"][index[simple]] = inst.line
        if self.read_set is None:
            self.read_set = np.zeros(self.size, np.int32)
            ids = np.zeros(index.shape, np.int32)
        alone = ~simple & ~twice  # one reader in this instruction, concurrent with a kept one
        if alone.any():
            columns = np.stack([ids[alone].astype(np.int64), prev_who[alone].astype(np.int64),
                                prev_epoch[alone].astype(np.int64), read["line"][index[alone]].astype(np.int64),
                                rows[alone]])
            if (columns == columns[:, :1]).all():
                groups, inverse = columns[:, :1], np.zeros(columns.shape[1], np.int64)
            else:
                groups, inverse = np.unique(columns, axis=1, return_inverse=True)
            where = index[alone]
            for g in range(groups.shape[1]):
                s, pw, pe, pl, r = (int(x) for x in groups[:, g])
                self._read_into(where[inverse.reshape(-1) == g], s, pw, pe, pl, lanes[[r]], who[[r], 0], epochs[[r], 0],
                                inst.line)
        if twice.any():
            for b in np.unique(index[twice]).tolist():
                r = np.flatnonzero((index == b).any(axis=1))
                s = int(self.read_set[b])
                self._read_into(np.array([b]), s, int(read["who"][b]) if not s else 0,
                                int(read["epoch"][b]) if not s else 0, int(read["line"][b]), lanes[r], who[r, 0],
                                epochs[r, 0], inst.line)

    def _read_into(self, where: np.ndarray | StridedBox, s: int, prev_who: int, prev_epoch: int, prev_line: int,
                   lanes: np.ndarray, who: np.ndarray, epochs: np.ndarray, line: int) -> None:
        """The bytes `where`, whose readers are the set `s` (or, with s = 0, the "read" table's one reader
        `prev_who` at `prev_epoch`, line `prev_line`), are read by `lanes` (as `who` at `epochs`) at `line`."""
        read = self.records["read"]
        new = self._next_set(s, prev_who, prev_epoch, prev_line, lanes, who, epochs, line)
        _put(self.read_set, where, new)
        if not new:
            for field, value in (("who", int(who[0])), ("epoch", int(epochs[0])), ("line", line)):
                _put(read[field], where, value)

    def _next_set(self, s: int, prev_who: int, prev_epoch: int, prev_line: int, lanes: np.ndarray, who: np.ndarray,
                  epochs: np.ndarray, line: int) -> int:
        """The read set (0: one reader, `who[0]`, kept in the "read" table) of bytes whose readers were the set `s`
        (or with s = 0 the one reader `prev_who` at `prev_epoch`, line `prev_line`) once `lanes` read them: the
        readers that happen before none of `lanes`, and `lanes`. Bytes read alike share one set."""
        key = (s, prev_who, prev_epoch, prev_line, tuple(who.tolist()), tuple(epochs.tolist()), line)
        new = self._memo.get(key)
        if new is None:
            if s:
                old_who, old_epoch, old_line = self.sets[s]
            elif prev_who:
                old_who, old_epoch = np.array([prev_who], np.int64), np.array([prev_epoch], np.int64)
                old_line = np.array([prev_line], np.int64)
            else:
                old_who = old_epoch = old_line = np.zeros(0, np.int64)
            keep = ~self._ordered_any(lanes, old_who, old_epoch)
            if not keep.any() and len(lanes) == 1:
                new = 0
            else:
                new = len(self.sets)
                self.sets.append((np.concatenate([old_who[keep], who.astype(np.int64)]),
                                  np.concatenate([old_epoch[keep], epochs.astype(np.int64)]),
                                  np.concatenate([old_line[keep], np.full(len(who), line, np.int64)])))
            if len(self._memo) > 1 << 16:
                self._memo.clear()
            self._memo[key] = new
        return new

    def _ordered(self, lanes: np.ndarray, who: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        """Whether the accesses recorded as `who` at `epoch` [lanes, k] happen before each lane's present point:
        by its CTA's clocks, or for another CTA's, by what the lane acquired of that CTA."""
        hb = self.m.tracker.hb
        rank = who >> 16
        mine = (self.lane_rank[lanes] + 1)[:, None]
        tid = (who >> 3) & 0x1FFF
        same = rank == mine
        ordered = np.zeros(who.shape, bool)
        ordered[same] = hb.clock[np.broadcast_to(lanes[:, None], who.shape)[same], tid[same]] >= epoch[same]
        if hb.remote and (~same & (rank > 0)).any():
            for i, lane in enumerate(lanes.tolist()):
                known = hb.remote.get(lane)
                if not known:
                    continue
                for r, row in known.items():
                    hit = rank[i] == r + 1
                    if hit.any():
                        ordered[i, hit] = row[tid[i, hit]] >= epoch[i, hit]
        return ordered

    def _ordered_any(self, lanes: np.ndarray, who: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        """Whether each access recorded as `who` at `epoch` [k] happens before the present point of one of
        `lanes` at least: per CTA, the join of its lanes' clocks decides for its own threads' accesses."""
        hb = self.m.tracker.hb
        rank, tid = who >> 16, (who >> 3) & 0x1FFF
        ordered = np.zeros(len(who), bool)
        ranks = self.lane_rank[lanes] + 1
        for r in [int(ranks[0])] if ranks[0] == ranks[-1] and _uniform(ranks) else np.unique(ranks).tolist():
            hit = rank == r
            if hit.any():
                ordered[hit] = hb.clock[lanes[ranks == r]].max(axis=0)[tid[hit]] >= epoch[hit]
        rest = ~ordered & (rank > 0)
        if hb.remote and rest.any():  # other CTAs' accesses: what each lane acquired of them
            shape = (len(lanes), int(rest.sum()))
            ordered[rest] = self._ordered(lanes, np.broadcast_to(who[rest], shape),
                                          np.broadcast_to(epoch[rest], shape)).any(axis=0)
        return ordered

    def _check_sets(self, inst, lanes: np.ndarray, index: np.ndarray, kind: int) -> None:
        """A write of `index` checked against every reader kept in the read sets of its bytes."""
        ids = self.read_set[index]
        if not ids.any():
            return
        for s in np.unique(ids[ids > 0]).tolist():
            hit = ids == s
            for who, epoch, line in zip(*(x.tolist() for x in self.sets[s])):
                self._check(inst, lanes, index, np.where(hit, who, 0), np.full(index.shape, epoch),
                            np.full(index.shape, line), True, kind, "read")

    def _check_proxy_fenced(self, inst, lanes: np.ndarray, index: np.ndarray, kind: int) -> None:
        """The async proxy (a TMA load, a bulk copy or reduction) reads global bytes a thread wrote through the
        generic proxy: a fence.proxy.async (or .global) must lie on a happens-before path from the write to the
        read [memory_model.PROXY_FENCE_STATE_SPACE]: in this CTA's fenced clocks, or for another CTA's write,
        in what the reader acquired of that CTA (its fences before the release, or the reader's after the
        acquire)."""
        table = self.records["write"]
        who = table["who"][index]
        generic = (who != 0) & ~_ASYNC[who & 7]
        if not generic.any():
            return
        hb = self.m.tracker.hb
        tid, epoch = (who >> 3) & 0x1FFF, table["epoch"][index]
        mine = (who >> 16) == (self.lane_rank[lanes] + 1)[:, None]
        fenced = np.zeros(index.shape, bool)
        fenced[mine] = hb.global_fenced(lanes, tid)[mine] >= epoch[mine]
        if (generic & ~mine).any():  # another CTA's stores: the fences that came with its release (remote rows)
            for i, lane in enumerate(lanes.tolist()):
                for r, row in hb.remote.get(lane, {}).items():
                    hit = (who[i] >> 16) == r + 1
                    fenced[i, hit] = row[hb.threads + tid[i, hit]] >= epoch[i, hit]
        unfenced = generic & ~fenced
        if not unfenced.any():
            return
        i, j = np.unravel_index(np.argmax(unfenced), unfenced.shape)
        b = int(index[i, j])
        raise self.m.tracker.hb.hazard(
            inst, f"reads {self.where(b)} through {_PROXY[kind]}, which the instruction at line "
                  f"{int(table['line'][b])} ({self.describe(int(who[i, j] >> 16) - 1, int(tid[i, j]))}) wrote "
                  "through the generic proxy and has not made visible to the async proxy (missing fence.proxy.async "
                  "between the store and this read on a synchronisation path; a fence.proxy.async.shared::cta "
                  "orders no global memory)", int(lanes[i]))

    def _check_together(self, inst, lanes: np.ndarray, index: np.ndarray, kind: int) -> None:
        """Threads of one instruction writing one byte: nothing orders them either."""
        flat = index.reshape(-1)
        order = np.argsort(flat, kind="stable")
        twice = np.flatnonzero(flat[order][1:] == flat[order][:-1])
        if not len(twice):
            return
        k = index.shape[1]
        first, second = order[twice[0]] // k, order[twice[0] + 1] // k
        b = int(flat[order[twice[0]]])
        lane, other = int(lanes[second]), int(lanes[first])
        raise self.m.tracker.hb.hazard(
            inst, f"writes {self.where(b)} through {_PROXY[kind]}, which the instruction at line {inst.line} "
                  f"({self.describe(int(self.lane_rank[other]), other % self.m.threads)}) wrote through "
                  f"{_PROXY[kind]} at once, and no synchronisation orders the two (race: two threads store to one "
                  "location in one instruction)", lane)

    def _check(self, inst, lanes, index, who, epoch, line, write: bool, kind: int, side: str) -> None:
        """`lanes` access `index` [lanes, bytes], whose earlier access (per byte: `who` at `epoch` from `line`,
        who 0 for none) was a write (`side` "write") or a read: a race unless ordered or morally strong."""
        if not who.any():
            return
        rank = who >> 16
        mine = (self.lane_rank[lanes] + 1)[:, None]
        other_kind = who & 7
        same = rank == mine
        ordered = self._ordered(lanes, who, epoch)
        strong = _STRONG[kind] & _STRONG[other_kind] & (_ASYNC[kind] == _ASYNC[other_kind]) & \
            (same | (_WIDE[kind] & _WIDE[other_kind]))
        racing = (rank > 0) & ~ordered & ~strong
        if not racing.any():
            return
        i, j = np.unravel_index(np.argmax(racing), racing.shape)
        b, r, t = int(index[i, j]), int(rank[i, j]) - 1, int((who[i, j] >> 3) & 0x1FFF)
        did = "wrote" if side == "write" else "read"
        does = "writes" if write else "reads"
        if same[i, j]:
            missing = "a bar.sync, an mbarrier wait or a release/acquire pair between them is missing"
        else:
            missing = ("another CTA's access is ordered only by a release (st.release, red/atom.release, or "
                       "fence.acq_rel then a strong write) that this thread acquires (ld.acquire, atom.acquire, or a "
                       "strong read then fence.acq_rel) on one location, and there is none")
        raise self.m.tracker.hb.hazard(inst, f"{does} {self.where(b)} through {_PROXY[kind]}, which the instruction "
                                             f"at line {int(line[i, j])} ({self.describe(r, t)}) {did} through "
                                             f"{_PROXY[int(other_kind[i, j])]}, and no synchronisation orders the two "
                                             f"(race: {missing})", int(lanes[i]))

    def where(self, flat: int) -> str:
        """'global address 0x.. (argument k (name) at byte offset o)' of a flat position of global memory."""
        from tessera.interpreters.ptx.state import GLOBAL_BASE

        memory = self.m.memory
        address = GLOBAL_BASE + flat
        k = int(np.searchsorted(memory._starts, address, side="right") - 1)
        segment = memory.segments[k]
        return f"global address {address:#x} ({segment.name} at byte offset {address - segment.start})"

    def describe(self, rank: int, tid: int) -> str:
        gx, gy, _ = self.m.grid
        bx, by, _ = self.m.block
        return (f"thread ({tid % bx}, {tid // bx % by}, {tid // (bx * by)}) of CTA ({rank % gx}, {rank // gx % gy}, "
                f"{rank // (gx * gy)})")

    # endregion
    # region release and acquire
    def release(self, lanes: np.ndarray, locations: np.ndarray, kind: int, fenced: bool = False) -> None:
        """`lanes` perform a release pattern on the global `locations` (flat, one per lane): a release operation,
        or (`fenced`) a strong write after the lane's last release fence, which then is the release point."""
        hb = self.m.tracker.hb
        for lane, location in zip(lanes.tolist(), locations.tolist()):
            if fenced:
                released = self.fence_release.get(lane)
                if released is None:
                    continue
            else:
                released = hb._release(np.array([lane]))
            c, f, remote = released
            joined = self.releases.setdefault(location, {})
            key = (int(self.lane_rank[lane]), bool(_WIDE[kind]))
            entry = joined.get(key)
            if entry is None:
                joined[key] = [kind, c.copy(), remote, f.copy()]
            else:
                entry[1], entry[3] = np.maximum(entry[1], c), np.maximum(entry[3], f)
                entry[2] = _join_remote(entry[2], remote)

    def acquire(self, lanes: np.ndarray, locations: np.ndarray, kind: int, now: bool) -> None:
        """`lanes` read the global `locations` strongly: with `now` (an acquire operation) they take in the
        releases published there, else (a relaxed read) those wait for the lane's next acquire fence."""
        if not self.releases:
            return
        for lane, location in zip(lanes.tolist(), locations.tolist()):
            published = self.releases.get(location)
            if not published:
                continue
            rank = int(self.lane_rank[lane])
            usable = [(source, *entry) for (source, wide), entry in published.items()
                      if source == rank or (_WIDE[kind] and wide)]
            if now:
                self._take(lane, usable)
            else:
                self.pending_acquire.setdefault(lane, []).extend(usable)

    def _take(self, lane: int, published) -> None:
        hb = self.m.tracker.hb
        rank = int(self.lane_rank[lane])
        for source, _, clock, remote, fenced in published:
            if source == rank:
                hb.clock[lane] = np.maximum(hb.clock[lane], clock)
                hb.fenced[lane] = np.maximum(hb.fenced[lane], fenced)
                hb.fenced_rows[lane] = True
            else:  # what the lane knows of that CTA: its clock, then what proxy fences covered of its global stores
                hb.learn([lane], {source: np.concatenate([clock, fenced[hb.threads:]])})
            hb.learn([lane], {r: row for r, row in (remote or {}).items() if r != rank})

    def fence(self, lanes: np.ndarray, release: bool, acquire: bool) -> None:
        """A memory fence (fence.sc / fence.acq_rel / fence.release / fence.acquire / membar) of `lanes`."""
        if acquire:
            for lane in lanes.tolist():
                waiting = self.pending_acquire.pop(lane, None)
                if waiting:
                    self._take(lane, waiting)
        if release:
            hb = self.m.tracker.hb
            for lane in lanes.tolist():
                self.fence_release[lane] = hb._release(np.array([lane]))

    # endregion


def _join_remote(a: dict | None, b: dict | None) -> dict | None:
    """The join of two releases' knowledge of other CTAs ({rank: row}, None for none)."""
    if not a or not b:
        return a or b
    joined = dict(a)
    for rank, row in b.items():
        joined[rank] = row if rank not in joined else np.maximum(joined[rank], row)
    return joined


def _uniform(values: np.ndarray) -> bool:
    """Whether every element of `values` (not empty) is the same."""
    return bool(values.min() == values.max())


__all__ = ["ASYNC", "ASYNC_REDUCE", "GlobalOrder", "STRONG_CTA", "STRONG_GPU", "StridedBox", "WEAK", "strong_kind"]
