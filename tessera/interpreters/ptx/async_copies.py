"""Asynchronous copies into shared memory in the PTX executor (see `asynchrony`, whose docstring has the model): the
byte tags (`PLAIN`, `FLIGHT`, `LANDED`), `Copy`, and `AsyncCopies`, a base class of `AsyncTracker`.

A TMA or bulk load is staged at issue (its bytes `FLIGHT`, its data and transaction bytes waiting on its
mbarrier) and lands at the latest legal point: when a thread waits on its mbarrier once every arrival of the
phase is in, in issue order, each copy's complete-tx counting on the barrier; its bytes become `LANDED`, tagged
with the barrier and the phase. A write into bytes an asynchronous access still uses (`check_writable`) is a
hazard. cp.async bytes are `FLIGHT` from issue until the issuing thread's wait lands them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.byte_ranges import cta_hulls
from tessera.interpreters.ptx.cluster import grid_rank
from tessera.interpreters.ptx.decode import per_lane
from tessera.interpreters.ptx.state import RUN
from tessera.interpreters.ranges import consecutive
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

_CHUNK = facts.SWIZZLE_CHUNK_BYTES


PLAIN, FLIGHT, LANDED = 0, 1, 2
"""A shared-memory byte's tag (`AsyncTracker.state`): no copy pending, a copy in flight, a copy landed."""


@dataclass(eq=False)
class Copy:
    """An asynchronous copy into shared memory not yet landed (TMA/bulk load: `key` is its mbarrier) or, for
    messages, one that has (`data` None). `acquired` is the mbarrier the issuing thread last waited on."""

    kind: str
    inst: object
    lane: int
    index: np.ndarray | None
    data: np.ndarray | None
    nbytes: int
    key: tuple[int, int] | None
    acquired: tuple[int, int] | None = None
    span: slice | None = None  # the range `index` fills, when it fills one (see `AsyncTracker.stage`)
    layout: str | None = None  # "ordered": `data` is `span`'s bytes in order (`AsyncTracker.stage`), else `index`'s
    combine: object = None
    """A `red.async`'s update (old bytes -> new bytes, applied when it lands); None: a copy of `data`."""


ASYNC_PROXY_COPIES = ("TMA load", "bulk copy")
"""The kinds of `AsyncCopies.issue` that write shared memory through the async proxy (`st.async` and `red.async` are
not among them)."""


