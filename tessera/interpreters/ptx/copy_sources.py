"""The sources of copies into a cluster member in the PTX executor, read until the copy's complete-tx in another
CTA: `CopySources`, held by `AsyncTracker` (`asynchrony`, whose docstring has the model) as `copy_sources` (shared
sources) and `global_sources`.

`cp.async.bulk.shared::cluster.shared::cta` forwards bytes of the issuing CTA's shared memory into a peer's and
completes with complete-tx on an mbarrier of the destination CTA; a TMA or bulk load from global memory into peers
only (a shared::cluster destination of another rank, a multicast mask without the issuer's rank) completes on theirs.
Each reads its source until that complete-tx [memory_model.TMA_READ_UNTIL_COMPLETE] (a load that lands in the issuer's
CTA too ends its read on the issuer's barrier: `TmaReadRecords.read_until`). A write of those bytes (a store, an atomic,
a copy into them) is right only for a thread ordered after the completion, whatever order the executor ran the
threads in:

- in flight (issued, not landed): no thread can be ordered after a completion that has not happened, so every
  write of the bytes is reported;
- landed (the copy completed a phase of its barrier, landed when a thread of the destination CTA waited on it): the
  completion happens before every successful wait on that barrier from then on, and from each such wait along every
  happens-before edge (`happens_before`: cluster barriers, an mbarrier arrive of the waiting CTA on a barrier of
  the writer's, bar.sync). Each record keeps, per thread of the destination CTA, its epoch at its first such wait
  (`observers`); a write by a thread that knows one of them (its clock, or what it knows of the destination CTA's
  threads, at or past that epoch) is right, any other is reported naming the copy, so a write that the run placed
  after the landing but that no synchronisation orders after a wait is found on every schedule.

The read is the copy's, ordered before its complete-tx (a release at cluster scope), not one of the issuing thread: a
write judged here needs no order after the issue (a bulk copy's shared source is an async-proxy read, which needs a
fence.proxy.async after the stores that fill it; `GlobalOrder.access` skips a load's global read at issue where a
landed record here judged the write).

Records stay bounded over long loops: a copy landing on a barrier replaces the landed records of that barrier whose
bytes it covers (every wait that observes the newer completion observes the older one, so a write ordered after the
newer is ordered after the older), so a ring of stages forwarding the same slots every trip keeps one record per
stage and source range; all go with the batch. A barrier initialised again at the same address counts as the same
barrier. Landed records are kept where races are checked (`launch(races=True)`, the default); the in-flight check
of shared sources always applies (global memory is judged only with races checked). A global source's records last
the batch of the cluster that issued the copy: a write by a CTA of a later batch is not judged against them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.cluster import grid_rank
from tessera.interpreters.truth import all_set, any_set


@dataclass(eq=False)
class Source:
    """The source bytes of the copy `inst` of `lane`, completing on the mbarrier `key` = (CTA slot, offset) of the
    destination CTA: [`low`, `high`) of its space's flat positions, only those of `index` (sorted) where it is not
    None. `observers`: None while the copy is in flight; once it landed, [thread of the destination CTA] the thread's
    epoch at its first successful wait on the barrier since (0: none yet)."""

    key: tuple[int, int]
    lane: int
    low: int
    high: int
    index: np.ndarray | None
    inst: object
    observers: np.ndarray | None = None

    def hits(self, flat: np.ndarray) -> np.ndarray:
        """Which of the flat positions `flat` the copy reads."""
        hit = (flat >= self.low) & (flat < self.high)
        if self.index is not None and any_set(hit):
            hit[hit] = np.isin(flat[hit], self.index, assume_unique=False)
        return hit

    def covers(self, other: "Source") -> bool:
        """Whether every byte `other` reads, this copy reads."""
        if self.index is None:
            return self.low <= other.low and other.high <= self.high
        theirs = np.arange(other.low, other.high) if other.index is None else other.index
        return all_set(np.isin(theirs, self.index))


SPACES = {"shared": "bulk copy", "global": "TMA or bulk load"}
"""The copies whose sources a `CopySources` of each space holds: bulk copies from the issuing CTA's shared memory
into a cluster member (`Machine.shared` positions), TMA and bulk loads from global memory that land only in peers
(`global_order` positions; those landing in the issuer's CTA are `TmaReadRecords.read_until`'s)."""


class CopySources:
    """The sources in `space` ("shared" or "global", `SPACES`) of a batch's copies into cluster members, in flight
    and landed; see the module docstring. `tracker` is the `AsyncTracker` (its machine, clocks and messages)."""

    def __init__(self, tracker, space: str):
        self.tracker, self.space, self.copy = tracker, space, SPACES[space]
        self.flying: list[Source] = []
        self.landed: dict[tuple[int, int], list[Source]] = {}  # destination mbarrier -> its landed copies' sources

    def __bool__(self) -> bool:
        return bool(self.flying or self.landed)

    def issued(self, inst, key: tuple[int, int], lane: int, where: slice | np.ndarray) -> None:
        """The copy `inst` of `lane` reads the bytes `where` (a range, or flat positions) until its complete-tx on the
        mbarrier `key`."""
        if isinstance(where, slice):
            low, high, index = where.start, where.stop, None
        else:
            index = np.unique(where)
            low, high = (int(index[0]), int(index[-1]) + 1) if len(index) else (0, 0)
            if high - low == len(index):  # (consecutive: a range)
                index = None
        if high > low:
            self.flying.append(Source(key, lane, low, high, index, inst))

    def completed(self, keys) -> None:
        """The copies in flight on the mbarriers `keys` landed: their sources' records are kept as landed (where
        races are checked), each replacing its barrier's older records whose bytes it covers."""
        done = [s for s in self.flying if s.key in keys]
        if not done:
            return
        self.flying = [s for s in self.flying if s.key not in keys]
        if not self.tracker.hb.races:
            return
        threads = self.tracker.m.threads
        for source in done:
            kept = [s for s in self.landed.get(source.key, ()) if not source.covers(s)]
            source.observers = np.zeros(threads, np.int32)
            self.landed[source.key] = kept + [source]

    def observed(self, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` (threads of the barrier's CTA) waited successfully on the mbarrier `key`: the completions of the
        copies landed on it happen before this point of theirs (their epoch now, kept where it is the first)."""
        records = self.landed.get(key)
        if not records:
            return
        lanes = np.asarray(lanes)
        threads = lanes % self.tracker.m.threads
        epochs = self.tracker.hb.clock[lanes, threads]
        for source in records:
            first = source.observers[threads] == 0
            source.observers[threads[first]] = epochs[first]

    def check_write(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str) -> np.ndarray | None:
        """Refuse `what` of `lanes` (one per byte) writing the bytes `flat` of the space where a copy in flight reads
        one, or where a landed copy read one and the writing thread is not ordered after its completion. Returns,
        per byte of `flat`, the issuing lane of the landed copy the write was judged against (-1: none), or None
        where none was: the copy's read of those bytes ended at its completion, which the write follows."""
        t = self.tracker
        issuers = None
        where = t.where if self.space == "shared" else t.m.global_order.where
        for source in self.flying:
            hit = source.hits(flat)
            if any_set(hit):
                i = int(np.argmax(hit))
                raise t.hazard(inst, f"{what} overwrites {where(int(flat[i]))} while the {self.copy} at line "
                                     f"{source.inst.line} ({t.m.describe_lane(source.lane)}), completing on "
                                     f"{t.where_barrier(source.key)}, may still read it: it reads its source until "
                                     "its complete-tx, which no thread has waited for yet", int(lanes[i]))
        for records in self.landed.values():
            for source in records:
                hit = source.hits(flat)
                if not any_set(hit):
                    continue
                writers, first = np.unique(lanes[hit], return_index=True)  # (each writing thread judged once)
                for lane, i in zip(writers.tolist(), np.flatnonzero(hit)[first].tolist()):
                    if not self._after(lane, source):
                        raise t.hazard(
                            inst, f"{what} overwrites {where(int(flat[i]))} while the {self.copy} at line "
                                  f"{source.inst.line} ({t.m.describe_lane(source.lane)}), which completed on "
                                  f"{t.where_barrier(source.key)}, may still read it: no successful wait on that "
                                  "mbarrier since the copy completed happens before this write (race: a cluster "
                                  "barrier, or an mbarrier arrive of the waiting CTA on a barrier this thread waits "
                                  "on, between that wait and this write is missing)", lane)
                if issuers is None:
                    issuers = np.full(len(flat), -1, np.int64)
                issuers[hit] = source.lane
        return issuers

    def _after(self, lane: int, source: Source) -> bool:
        """Whether `lane` is ordered after a successful wait on the landed copy's barrier (so after its
        completion): what it knows of the destination CTA's threads reaches one's epoch at that wait."""
        t = self.tracker
        slot = source.key[0]
        if int(t.m.lane_cta[lane]) == slot:
            known = t.hb.clock[lane]
        else:
            known = t.hb.peer_known(lane, grid_rank(t.m, slot))
        seen = source.observers
        return any_set((seen > 0) & (known >= seen))


__all__ = ["CopySources", "SPACES", "Source"]
