"""Reads of a CTA's shared memory by its peers in a cluster (distributed shared memory: `ld.shared::cluster`
through `mapa`) in the PTX executor's happens-before (`happens_before`, whose docstring has the model).

A peer's access is judged in the frame of the CTA that owns the bytes: the accessing lane's clock there is what
it knows of the owner's threads (`peer_known`). A peer's reads are kept apart from the owner's own readers
(`reads`, whose columns are the threads of one CTA): `peer_reads` has a column per thread of the cluster, and a
peer's strong loads of a scope wider than .cta are in `peer_strong_reads`, so a later write of those bytes, by the
owner or by an asynchronous copy, is judged by what the writer knows of the reading peer's threads
[memory_model.WRITE_ORDER]; a strong write is morally strong with a strong peer read unless a .cta scope leaves
the other CTA out [memory_model.MORALLY_STRONG]. `peer_read_any` stays False, and these checks cost nothing,
until some peer reads.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.read_clocks import ReadClocks
from tessera.interpreters.truth import any_set


class PeerAccesses:
    """The peer CTAs' accesses of `HappensBefore` (its base class: the clocks and records are
    `HappensBefore`'s)."""

    def _peer_rows(self, lanes: np.ndarray, index: np.ndarray):
        """For accesses of a peer CTA's shared memory (a shared::cluster address through `mapa`, in a cluster):
        (the rows of `lanes` that access a peer's bytes, each such lane's clock in that peer's frame:
        `peer_known`), or None when every row is the lane's own CTA's."""
        if self.peer_frame is None or not index.size:
            return None
        size, rank_of = self.peer_frame
        slots = index[:, 0] // size
        foreign = slots != lanes // self.threads
        if not any_set(foreign):
            return None
        rows = np.stack([self.peer_known(int(lane), rank_of(int(slot)))
                         for lane, slot in zip(lanes[foreign], slots[foreign])])
        return foreign, rows

    def _peer_read(self, inst, lanes: np.ndarray, index: np.ndarray, strong: bool = False) -> None:
        """`lanes` read `index` [lanes, bytes] of a peer CTA's shared memory (`ld.shared::cluster` through `mapa`).
        Kept apart from the CTA's own readers (`reads`, whose columns are the threads of one CTA): `peer_reads`
        (`peer_strong_reads` for a `strong` load of a scope wider than .cta) has a column per thread of the
        cluster (`cluster_rows`), so a later write of those bytes, by the owner or by an asynchronous copy, is
        judged by what the writer knows of the reading peer's threads [memory_model.WRITE_ORDER]."""
        size = self.cluster_size * self.threads
        if strong:
            if self.peer_strong_reads is None:
                self.peer_strong_reads = ReadClocks(self.shared, size)
            reads = self.peer_strong_reads
        else:
            if self.peer_reads is None:
                self.peer_reads = ReadClocks(self.shared, size)
            reads = self.peer_reads
        clocks = np.zeros((self.lanes, size), np.int32)  # rows of the readers only
        unique = np.unique(lanes)
        clocks[unique] = self.cluster_rows(unique)
        reads.record(lanes, index, self.own_epochs(lanes), inst.line, clocks)
        self.peer_read_any = True

    def _after_peer_reads(self, inst, lanes: np.ndarray, index: np.ndarray, does: str, atomic: bool = False,
                          cta_scoped: bool = False) -> None:
        """Every peer's read of `index` [lanes, bytes] since its last write must happen before the writing lanes,
        a peer's strong read (`peer_strong_reads`, of a scope holding the whole cluster) unless the write is
        morally strong with it [memory_model.MORALLY_STRONG]: an `atomic` (or strong) write is, unless it is
        `cta_scoped` and of another CTA than the reader's (the owner's st.relaxed.cta after a peer's
        ld.relaxed.cluster of the word is a race)."""
        if not self.peer_read_any:
            return
        rows = None
        for reads, strong in ((self.peer_reads, False), (self.peer_strong_reads, True)):
            if reads is None or strong and atomic and not cta_scoped:
                continue
            if not (any_set(reads.clock[index]) or (reads.shared and any_set(reads.row[index]))):
                continue
            if rows is None:
                rows = self.cluster_rows(lanes)
            known = rows
            if strong and atomic:  # .cta: morally strong with the reads of the writer's own CTA, ordered or not
                known = rows.copy()
                t = self.threads
                for i, slot in enumerate((np.asarray(lanes) // t % self.cluster_size).tolist()):
                    known[i, slot * t:(slot + 1) * t] = np.iinfo(np.int32).max
            found = reads.unordered(lanes, index, self.clock, known)
            if found is not None:
                i, j, reader, line = found
                scope = "; a .cta scope holds no thread of another CTA" if strong and atomic else ""
                raise self.hazard(inst, f"{does} {self.where(int(index[i, j]))}, which the instruction at line {line} "
                                        f"({self.describe_lane(reader)}) read through a shared::cluster address, and "
                                        "no synchronisation orders the two (race: a cluster barrier, or a release of "
                                        f"the peer's read on an mbarrier this thread waits on, is missing{scope})",
                                  int(lanes[i]))
