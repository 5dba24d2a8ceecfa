"""The race checks of the PTX executor's happens-before on global memory (`global_order`, whose docstring has the
rules): `GlobalRaceChecks`, a base class of `GlobalOrder`, decides whether two accesses to a byte are ordered
(by the CTA's clocks, or by what the accessing thread acquired of the other CTA) or morally strong, and reports
the ones that are neither, naming both sides, their proxies and the missing synchronisation.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.global_accesses import (IN_FLIGHT, IS_ASYNC, IS_STRONG, PROXY_NAMES, SCOPE, WEAK,
                                                      is_uniform, scope_holds)
from tessera.interpreters.ranges import marked
from tessera.interpreters.truth import all_set, any_set, equal_arrays

MARKED_SPAN = 64
"""`GlobalRaceChecks._check_together` marks a store's bytes in a table over their span up to this many times their
count (the grid's epilogue stores span 31 times theirs: 4,096 bytes over four CTAs' output tiles)."""


SCOPE_NOTE = ("; a .cta scope holds no thread of another CTA, a .cluster scope none outside the launch's cluster, "
              "so the two are not morally strong")
"""Why two strong accesses of different CTAs race (`_check_together`, `_check`)."""


class GlobalRaceChecks:
    """The race checks of `GlobalOrder` (its base class: the records are `GlobalOrder`'s)."""

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
            if not any_set(keep) and len(lanes) == 1:
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
        if hb.remote and any_set(~same & (rank > 0)):
            for i, lane in enumerate(lanes.tolist()):
                known = hb.remote.get(lane)
                if not known:
                    continue
                for r, row in known.items():
                    hit = rank[i] == r + 1
                    if any_set(hit):
                        ordered[i, hit] = row[tid[i, hit]] >= epoch[i, hit]
        return ordered

    def _ordered_any(self, lanes: np.ndarray, who: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        """Whether each access recorded as `who` at `epoch` [k] happens before the present point of one of
        `lanes` at least: per CTA, the join of its lanes' clocks decides for its own threads' accesses."""
        hb = self.m.tracker.hb
        rank, tid = who >> 16, (who >> 3) & 0x1FFF
        ordered = np.zeros(len(who), bool)
        ranks = self.lane_rank[lanes] + 1
        for r in [int(ranks[0])] if ranks[0] == ranks[-1] and is_uniform(ranks) else np.unique(ranks).tolist():
            hit = rank == r
            if any_set(hit):
                ordered[hit] = hb.clock[lanes[ranks == r]].max(axis=0)[tid[hit]] >= epoch[hit]
        rest = ~ordered & (rank > 0)
        if hb.remote and any_set(rest):  # other CTAs' accesses: what each lane acquired of them
            shape = (len(lanes), int(rest.sum()))
            ordered[rest] = self._ordered(lanes, np.broadcast_to(who[rest], shape),
                                          np.broadcast_to(epoch[rest], shape)).any(axis=0)
        return ordered

    def _check_sets(self, inst, lanes: np.ndarray, index: np.ndarray, kind: int) -> None:
        """A write of `index` checked against every reader kept in the read sets of its bytes."""
        ids = self.read_set[index]
        if not any_set(ids):
            return
        for s in np.unique(ids[ids > 0]).tolist():
            hit = ids == s
            for who, epoch, line in zip(*(x.tolist() for x in self.sets[s])):
                self._check(inst, lanes, index, np.where(hit, who, 0), np.full(index.shape, epoch),
                            np.full(index.shape, line), True, kind, "read")

    def cp_async_reading(self, copy) -> None:
        """A cp.async (`cp_async.AsyncCopy`) issued: its global source bytes are read until it lands."""
        rows = copy.source[copy.source[:, 0] >= 0]
        if len(rows) and self.m.tracker.hb.races:
            if self.cp_reading is None:
                self.cp_reading = np.zeros(self.size, np.int32)
            np.add.at(self.cp_reading, rows, 1)

    def cp_async_read_done(self, copy) -> None:
        """The copies `copy` landed: their reads of the source end here, and are recorded at this point of each
        thread, so a later write must be ordered after the landing, not only after the issue."""
        reading = copy.source[:, 0] >= 0
        if self.cp_reading is None or not any_set(reading):
            return
        np.subtract.at(self.cp_reading, copy.source[reading], 1)
        self.access(copy.inst, copy.lanes[reading], copy.source[reading], False, WEAK)

    def _check_cp_async_sources(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """A write of `index` [lanes, bytes] while a cp.async still reads one of its bytes is a race, its own
        thread's included: the copy may read the source at any time until it lands [memory_model.CP_ASYNC_ORDER]."""
        busy = self.cp_reading[index] > 0
        if not any_set(busy):
            return
        i, j = np.unravel_index(np.argmax(busy), busy.shape)
        b = int(index[i, j])
        copy = next(c for c in self.m.async_copies if any_set(c.source == b))
        lane = int(copy.lanes[int(np.argmax((copy.source == b).any(axis=1)))])
        raise self.m.tracker.hb.hazard(
            inst, f"writes {self.where(b)}, which the cp.async at line {copy.inst.line} ({self.m.describe_lane(lane)}) "
                  "still reads: a cp.async reads its global source until a cp.async.wait_group, cp.async.wait_all or "
                  "cp.async.mbarrier.arrive of its thread lands it, and this write is not ordered after that (race)",
            int(lanes[i]))

    def _check_proxy_fenced(self, inst, lanes: np.ndarray, index: np.ndarray, kind: int, write: bool = False) -> None:
        """The async proxy (a TMA load, a bulk copy or reduction) reads global bytes a thread wrote through the
        generic proxy, or (`write`: a TMA or bulk store) writes over them: a fence.proxy.async (or .global) must lie
        on a happens-before path from the generic write to this access [memory_model.PROXY_FENCE,
        memory_model.PROXY_FENCE_STATE_SPACE]: in this CTA's fenced clocks, or for another CTA's write, in what the
        accessing thread acquired of that CTA (its fences before the release, or the accessor's after the acquire).
        Without it the generic write may land after the async one."""
        table = self.records["write"]
        who = table["who"][index]
        generic = (who != 0) & ~IS_ASYNC[who & 7]
        if not any_set(generic):
            return
        hb = self.m.tracker.hb
        tid, epoch = (who >> 3) & 0x1FFF, table["epoch"][index]
        mine = (who >> 16) == (self.lane_rank[lanes] + 1)[:, None]
        fenced = np.zeros(index.shape, bool)
        fenced[mine] = hb.global_fenced(lanes, tid)[mine] >= epoch[mine]
        if any_set(generic & ~mine):  # another CTA's stores: the fences that came with its release (remote rows)
            for i, lane in enumerate(lanes.tolist()):
                for r, row in hb.remote.get(lane, {}).items():
                    hit = (who[i] >> 16) == r + 1
                    fenced[i, hit] = row[hb.threads + tid[i, hit]] >= epoch[i, hit]
        unfenced = generic & ~fenced
        if not any_set(unfenced):
            return
        i, j = np.unravel_index(np.argmax(unfenced), unfenced.shape)
        b = int(index[i, j])
        does, access = ("writes", "write") if write else ("reads", "read")
        raise self.m.tracker.hb.hazard(
            inst, f"{does} {self.where(b)} through {PROXY_NAMES[kind]}, which the instruction at line "
                  f"{int(table['line'][b])} ({self.describe(int(who[i, j] >> 16) - 1, int(tid[i, j]))}) wrote "
                  "through the generic proxy and has not made visible to the async proxy (missing fence.proxy.async "
                  f"between the store and this {access} on a synchronisation path; a fence.proxy.async.shared::cta "
                  "orders no global memory)", int(lanes[i]))

    def _check_together(self, inst, lanes: np.ndarray, index: np.ndarray | None, kind: int, low: int, high: int,
                        groups: np.ndarray | None = None, words=None) -> None:
        """Threads of one instruction writing one byte: nothing orders them either. With `groups` (per lane: its
        CTA for a strong .cta write, its cluster for a .cluster one, whose scope holds only those threads
        [memory_model.MORALLY_STRONG]) only two threads of different groups race. `index` [lanes, k] lies in
        [low, high). Where that span is at most `MARKED_SPAN`
        times the bytes, the bytes marked in a table over it decide (`ranges.marked`: no sort; an epilogue's stores
        into a few CTAs' output tiles); elsewhere, where each thread's bytes are one run of k (a vector store), the
        runs' starts: no two within k of each other. A byte written twice is then found by a sort, for the report.
        `words`: `index` as aligned words (`global_accesses.Words`), where it is: they are marked instead of its
        bytes (two threads write one byte exactly where they write one word); `index` None: built from them where
        needed."""
        n, k = (len(words.numbers), words.k) if index is None else index.shape
        small = high - low <= MARKED_SPAN * n * k
        if small and words is not None:
            if np.count_nonzero(marked(words.numbers, low // k, -(-high // k))) == n:
                return
        index = words.index() if index is None else index
        if small and words is None:
            if np.count_nonzero(marked(index.reshape(-1), low, high)) == index.size:
                return
        elif not small and n > 1 and k and (k == 1 or equal_arrays(index, index[:, :1] + np.arange(k))):
            starts = np.sort(index[:, 0])
            if all_set(starts[1:] - starts[:-1] >= k):
                return
        flat = index.reshape(-1)
        if groups is not None:  # by byte, then group: a byte two groups write has two neighbours of different groups
            group = np.repeat(groups, k)
            order = np.lexsort((group, flat))
            twice = np.flatnonzero((flat[order][1:] == flat[order][:-1]) & (group[order][1:] != group[order][:-1]))
        else:
            order = np.argsort(flat, kind="stable")
            twice = np.flatnonzero(flat[order][1:] == flat[order][:-1])
        if not len(twice):
            return
        first, second = order[twice[0]] // k, order[twice[0] + 1] // k
        b = int(flat[order[twice[0]]])
        lane, other = int(lanes[second]), int(lanes[first])
        raise self.m.tracker.hb.hazard(
            inst, f"writes {self.where(b)} through {PROXY_NAMES[kind]}, which the instruction at line {inst.line} "
                  f"({self.describe(int(self.lane_rank[other]), other % self.m.threads)}) wrote through "
                  f"{PROXY_NAMES[kind]} at once, and no synchronisation orders the two (race: two threads store to "
                  f"one location in one instruction{SCOPE_NOTE if groups is not None else ''})", lane)

    def _check(self, inst, lanes, index, who, epoch, line, write: bool, kind: int, side: str) -> None:
        """`lanes` access `index` [lanes, bytes], whose earlier access (per byte: `who` at `epoch` from `line`,
        who 0 for none) was a write (`side` "write") or a read: a race unless ordered or morally strong."""
        if not any_set(who):
            return
        rank = who >> 16
        mine = (self.lane_rank[lanes] + 1)[:, None]
        other_kind = who & 7
        same = rank == mine
        ordered = self._ordered(lanes, who, epoch)
        strong_pair = IS_STRONG[kind] & IS_STRONG[other_kind] & (IS_ASYNC[kind] == IS_ASYNC[other_kind])
        strong = strong_pair.copy()
        if any_set(strong):  # and each one's scope holds the other's thread
            ranks, others = np.broadcast_arrays(mine - 1, np.maximum(rank - 1, 0))
            strong &= scope_holds(self.m, SCOPE[kind], ranks, others) & \
                scope_holds(self.m, SCOPE[other_kind], others, ranks)
        racing = (rank > 0) & ~ordered & ~strong
        if not any_set(racing):
            return
        i, j = np.unravel_index(np.argmax(racing), racing.shape)
        b, r, t = int(index[i, j]), int(rank[i, j]) - 1, int((who[i, j] >> 3) & 0x1FFF)
        did = "wrote" if side == "write" else "read"
        does = "writes" if write else "reads"
        if side == "write" and epoch[i, j] == IN_FLIGHT:
            missing = ("the store is in flight until a cp.async.bulk.wait_group of its thread without .read covers its "
                       "bulk group, which must happen before this access; a .read wait completes only the reads of its "
                       "source")
        elif same[i, j]:
            missing = "a bar.sync, an mbarrier wait or a release/acquire pair between them is missing"
        else:
            missing = ("another CTA's access is ordered only by a release (st.release, red/atom.release, or "
                       "fence.acq_rel then a strong write) that this thread acquires (ld.acquire, atom.acquire, or a "
                       "strong read then fence.acq_rel) on one location, each of a scope holding the other CTA (a "
                       ".cta fence or membar.cta does not, a .cluster one only inside the launch's cluster), and "
                       "there is none")
            if strong_pair[i, j]:  # both strong, a scope too narrow
                missing += SCOPE_NOTE
        raise self.m.tracker.hb.hazard(inst, f"{does} {self.where(b)} through {PROXY_NAMES[kind]}, which the "
                                             f"instruction at line {int(line[i, j])} ({self.describe(r, t)}) {did} "
                                             f"through {PROXY_NAMES[int(other_kind[i, j])]}, and no synchronisation "
                                             f"orders the two (race: {missing})", int(lanes[i]))

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
