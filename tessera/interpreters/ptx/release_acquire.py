"""Release and acquire on global (and shared-memory flag) locations for the PTX executor's happens-before
(`global_order`, whose docstring has the patterns): `ReleaseAcquire`, a base class of `GlobalOrder`. A release
publishes the releasing threads' clocks, and what they know of other CTAs, at a location; an acquire takes in
every release published there by a thread whose scope and its own include each other; a fence turns the
thread's next strong write (read) into a release (acquire).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.global_accesses import CLUSTER, CTA, GPU, SCOPE, scope_holds


class ReleaseAcquire:
    """The release/acquire edges of `GlobalOrder` (its base class: the records are `GlobalOrder`'s)."""

    def release(self, lanes: np.ndarray, locations: np.ndarray, kind: int, fenced: bool = False) -> None:
        """`lanes` perform a release pattern on the global `locations` (flat, one per lane): a release operation,
        or (`fenced`) a strong write after the lane's last release fence, which then is the release point."""
        hb = self.m.tracker.hb
        for lane, location in zip(lanes.tolist(), locations.tolist()):
            scope = int(SCOPE[kind])
            if fenced:
                released = self.fence_release.get(lane)
                if released is None:
                    continue
                scope = min(scope, self.fence_scope[lane])  # the pattern's first operation is the fence
            else:
                released = hb._release(np.array([lane]))
            c, f, remote = released
            joined = self.releases.setdefault(location, {})
            key = (int(self.lane_rank[lane]), scope)
            entry = joined.get(key)
            if entry is None:
                joined[key] = [kind, c.copy(), remote, f.copy()]
            else:
                entry[1], entry[3] = np.maximum(entry[1], c), np.maximum(entry[3], f)
                entry[2] = join_cta_knowledge(entry[2], remote)

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
            usable = [(source, *entry) for (source, scope), entry in published.items()
                      if source == rank or self._holds(scope, source, rank) and self._holds(SCOPE[kind], rank, source)]
            if now:
                self._take(lane, usable)
            else:
                self.pending_acquire.setdefault(lane, []).extend(usable)

    def _take(self, lane: int, published) -> None:
        hb = self.m.tracker.hb
        rank = int(self.lane_rank[lane])
        for source, _, clock, remote, fenced in published:
            if source == rank:
                hb.rows_changed([lane])
                hb.clock[lane] = np.maximum(hb.clock[lane], clock)
                hb.fenced[lane] = np.maximum(hb.fenced[lane], fenced)
                hb.fenced_rows[lane] = True
            else:  # what the lane knows of that CTA: its clock, then what proxy fences covered of its global stores
                hb.learn([lane], {source: np.concatenate([clock, fenced[hb.threads:]])})
            hb.learn([lane], {r: row for r, row in (remote or {}).items() if r != rank})

    def fence(self, lanes: np.ndarray, release: bool, acquire: bool, scope: int) -> None:
        """A memory fence (fence.sc / fence.acq_rel / fence.release / fence.acquire / membar) of `lanes`, of `scope`
        (`global_accesses.scope_level`). A release (acquire) pattern built on a fence synchronises only if its first
        (last) operation, the fence, is morally strong with the other side's [memory_model.RELEASE_ACQUIRE]: a .cta
        fence orders nothing with another CTA's threads, as __threadfence_block() does not, a .cluster fence nothing
        outside the launch's cluster."""
        if acquire:
            for lane in lanes.tolist():
                waiting = self.pending_acquire.pop(lane, None)
                if waiting:
                    rank = int(self.lane_rank[lane])
                    waiting = [entry for entry in waiting if self._holds(scope, rank, entry[0])]
                if waiting:
                    self._take(lane, waiting)
        if release:
            hb = self.m.tracker.hb
            for lane in lanes.tolist():
                self.fence_release[lane] = hb._release(np.array([lane]))
                self.fence_scope[lane] = scope

    def _holds(self, scope: int, rank: int, other: int) -> bool:
        """Whether a scope `scope` of a thread of CTA `rank` holds CTA `other`'s threads."""
        if scope != CLUSTER:  # the common cases without NumPy: this runs per published release of every acquire
            return scope >= GPU or scope == CTA and rank == other
        return bool(scope_holds(self.m, scope, np.array(rank), np.array(other)))


def join_cta_knowledge(a: dict | None, b: dict | None) -> dict | None:
    """The join of two releases' (or messages') knowledge of other CTAs ({rank: clock row}, None for none): the
    elementwise maximum where both know a CTA. The PTX executor and the CTA simulator both keep it so."""
    if not a or not b:
        return a or b
    joined = dict(a)
    for rank, row in b.items():
        joined[rank] = row if rank not in joined else np.maximum(joined[rank], row)
    return joined
