"""The TMA loads' global reads in the PTX executor's global happens-before (`global_order`, whose docstring has
the model): a box's read records kept as one, and the reads that last until the load's complete-tx.

Boxes kept as one: a TMA load reads a box (`StridedBox`) of global memory, and the boxes of a tiled kernel are
read alike, every byte of a box by the same readers. While no other access reaches a box's hull, its read
records (the read set, or the one reader's who, epoch and line, and its `until` record) are kept once per box
(`GlobalOrder.boxes`, `hulls`) rather than per byte; an access that meets the hull first writes them into the
per-byte tables (`_settle`), where every other access reads them. A box no thread has read yet is kept as one
only where every per-byte record of its hull is zero (`_new_entry`); `GlobalOrder.keep_boxes` False records each
read per byte at once, the same records. A box read by one thread of each of several CTAs, none knowing of
another, is one read (`read_box_ctas`).

Reads until complete [memory_model.TMA_READ_UNTIL_COMPLETE]: a TMA load reads its global bytes until its
complete-tx on its mbarrier's phase (`read_until`, in `GlobalOrder.until`); a write of them by a thread of the
issuing CTA must have observed that phase complete, not merely be ordered after the issue (`_check_until`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tessera.interpreters.ptx.global_accesses import ASYNC, StridedBox, is_uniform, put_at
from tessera.interpreters.truth import any_set


class TmaReadRecords:
    """The TMA loads' reads of `GlobalOrder` (its base class: the records, `boxes` and `until` are
    `GlobalOrder`'s)."""

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
            entry = self._new_entry(box)
        if entry is not None:
            self._read_box_records(inst, lane, entry, kind)
            return
        writes = self.records.get("write")
        if writes is not None and any_set(box.view(writes["who"])):
            self.access(inst, lanes, box.index(), False, kind)
            return
        read = self._table("read")
        who, epoch, line = (box.view(read[f]) for f in self.FIELDS)
        ids = None if self.read_set is None else box.view(self.read_set)
        if not (is_uniform(who) and is_uniform(epoch) and is_uniform(line) and (ids is None or is_uniform(ids))):
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

    def read_box_ctas(self, inst, lanes: np.ndarray, box: StridedBox, kind: int) -> bool:
        """`read_box` of `lanes` (one thread of each of several CTAs, in order) reading `box`, as one read where
        its records are kept as one (`boxes`) and no lane knows of another CTA (`HappensBefore.remote`): none of
        the lanes' reads then happens before another's, so the readers the box keeps are those one by one would
        leave (the earlier readers that happen before none of them, then the lanes, in order), in one set.
        A box no thread has read yet (a main loop's next K or V tile) is kept as one first (`_new_entry`, as
        `read_box` would): its readers are then the lanes, in order, the set one by one would leave (the first
        lane's record, which the others do not happen after, and theirs). False (nothing done) elsewhere: the
        caller reads one by one."""
        hb = self.m.tracker.hb
        if hb.remote or not hb.races or len(lanes) < 2:
            return False
        entry = self.boxes.get(box)
        if entry is None and (entry := self._new_entry(box)) is None:
            return False
        s, w, e, l_ = entry[:4]
        who, epochs = self.lane_who[lanes] | kind, hb.own_epochs(lanes)
        if not (s or w):  # no reader yet
            entry[0] = len(self.sets)
            self.sets.append((who, epochs.astype(np.int64), np.full(len(lanes), inst.line, np.int64)))
            return True
        entry[0] = self._next_set(s, 0 if s else w, 0 if s else e, l_, lanes, who, epochs, inst.line)
        return True

    def _new_entry(self, box: StridedBox) -> list | None:
        """The records of `box`, which has none kept as one (`boxes`), kept as one from now, no thread having read
        it, where every per-byte record of its hull is zero (the boxes kept as one that share a byte with it
        written out first: `_settle`); None where some may not be."""
        low, high = box.hull()
        self._settle(low, high, box)
        if not self.keep_boxes or self._touched(low, high):
            return None
        entry = self.boxes[box] = [0, 0, 0, 0, None]
        self.hulls[box] = (low, high)
        span_low, span_high = self.hulls_span
        self.hulls_span = (low, high) if span_low == span_high else (min(span_low, low), max(span_high, high))
        return entry

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

    def _settle(self, low: int, high: int, reaching: StridedBox | None = None) -> None:
        """Write the records of the boxes kept as one (`boxes`) whose hull meets [low, high) (and that share a
        byte with the box `reaching`, the access's, when it is one) into the per-byte tables, where every other
        access reads them."""
        if not self.boxes or high <= self.hulls_span[0] or low >= self.hulls_span[1]:
            return
        for box in [b for b, (lo, hi) in self.hulls.items()
                    if lo < high and hi > low and (reaching is None or _meet(b, reaching))]:
            s, who, epoch, line, until = self.boxes.pop(box)
            self._touch(*self.hulls.pop(box))
            if s or self.read_set is not None:
                if self.read_set is None:
                    self.read_set = np.zeros(self.size, np.int32)
                put_at(self.read_set, box, s)
            if not s:
                read = self._table("read")
                for field, value in zip(self.FIELDS, (who, epoch, line)):
                    put_at(read[field], box, value)
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
            put_at(self.until[field], flat, value)

    def _check_until(self, inst, lanes: np.ndarray, index: np.ndarray) -> np.ndarray | None:
        """A write of `index` [lanes, bytes] by threads of the CTA whose TMA load reads them: the writer must have
        observed the load's phase complete (a successful wait, or a barrier or mbarrier release after one), not
        merely be ordered after its issue [memory_model.TMA_READ_UNTIL_COMPLETE]. Returns the bytes it judged
        (their read records are then not judged by the issuing thread's clock)."""
        until = self.until
        phase = until["phase"][index] - 1
        mine = (phase >= 0) & ((until["who"][index] >> 16) == (self.lane_rank[lanes] + 1)[:, None])
        if not any_set(mine):
            return None
        tracker = self.m.tracker
        rows = np.broadcast_to(lanes[:, None], index.shape)[mine]
        unseen = tracker.observed[until["barrier"][index][mine], rows] <= phase[mine]
        if any_set(unseen):
            k = int(np.argmax(unseen))
            i, j = (int(x[k]) for x in np.nonzero(mine))
            b = int(index[i, j])
            who = int(until["who"][b])
            raise tracker.hb.hazard(
                inst, f"writes {self.where(b)}, which the TMA or bulk load at line {int(until['line'][b])} "
                      f"({self.describe((who >> 16) - 1, (who >> 3) & 0x1FFF)}) reads "
                      f"through the async proxy until it completes phase {int(phase[i, j])} of "
                      f"{tracker.barrier_name(int(until['barrier'][b]))}, which this thread has not observed (race: "
                      "the copy may still read the bytes; a successful mbarrier wait for that phase before this "
                      "write is missing)", int(lanes[i]))
        return mine


_meet = lru_cache(maxsize=4096)(StridedBox.meets)
"""`StridedBox.meets`, kept: `_settle` asks it of a new box and each kept box whose hull its hull meets (the other
column half of a tile), and a grid's boxes recur in every launch."""