class AsyncCopies:
    """The asynchronous copies of `AsyncTracker` (its base class: the tags and state are `AsyncTracker`'s)."""

    def check_writable(self, inst, lanes, flat: np.ndarray, what: str, acquired: int | None = None,
                       span: slice | None = None, atomic: bool = False, hulls: list[slice] | None = None) -> None:
        """Refuse `what` (by `lanes`, one per byte or one for all) writing the bytes `flat` while an
        asynchronous copy still writes them, a pending wgmma, a bulk store or a bulk copy into a cluster member
        (`copy_sources`) may still read them. `span`: the range `flat` fills, when it fills one (the records are
        then read as a range, and a finding is located byte by byte). `atomic`: a `red.async`, which another red.async in flight on
        the bytes does not race (both relaxed at cluster scope: morally strong [memory_model.MORALLY_STRONG]).
        `hulls`: `byte_ranges.cta_hulls` of `flat`, where the caller has them (`hulls_clear`)."""
        self.check_not_barrier(inst, lanes, flat, what, span)
        # a range with nothing in flight and no pending wgmma reading it is decided without a gather
        if span is not None:
            clear = not self.flight_in(span) and not (self.reading and self._read_by_wgmma(span))
        else:
            clear = (self.tagged or self.reading) and self.hulls_clear(flat, hulls)
        lanes = per_lane(lanes, flat.shape)
        if self.tagged and not clear:
            self.write_out(flat)
            flying = self.state[flat] == FLIGHT
            if atomic and any_set(flying):
                flying[flying] = [self.copies[int(c)].combine is None for c in self.tag[flat[flying]]]
            if any_set(flying):
                i = int(np.argmax(flying))
                copy = self.copies[int(self.tag[flat[i]])]
                raise self.hazard(inst, f"{what} writes {self.where(flat[i])} while {self.describe_copy(copy)} "
                                        "into it is still in flight (write-after-write race with an asynchronous "
                                        "copy)", lanes[i])
        if self.reading and not clear:
            self._check_not_read_by_wgmma(inst, lanes, flat, what, acquired)
        if self.copy_sources:
            self.copy_sources.check_write(inst, lanes, flat, what)
        if self.bulk_reads:
            for lane, group, index, store in self.bulk_reads:
                hit = np.isin(flat, index)
                if any_set(hit):
                    i = int(np.argmax(hit))
                    raise self.hazard(inst, f"{what} overwrites {self.where(flat[i])} while the bulk store at line "
                                            f"{store.line} ({self.m.describe_lane(lane)}) may still read it (no "
                                            "cp.async.bulk.wait_group.read covers its bulk group)", lanes[i])

    def hulls_clear(self, flat: np.ndarray, hulls: list[slice] | None = None) -> bool:
        """Whether no byte of `flat` is in flight and no pending wgmma may read one, decided over each CTA's hull
        of them (`byte_ranges.cta_hulls`: a store of a batch's CTAs, row by row) instead of byte by byte: a hull
        with neither holds bytes with neither. False when there are no such hulls, or a hull has a byte in flight
        or may be read: the bytes are then looked at one by one (`check_writable`), which decides what they hold.
        The pending reads are asked once for every CTA, over the hulls' common extent in their CTAs' windows (a
        larger range still: the same rule). `hulls`: `cta_hulls(flat)`, where the caller has them."""
        size = max(self.m.shared_bytes, 1)
        hulls = cta_hulls(flat, size) if hulls is None else hulls
        if hulls is None or self.tagged and any(self.flight_in(hull) for hull in hulls):
            return False
        if not self.reading:
            return True
        slots = np.array([hull.start // size for hull in hulls])
        low = min(hull.start - slot * size for hull, slot in zip(hulls, slots.tolist()))
        high = max(hull.stop - slot * size for hull, slot in zip(hulls, slots.tolist()))
        return not self._read_by_wgmma_ctas(slots, low // _CHUNK, -(-high // _CHUNK))

    def stage(self, index: np.ndarray, data: np.ndarray, span: slice | None = None, layout=None) -> None:
        """A TMA/bulk load's bytes for the copy `issue` is about to record (called by the copy); `span`: the
        range `index` fills, when it fills one (a swizzled box), so that its records are kept as a range.
        `data` holds the bytes of `index` in order, or with `layout` "ordered" those of `span` in order (`index`
        the same bytes in any order: a swizzled box put in shared-memory order at issue), so that they land as one
        copy of the range."""
        self.staged.append((index, data, span, layout))

    def issue(self, inst, lane: int, address: int, nbytes: int, kind: str, combine=None,
              source: slice | None = None) -> None:
        """The staged bytes of `lane` are one copy completing `nbytes` of transaction on the mbarrier at
        shared::cluster `address` (the lane's own CTA's, or a cluster member's): tag them in flight; they land
        when a thread waits on that barrier. `combine` (a `red.async`): the bytes are updated from what they
        hold when the copy lands, not replaced by the staged ones. `source`: the shared bytes (a range of
        `Machine.shared`) the copy reads (`cp.async.bulk.shared::cluster.shared::cta`), until its complete-tx: a
        write of them is judged by `copy_sources`."""
        from tessera.interpreters.ptx.mbarrier_state import barrier_state, mbarrier_key

        m = self.m
        key = mbarrier_key(m, lane, address)  # a multicast's copy completes on each member's own mbarrier
        state = barrier_state(m, inst, lane, address)
        if key[0] != int(m.lane_cta[lane]):
            m.cluster_state.remote_mbarrier(inst, lane, key, state.phase)
        if len(self.staged) == 1:
            index, data, span, layout = self.staged[0]
        else:  # (each part's bytes in the order of its index)
            index = np.concatenate([i for i, *_ in self.staged]) if self.staged else np.zeros(0, np.int64)
            data = np.concatenate([d if layout is None else d[i - span.start] for i, d, span, layout in self.staged]) \
                if self.staged else np.zeros(0, np.uint8)
            span = layout = None
        self.staged = []
        acquired = None if self.last_wait[lane] < 0 else int(self.last_wait[lane])
        self.check_writable(inst, lane, index, f"the {kind}", acquired, span, atomic=combine is not None)
        known = None
        if len(index) and key[0] != int(m.lane_cta[lane]):  # into a peer's shared memory: its threads' frame
            known = self.hb.peer_known(lane, grid_rank(m, key[0]))
        elif len(index) and self.hb.races and kind in ASYNC_PROXY_COPIES:  # over generic stores: a proxy fence first
            self.hb.async_read(inst, np.array([lane]), index, f"the {kind}", span, does="writes")
        self.hb.async_write(inst, np.array([lane]), index, f"the {kind}", span, known)
        copy = Copy(kind, inst, lane, index, data, nbytes, key, acquired, span, combine=combine, layout=layout)
        if source is not None and source.stop > source.start:
            self.copy_sources.issued(inst, key, lane, source)
        ident = len(self.copies)
        self.copies[ident] = copy
        self.in_flight.setdefault(key, []).append(copy)
        self.tagged = True
        if span is None:
            self.write_out(index)
            self.state[index] = FLIGHT
            self.tag[index] = ident
        else:
            self.keep_tags(span, FLIGHT, ident)
        self._forget_ranges(index if span is None else span)  # (`async_write` cleared the bytes' generic records)
        if state.pending == 0:
            self.wake(key)

    def loads_clear(self, lanes: np.ndarray, keys: list[tuple[int, int]], dense: tuple[int, int]) -> bool:
        """Whether `issue` of one load by each of `lanes` (one thread of each CTA of `keys`, ascending) into the
        bytes `dense` of its own CTA's shared memory (offsets, whole 16-byte chunks), completing on its own
        CTA's mbarrier `keys[i]`, would pass every check without a walk of the bytes: nothing staged, every
        barrier initialised, no byte in flight, no pending wgmma or bulk store reading one (`check_writable`'s
        range path), and `HappensBefore.async_writes_clear`. Decided over the CTAs' ranges at once; changes
        nothing."""
        m = self.m
        if self.staged or self.bulk_reads or self.copy_sources or self.live_barriers is not None and any(
                any_set(self.live_barriers[key[0] * m.shared_bytes + dense[0]:key[0] * m.shared_bytes + dense[1]])
                for key in keys) or any(key not in m.mbarriers for key in keys):
            return False
        slots = np.array([key[0] for key in keys])
        rows, (low, high) = consecutive(slots), dense
        if self.tagged and any(self.flight_in(slice(slot * m.shared_bytes + low, slot * m.shared_bytes + high))
                               for slot in slots.tolist()):
            return False
        if self.reading and self._read_by_wgmma_ctas(rows, low // _CHUNK, -(-high // _CHUNK)):
            return False
        return self.hb.async_writes_clear(lanes, slots, rows, dense)

    def issue_loads(self, inst, lanes: np.ndarray, keys: list[tuple[int, int]], dense: tuple[int, int],
                    indices: list[np.ndarray], data: np.ndarray, nbytes: int, kind: str) -> None:
        """`issue` of the loads `loads_clear` passed, as one unit: `lanes[i]`'s copy into the bytes `indices[i]`
        (`dense` of CTA `keys[i][0]`) of `data`, their bytes in the order of that range ("ordered": it lands as
        one copy of the range), completing `nbytes` on the mbarrier `keys[i]`. The copies are made in issue order, as one by one; their
        bytes are tagged in flight and their completed async reads forgotten over the CTAs' ranges at once, and
        the threads parked on a barrier whose arrivals are all in are woken."""
        m = self.m
        first, (low, high) = len(self.copies), dense
        slots, spans = np.array([key[0] for key in keys]), []
        for i, (lane, key) in enumerate(zip(lanes.tolist(), keys)):
            base = key[0] * m.shared_bytes
            acquired = None if self.last_wait[lane] < 0 else int(self.last_wait[lane])
            spans.append(slice(base + low, base + high))
            copy = Copy(kind, inst, lane, indices[i], data, nbytes, key, acquired, spans[-1], layout="ordered")
            self.copies[first + i] = copy
            self.in_flight.setdefault(key, []).append(copy)
        self.hb.async_writes(consecutive(slots), low // _CHUNK, -(-high // _CHUNK))
        self.tagged = True
        for i, span in enumerate(spans):  # (their tags kept as ranges: `tag_ranges`)
            self.keep_tags(span, FLIGHT, first + i)
        self._forget_ranges(spans)
        ready = [key for key in keys if m.mbarriers[key].pending == 0]
        if ready:
            from tessera.interpreters.ptx.mbarrier_state import parked_lanes

            parked = parked_lanes(m)
            for key in ready:
                self.wake(key, parked)

    def wake(self, key: tuple[int, int], parked: np.ndarray | None = None) -> None:
        """Threads parked on the mbarrier at `key` try again (its copies may land now); `parked`: see
        `mbarrier_state.parked_on`."""
        from tessera.interpreters.ptx.mbarrier_state import parked_on

        m = self.m
        parked = parked_on(m, key, parked)
        if len(parked):
            m.status[parked] = RUN
            m.woken += 1
            m.park_address[parked] = -1
            m.park_test[parked] = False

    def land_for_wait(self, inst, key: tuple[int, int], lane: int) -> bool:
        """A thread's wait on the mbarrier at `key` fails: if every arrival of the phase is in, land the copies
        in flight on it (the latest moment they could complete the phase) and return True (test again)."""
        if key not in self.in_flight or self.m.mbarriers[key].pending != 0:
            return False
        self.land(inst, key, lane)
        return True

    def land(self, inst, key: tuple[int, int], lane: int) -> None:
        """Land the copies in flight on the mbarrier at `key`, in issue order; see the module docstring."""
        self.land_keys(inst, [key])

    def land_keys(self, inst, keys: list[tuple[int, int]]) -> None:
        """Land the copies in flight on each mbarrier of `keys` (each with every arrival of its phase in), one
        barrier after another, each one's in issue order: the complete-tx of each copy counted in that order
        (reporting, as `land` always has, a phase that completes before its last copy or that ends with more bytes
        than its expect_tx announced), then the bytes (`_land_bytes`), then each barrier's change."""
        from tessera.interpreters.ptx.mbarrier_state import barrier_changed, parked_lanes

        m = self.m
        landed, befores = [], []
        for key in keys:
            state = m.mbarriers[key]
            b = self.barrier(key)
            copies = self.in_flight.pop(key)
            before = state.phase
            befores.append(before)
            for i, copy in enumerate(copies):
                if state.phase != before:
                    left = sum(c.nbytes for c in copies[i:])
                    raise self.hazard(copy.inst, f"the mbarrier at shared address {key[1]:#x} completed phase "
                                                 f"{before} with {len(copies) - i} copies ({left} bytes) still in "
                                                 f"flight on it: its expect_tx{self.last_arrival_at(key)} announced "
                                                 "fewer bytes than the copies deliver", copy.lane)
                landed.append((copy, b, state.phase))
                try:
                    state.complete_tx(copy.nbytes)
                except ValueError as error:
                    raise self.hazard(copy.inst, f"mbarrier at {key[1]:#x}: {error}", copy.lane) from None
            if state.phase == before and state.pending == 0 and state.tx_count < 0:
                raise self.hazard(copies[-1].inst, f"the copies on the mbarrier at shared address {key[1]:#x} "
                                                   f"delivered {-state.tx_count} bytes more than its expect_tx "
                                                   f"announced for phase {state.phase}{self.last_arrival_at(key)} "
                                                   f"(tx-count {state.tx_count} with every arrival in)",
                                  copies[-1].lane)
        self._land_bytes(landed)
        for sources in (self.copy_sources, self.global_sources):
            if sources:  # those copies have read their sources: a write of them must follow a wait
                sources.completed(keys)
        parked = parked_lanes(m)
        for key, before in zip(keys, befores):
            barrier_changed(m, key, before, m.mbarriers[key], prefer=False, parked=parked)

    def _land_bytes(self, landed: list[tuple[Copy, int, int]]) -> None:
        """The bytes of the copies `landed` ((copy, barrier instance, phase) each, in landing order) land: written
        into shared memory and tagged `LANDED` with their barrier and phase, a range one copy landed whole kept
        (`landed_ranges`). A TMA box's bytes are in the order of its range (`stage`'s "ordered"): one copy of it."""
        if len(landed) < 2 or not all(c.layout == "ordered" and c.combine is None for c, _, _ in landed):
            for copy, b, phase in landed:
                self._land_copy(copy, b, phase)
            return
        shared = self.m.shared
        for copy, _, _ in landed:
            shared[copy.span] = copy.data
        self._forget_ranges([copy.span for copy, _, _ in landed])
        for copy, b, phase in landed:
            self.keep_tags(copy.span, LANDED, b, phase)
            self._keep_range(copy.span, b, phase)
            copy.data = None

    def _land_copy(self, copy: Copy, b: int, phase: int) -> None:
        """One copy's bytes land (`_land_bytes`)."""
        m = self.m
        if copy.combine is not None:
            m.shared[copy.index] = copy.combine(m.shared[copy.index])
        elif copy.layout == "ordered":
            m.shared[copy.span] = copy.data
        else:
            m.shared[copy.index] = copy.data
        if copy.span is None:
            self.write_out(copy.index)
            self.state[copy.index] = LANDED
            self.tag[copy.index] = b
            self.phase[copy.index] = phase
            self._forget_ranges(copy.index)
        else:
            self.keep_tags(copy.span, LANDED, b, phase)
            self._forget_ranges(copy.span)
            self._keep_range(copy.span, b, phase)
        copy.data = None

    def _keep_range(self, span: slice, b: int, phase: int) -> None:
        """The range `span` landed whole from one copy on barrier instance `b` in `phase` (its bytes' ranges
        forgotten before): kept in `landed_ranges`."""
        self.landed_ranges.put(span.start, span.stop, (b, phase))

    def phase_changed(self, inst, key: tuple[int, int], lane: int) -> None:
        """The mbarrier at `key` completed a phase through an arrive or complete_tx instruction: copies still
        in flight on it disagree with its expect_tx."""
        copies = self.in_flight.get(key)
        if copies:
            raise self.hazard(inst, f"completes phase {self.m.mbarriers[key].phase - 1} of the mbarrier at shared "
                                    f"address {key[1]:#x} while {self.describe_copy(copies[0])} "
                                    f"({sum(c.nbytes for c in copies)} bytes in {len(copies)} copies) is still in "
                                    "flight on it: its expect_tx is missing or smaller than the bytes the copies "
                                    "deliver", lane)

    def arrivals_changed(self, key: tuple[int, int]) -> None:
        """An arrive or expect_tx changed the mbarrier at `key` without completing its phase: parked waiters
        retry if its arrivals are all in and copies are in flight on it."""
        if key in self.in_flight and self.m.mbarriers[key].pending == 0:
            self.wake(key)

    def cp_async_issued(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """Ampere cp.async of `lanes` into `index` [lanes, size]: in flight until the issuing thread waits."""
        flat = index.reshape(-1)
        self.check_writable(inst, np.repeat(lanes, index.shape[1]), flat, "the cp.async")
        ident = len(self.copies)
        self.copies[ident] = Copy("cp.async", inst, int(lanes[0]), None, None, 0, None)
        self.write_out(flat)
        self.state[flat] = FLIGHT
        self.tag[flat] = ident
        self._forget_ranges(flat)
        self.hb.async_written(flat)
        self.tagged = True

    def cp_async_landed(self, index: np.ndarray, lanes: np.ndarray, through_mbarrier: bool) -> None:
        """The cp.async copies of `lanes` into `index` [copies, bytes] completed at their wait: the issuing
        thread wrote them now, and other threads see them only through synchronisation that follows this
        point [memory_model.CP_ASYNC_COMPLETION]; at a cp.async.mbarrier.arrive (`through_mbarrier`) that arrive and
        every later release of the thread carry them [memory_model.CP_ASYNC_MBARRIER]."""
        self.write_out(index)
        lines = np.array([self.copies[int(t)].inst.line for t in self.tag[index[:, 0]]], np.int32)
        self.state[index.reshape(-1)] = PLAIN
        self._forget_ranges(index)
        self.hb.landed(lanes, index, lines, through_mbarrier)

    def describe_flight(self, flat: int) -> str:
        self.write_out(slice(flat, flat + 1))
        copy = self.copies[int(self.tag[flat])]
        if copy.kind == "cp.async":
            return (f"the cp.async at line {copy.inst.line} into it has not landed (no cp.async.wait_group or "
                    "wait_all of the issuing thread covers it)")
        return (f"{self.describe_copy(copy)} into it has not completed on the mbarrier at shared address "
                f"{copy.key[1]:#x} (no completed mbarrier wait covers it: a missing wait, or one on the wrong parity)")
