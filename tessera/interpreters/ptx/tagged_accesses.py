"""Reads and writes of shared memory checked against the bytes' tags in the PTX executor (see `asynchrony`, whose
docstring has the model): `TaggedAccesses`, a base class of `AsyncTracker`.

A generic read of a `FLIGHT` byte is a hazard; of a `LANDED` byte it needs the reading thread to have observed
the byte's phase complete (a wait of its own, or a barrier after which a thread that observed it released it).
An async-proxy read (a wgmma operand, a bulk or TMA store) has the same rules; generic writes and reads are
also handed to `happens_before`, and `fence.proxy.async` too.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.async_copies import FLIGHT, LANDED, PLAIN
from tessera.interpreters.ptx.byte_ranges import byte_bounds, cta_hulls
from tessera.interpreters.truth import any_set


_ALL_PLAIN = ()  # `AsyncTracker._range_summary` of a range no asynchronous copy wrote


class TaggedAccesses:
    """The shared-memory accesses of `AsyncTracker` (its base class: the tags and state are `AsyncTracker`'s)."""

    def generic_access(self, inst, lanes: np.ndarray, index: np.ndarray, write: bool, strong: bool = False,
                       atomic: bool = False, cta_scoped: bool = False) -> None:
        """An ld/st/ldmatrix/stmatrix... of `lanes` at `index` [lanes, bytes] of `Machine.shared`. A `strong`
        access (.relaxed/.acquire/.release/.volatile: a flag) is morally strong with the other strong and atomic
        accesses of its CTA [memory_model.MORALLY_STRONG] (its release/acquire edges are `global_order`'s), never
        with a plain one [memory_model.DATA_RACE]: a strong or `atomic` write (atom/red on shared memory: a
        histogram's bins) is recorded as such, so that a plain access no synchronisation orders against it is a
        race and another strong or atomic one is not (`HappensBefore.write`); a strong read is judged against the
        last write when that was plain and recorded apart from the plain reads, so a later plain store is judged
        against it and a strong one is not (`HappensBefore.strong_read`). Both are checked against copies in
        flight. `cta_scoped`: a strong access of scope .cta, morally strong with none of another CTA's accesses
        (distributed shared memory)."""
        if write:
            # each CTA's hull of the bytes (a store of the batch's CTAs), for the checks that a hull decides
            hulls = cta_hulls(index.reshape(-1), self.m.shared_bytes) if self.tagged or self.reading or \
                self.hb.completions else None
            if self.tagged or self.reading or self.bulk_reads or self.copy_sources or self.live_barriers is not None:
                self.check_writable(inst, np.repeat(lanes, index.shape[1]), index.reshape(-1), "the store",
                                    hulls=hulls)
            if self.tagged:  # (the kept ranges meeting a hull written out and forgotten; the windows between kept)
                self.write_out(index if hulls is None else hulls)
                state = self.state[index]
                if any_set(state) and self.hb.races:
                    writers = np.broadcast_to(np.asarray(lanes)[:, None], index.shape).reshape(-1)
                    self._check_landed_write(inst, writers, index.reshape(-1), state.reshape(-1))
                self.state[index] = PLAIN
                self._forget_ranges(index if hulls is None else hulls)
            if self.proxy_readers or self.hb.races:
                self.hb.write(inst, lanes, index, atomic or strong, cta_scoped, hulls)
            return
        if strong:
            self.hb.strong_read(inst, lanes, index, cta_scoped)
        else:
            self.hb.read(inst, lanes, index)
        if not self.tagged:
            return
        self.write_out(index)
        state = self.state[index]
        if any_set(state):
            readers = np.broadcast_to(np.asarray(lanes)[:, None], index.shape).reshape(-1)
            self._check_read(inst, readers, index.reshape(-1), state.reshape(-1), "reads")

    def _check_read(self, inst, readers: np.ndarray, flat: np.ndarray, state: np.ndarray, what: str) -> None:
        flying = state == FLIGHT
        if any_set(flying):
            i = int(np.argmax(flying))
            raise self.hazard(inst, f"{what} {self.where(flat[i])} before it was signalled: "
                                    f"{self.describe_flight(flat[i])}{self._released_early(readers[i], flat[i])}",
                              readers[i])
        unseen = self._first_unseen_landing(readers, flat, state)
        if unseen is not None:
            byte, p, b, r = unseen
            raise self.hazard(inst, f"{what} {self.where(byte)} before the TMA copy into it was signalled: this "
                                    f"thread has not observed phase {p} (parity {p & 1}) of {self.barrier_name(b)} "
                                    "complete (no successful mbarrier wait for that phase, or a wait on the wrong "
                                    "parity)", r)

    def _check_landed_write(self, inst, writers: np.ndarray, flat: np.ndarray, state: np.ndarray) -> None:
        """A generic store over bytes a TMA copy wrote needs the writer to have observed the phase the copy
        completed in, as a read does (the copy writes until its complete-tx; it landed here because another
        thread waited) [memory_model.TMA_READ_UNTIL_COMPLETE]."""
        unseen = self._first_unseen_landing(writers, flat, state)
        if unseen is not None:
            byte, p, b, w = unseen
            raise self.hazard(inst, f"the store writes {self.where(byte)}, which the TMA copy completing phase {p} "
                                    f"(parity {p & 1}) of {self.barrier_name(b)} writes, and this thread has not "
                                    "observed that phase (write-after-write race with the async proxy: no "
                                    "successful mbarrier wait for that phase orders the copy before this store)", w)

    def _first_unseen_landing(self, threads: np.ndarray, flat: np.ndarray, state: np.ndarray):
        """The first of the bytes `flat` (accessed by `threads`, one per byte) that a TMA copy landed in a phase
        its thread has not observed complete, as (byte, phase, barrier, thread); None if there is none."""
        landed = state == LANDED
        if not any_set(landed):
            return None
        b, p, t = self.tag[flat[landed]], self.phase[flat[landed]], threads[landed]
        unseen = self.observed[b, t] <= p
        if not any_set(unseen):
            return None
        i = int(np.argmax(unseen))
        return int(flat[landed][i]), int(p[i]), int(b[i]), t[i]

    def _released_early(self, reader: int, flat: int) -> str:
        """', released ...' when the copy was issued after a wait on an mbarrier `reader` had arrived on."""
        self.write_out(slice(flat, flat + 1))
        copy = self.copies[int(self.tag[flat])]
        if copy.acquired is None:
            return ""
        line = int(self.released[copy.acquired, reader])
        if not line:
            return ""
        return (f"; the producer refilled it after this thread released it with the arrive on "
                f"{self.barrier_name(copy.acquired)} at line {line}, before this read (a release before the "
                "consumer's last read)")

    def async_read(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, span: slice | None = None,
                   hull: slice | None = None, own_rows: bool = False) -> None:
        """The async proxy reads `flat` for `lanes` (a warpgroup's wgmma, or one thread's bulk store): every
        one of them must have observed TMA data, and generic stores must have been fenced. `span`: the range
        `flat` fills, when it fills one (read as a range; a finding is then located byte by byte). `hull`: a
        range holding every byte of `flat` (a descriptor's K step reads 32 bytes of each 128-byte row of its
        tile): when the whole range passes, so do its bytes, and only otherwise are they walked one by one.
        `own_rows`: a wgmma's shared-memory A, each warp reading its own rows (`happens_before`)."""
        if span is not None or hull is not None:
            if self._landed_read(lanes, span if span is not None else hull):
                return
            summary = self._range_summary(span if span is not None else hull)
            if summary is not None and (summary is _ALL_PLAIN or self._seen(lanes, summary[0]) > summary[1]):
                self.hb.async_read(inst, lanes, flat, what, span, hull, own_rows)
                return
            if span is not None:
                self.async_read(inst, lanes, flat, what, own_rows=own_rows)  # raises, naming the byte, or passes
                return
        self.write_out(flat)
        state = self.state[flat]
        if any_set(state) and not self._observed_all(lanes, flat, state):
            flying = state == FLIGHT
            if any_set(flying):
                i = int(np.argmax(flying))
                raise self.hazard(inst, f"{what} reads {self.where(flat[i])} before it was signalled: "
                                        f"{self.describe_flight(flat[i])}"
                                        f"{self._released_early(int(lanes[0]), flat[i])}", lanes[0])
            landed = state == LANDED
            if any_set(landed):
                tags, phases = self.tag[flat[landed]], self.phase[flat[landed]]
                known = self.observed[:, lanes].min(axis=1)  # phases every reader has observed, per barrier
                unseen = known[tags] <= phases
                if any_set(unseen):
                    i = int(np.argmax(unseen))
                    b, p = int(tags[i]), int(phases[i])
                    reader = lanes[int(np.argmax(self.observed[b, lanes] <= p))]
                    raise self.hazard(inst, f"{what} reads {self.where(flat[landed][i])} before the TMA copy into it "
                                            f"was signalled: this thread has not observed phase {p} (parity {p & 1}) "
                                            f"of {self.barrier_name(b)} complete (no successful mbarrier wait for "
                                            "that phase, or a wait on the wrong parity)", reader)
        self.hb.async_read(inst, lanes, flat, what, own_rows=own_rows)

    def _landed_read(self, lanes: np.ndarray, where: slice) -> bool:
        """Whether an async-proxy read by `lanes` of bytes inside the range `where` passes without looking at
        them: the range lies in ranges TMA copies of one mbarrier landed (`_landed_cover`) and every reader has
        observed that phase. No generic store wrote those bytes since (it would have ended the range): there is
        nothing to fence."""
        cover = self._landed_cover(where)
        return cover is not None and self._seen(lanes, cover[0]) > cover[1]

    def _observed_all(self, lanes: np.ndarray, flat: np.ndarray | slice, state: np.ndarray) -> bool:
        """The common case of an async-proxy read, decided without a walk per byte: every byte landed from
        copies on one mbarrier, and every reader has observed the latest phase they count towards."""
        if state.min() != LANDED or state.max() != LANDED:
            return False
        tags = self.tag[flat]
        b = int(tags[0])
        if tags.min() != b or tags.max() != b:
            return False
        return self._seen(lanes, b) > int(self.phase[flat].max())

    def _seen(self, lanes: np.ndarray, b: int) -> int:
        """The latest phase of mbarrier instance `b` that every one of `lanes` has observed."""
        first, last = int(lanes[0]), int(lanes[-1])
        if last - first + 1 != len(lanes):
            return int(self.observed[b, lanes].min())
        known = self.seen_runs.get((b, first, last))
        if known is None:  # a run of lanes (a warpgroup's wgmma): kept until a wait or barrier changes `observed`
            known = self.seen_runs[(b, first, last)] = int(self.observed[b, first:last + 1].min())
        return known

    def _forget_ranges(self, where: np.ndarray | slice | list[slice]) -> None:
        """The bytes `where` (or those of each range of a list) change their asynchrony state: the landed ranges
        holding one no longer apply."""
        if self.landed_ranges:
            self.landed_ranges.forget(byte_bounds(where))

    def _landed_cover(self, span: slice) -> tuple[int, int] | None:
        """(barrier, latest phase) when `span` lies inside `landed_ranges` of one barrier (a K step of a ring
        slot's tile, in one box or across adjacent ones), else None. Such bytes landed from TMA copies and no
        generic store wrote them since: a store (or a cp.async landing) ends the ranges it touches."""
        cover = self.landed_ranges.covering(span.start, span.stop)
        if cover is None:
            return None
        barrier, latest = cover[0]  # (one box: its (barrier, phase))
        for b, phase in cover[1:]:  # a plain loop: a K step's tile across adjacent boxes is the common case
            if b != barrier:
                return None
            latest = max(latest, phase)
        return barrier, latest

    def _range_summary(self, span: slice):
        """`_ALL_PLAIN` when no byte of `span` was written by an asynchronous copy, (barrier, latest phase) when
        every byte landed from copies on one mbarrier, else None (walk the bytes); `_landed_cover` first."""
        cover = self._landed_cover(span)
        if cover is not None:
            return cover
        kept = self.tag_ranges.covering(span.start, span.stop)
        if kept is not None:  # (`tag_ranges`: the same summary as the bytes')
            b = kept[0][1]
            if all(state == LANDED and tag == b for state, tag, _ in kept):
                return b, max(phase for _, _, phase in kept)
            return None
        self.write_out(span)
        state = self.state[span]
        summary = None
        if not any_set(state):
            summary = _ALL_PLAIN
        elif state.min() == LANDED and state.max() == LANDED:
            tags = self.tag[span]
            b = int(tags[0])
            if tags.min() == b and tags.max() == b:
                summary = (b, int(self.phase[span].max()))
        return summary

    def fence(self, lanes: np.ndarray, shared: bool = True, global_: bool = True) -> None:
        """fence.proxy.async by `lanes`: the generic stores that happen before it are visible to the async
        proxy along every happens-before path through it (`happens_before`), in the state spaces it names."""
        self.hb.fence(lanes, shared, global_)
