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
  the other's thread (.cta only within one CTA, .cluster within the launch's cluster, also for two threads of one
  instruction). Atomics of .gpu or .sys scope never race with each other.

The report names both sides: the instruction and line, thread and CTA, the proxy (generic, or async: TMA
loads and stores, bulk copies and reductions) and the synchronisation that was missing.

Release and acquire patterns [memory_model.RELEASE_ACQUIRE] on a location M (its first byte; a shared-memory
flag is the location -1 - its flat index, and orders threads of the CTA the same way):
- a release operation (st.release, red/atom.release or .acq_rel), or a strong write after a fence.acq_rel /
  fence.sc / fence.release / membar of the same thread (the release is the fence's point), publishes the
  thread's clock, and what it knows of other CTAs, at M;
- an acquire operation (ld.acquire, atom.acquire or .acq_rel) of M, or a strong read of M followed by such a
  fence (`atom` reads; `red` does not: its strong read forms no acquire pattern), takes in every release
  published at M by a thread whose scope and its own include each other. Where a fence begins (ends) the
  pattern, the fence's scope counts too: a .cta fence (membar.cta) synchronises with its own CTA only, a .cluster
  one with its cluster's (`global_accesses.scope_holds`).
Joining every release at M so far (not only the one whose value the read returns) can hide a race whose
acquire read an older value; it never reports a correct kernel.

A cp.async reads its global source until the copy lands (its thread's cp.async.wait_group or wait_all, or its
cp.async.mbarrier.arrive) [memory_model.CP_ASYNC_ORDER]: a write of those bytes before is reported, and the read is
recorded again at the landing, so a write must be ordered after it (`GlobalRaceChecks.cp_async_reading`).

An async-proxy write of global memory (a bulk or TMA store, a bulk reduction) is in flight from its issue until a
`cp.async.bulk.wait_group` of the issuing thread without `.read` covers its bulk group ("`.read` ... until all the
bulk async operations ... have completed reading from their source locations": the writes may still be under way):
its records hold the epoch `IN_FLIGHT`, which no clock reaches, until that wait gives them the thread's epoch there
(`writes_completed`). So an access after a `.read` wait only, or after none, races the store whatever barrier
follows, and one ordered after the full wait does not.

Where: the kinds of access and `StridedBox` are `global_accesses`, the race checks `global_checks`, the
release/acquire edges `release_acquire`, the TMA loads' reads (boxes kept as one, reads until the complete-tx)
`tma_read_records`; this module holds `GlobalOrder`'s records and how accesses update them.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.global_accesses import (ASYNC, ASYNC_REDUCE, CTA, GPU, IN_FLIGHT, IS_ASYNC, IS_STRONG,
                                                      SCOPE, StridedBox, Words, cluster_of, is_uniform, put_at)
from tessera.interpreters.ptx.byte_ranges import meets_any, with_range
from tessera.interpreters.ptx.global_checks import GlobalRaceChecks
from tessera.interpreters.ptx.release_acquire import ReleaseAcquire
from tessera.interpreters.ptx.tma_read_records import TmaReadRecords
from tessera.interpreters.truth import all_set, any_set


class GlobalOrder(GlobalRaceChecks, ReleaseAcquire, TmaReadRecords):
    """The access records of a launch's global memory and the release records of its locations; see the
    module docstring. `m` is the machine (its `tracker.hb` holds the clocks), `size` the bytes of global
    memory. Records are allocated at the first access (zeroed pages cost nothing until touched); the write records
    of `previous`, the launch before of the same program (its machine's), are zeroed and taken instead
    (`_cleared_writes`)."""

    keep_boxes = True
    """Keep the records of TMA boxes as one per box (`boxes`); False records each read in the per-byte tables at
    once (the same records: tests compare the two)."""

    FIELDS = ("who", "epoch", "line")
    """Per byte and side: `who` packs (CTA rank + 1) << 16 | thread << 3 | kind (0: none; thread < 1024 needs
    13 bits with the kind), then the epoch and the line."""

    def __init__(self, m, size: int, previous: "GlobalOrder | None" = None):
        self.m, self.size = m, size
        self.records: dict[str, dict[str, np.ndarray]] = {}
        self.spare = None if previous is None else previous._cleared_writes(size)
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
        # record in (outside them every record is zero); `hulls_span`: [low, high) holding every hull (a bound: it
        # stays when a box is settled), so that an access outside it (an epilogue's stores) settles nothing at once
        self.boxes: dict[StridedBox, list] = {}
        self.hulls: dict[StridedBox, tuple[int, int]] = {}
        self.hulls_span = (0, 0)
        self.touched: list[tuple[int, int]] = []
        self.reset_batch()

    def reset_batch(self) -> None:
        """A new batch of CTAs: lanes are new threads (their fences and pending acquires are gone)."""
        m = self.m
        self.fence_release: dict[int, tuple] = {}  # lane -> released (clock, fenced, remote) at its last fence
        self.fence_scope: dict[int, int] = {}  # lane -> that fence's scope (global_accesses.CTA, CLUSTER, GPU)
        self.pending_acquire: dict[int, list] = {}  # lane -> releases its strong reads saw since its last fence
        # async-proxy writes of global memory in flight (`IN_FLIGHT`): (lane, its bulk group, flat bytes); a lane of
        # an earlier batch never waits for its own any more, and its records keep IN_FLIGHT
        self.in_flight: list[tuple[int, int, np.ndarray]] = []
        self.cp_reading: np.ndarray | None = None  # per byte: the cp.async copies still reading it (`cp_async_reading`)
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
            spare, self.spare = self.spare, None
            if side == "write" and spare is not None and spare["who"].dtype == (np.int64 if wide else np.int32):
                table = self.records[side] = spare
            else:
                table = self.records[side] = {"who": np.zeros(self.size, np.int64 if wide else np.int32),
                                              "epoch": np.zeros(self.size, np.int32),
                                              "line": np.zeros(self.size, np.int32)}
        return table

    def _cleared_writes(self, size: int) -> dict[str, np.ndarray] | None:
        """This launch's write records, zeroed again, for the next launch of the same program over `size` bytes of
        global memory (`spare`; None where it has none): `access`, their one writer (`writes_completed` rewrites
        epochs it wrote), touches the range of what it writes first (`touched`), so zeroing those ranges zeroes every
        record, a few pages where a fresh table zeroes every byte of global memory (an epilogue's stores)."""
        table = self.records.pop("write", None)
        if table is None or size != self.size:
            return None
        for low, high in self.touched:
            for column in table.values():
                column[low:high] = 0
        return table

    def access(self, inst, lanes: np.ndarray, index: np.ndarray | Words, write: bool, kind: int) -> None:
        """`lanes` access the global bytes `index` [lanes, bytes] (flat buffer positions, or a store's aligned `Words`,
        as `Words.of` would find them) as `kind`; a race with an earlier access is raised (`PtxHazardError`), then
        the access is recorded."""
        hb = self.m.tracker.hb
        if not hb.races or index.size == 0:
            return
        if isinstance(index, Words):
            words, (low, high) = index, index.bounds()
        else:
            index = np.asarray(index, np.int64).reshape(len(lanes), -1)
            low, high = int(index.min()), int(index.max()) + 1
            words = Words.of(index, self.size)  # (a plain vector store's: its tables' rows, not its bytes, below)
        self._settle(low, high)
        if isinstance(index, Words):  # the bytes' index, only where a record or check below needs it
            index = None if write and not IS_ASYNC[kind] and self.until is None and self.read_set is None and \
                self.cp_reading is None and not self.m.tracker.global_sources else words.index()
        self._touch(low, high)
        judged = self._check_until(inst, lanes, index) if write and self.until is not None else None
        sourced = None  # [lanes, bytes]: the issuer of the load into peers whose read the write follows, or -1
        if write and self.m.tracker.global_sources:  # the source of a load that lands only in peers
            sourced = self.m.tracker.global_sources.check_write(inst, np.repeat(lanes, index.shape[1]),
                                                                index.reshape(-1), "the write")
        if write and self.cp_reading is not None:
            self._check_cp_async_sources(inst, lanes, index)
        for side in ("write", "read") if write else ("write",):
            if side in self.records:
                table = self.records[side]
                who = table["who"][index] if words is None else words.get(table["who"])
                if side == "read" and self.read_set is not None:
                    who = np.where(self.read_set[index] == 0, who, 0)  # those bytes' readers are in their set
                if side == "read" and judged is not None:
                    who = np.where(judged & (who == self.until["who"][index]), 0, who)  # by their completion
                if side == "read" and sourced is not None:  # the load's read at issue: judged by its completion
                    issuer = sourced.reshape(index.shape)
                    who = np.where((issuer >= 0) & (who == (self.lane_who[np.maximum(issuer, 0)] | ASYNC)), 0, who)
                if any_set(who):  # (no earlier access of these bytes on this side: nothing to check, as `_check` finds)
                    index = words.index() if index is None else index
                    self._check(inst, lanes, index, who, table["epoch"][index], table["line"][index], write, kind,
                                side)
        if write and self.read_set is not None:
            self._check_sets(inst, lanes, index, kind)
        if write and len(lanes) > 1 and SCOPE[kind] < GPU:  # strong .gpu/.sys writes of one instruction never race
            groups = None
            if IS_STRONG[kind]:
                ranks = self.lane_rank[lanes]
                groups = ranks if SCOPE[kind] == CTA else cluster_of(self.m, ranks)
            self._check_together(inst, lanes, index, kind, low, high, groups, words)
        if IS_ASYNC[kind] and "write" in self.records:  # across proxies, a write after a write needs the fence too
            self._check_proxy_fenced(inst, lanes, index, kind, write and kind != ASYNC_REDUCE)
        who = (self.lane_who[lanes] | kind)[:, None]
        epochs = hb.own_epochs(lanes)[:, None]
        if write and IS_ASYNC[kind]:  # a bulk or TMA store or reduction: in flight until its group completes
            epochs = np.full_like(epochs, IN_FLIGHT)
            groups = self.m.tracker.bulk_open[lanes]
            self.in_flight.extend(zip(lanes.tolist(), groups.tolist(), index))
        if write:
            if self.until is not None:
                self.until["phase"][index] = 0
            table = self._table("write")
            # each as a full array of the table's type: NumPy's scatter of a broadcast column with a cast into it is
            # some four times slower
            if words is not None:  # each word's row takes its lane's value
                for field, values in (("who", who), ("epoch", epochs), ("line", inst.line)):
                    words.put(table[field], values)
                for cleared in (self.records.get("read", {}).get("who"), self.read_set):
                    if cleared is not None:
                        words.put(cleared, 0)
                return
            for field, values in (("who", who), ("epoch", epochs)):
                column = table[field]
                column[index] = np.broadcast_to(values, index.shape).astype(column.dtype)
            table["line"][index] = inst.line
            if "read" in self.records:
                self.records["read"]["who"][index] = 0
            if self.read_set is not None:
                self.read_set[index] = 0
            return
        self._record_read(inst, lanes, index, who, epochs)

    def writes_completed(self, lanes: np.ndarray, done: np.ndarray) -> None:
        """`lanes` ran a cp.async.bulk.wait_group without .read that completed their bulk groups up to `done` (per
        lane): their async writes of global memory in those groups happen at this point of each lane's program, and
        their records still holding `IN_FLIGHT` (not written again since) take the lane's epoch."""
        if not self.in_flight:
            return
        hb, table = self.m.tracker.hb, self.records.get("write")
        upto = dict(zip(lanes.tolist(), done.tolist()))
        left = []
        for lane, group, index in self.in_flight:
            if group > upto.get(lane, -1):
                left.append((lane, group, index))
                continue
            mine = ((table["who"][index] >> 3) == self.lane_who[lane] >> 3) & (table["epoch"][index] == IN_FLIGHT)
            table["epoch"][index[mine]] = hb.clock[lane, lane % self.m.threads]
        self.in_flight = left

    def check_read_only(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """`lanes` read global bytes `index` [lanes, bytes] through the non-coherent read-only path (`ld.global.nc`,
        `ldu`): a byte a thread of this launch wrote before is reported, ordered or not (`memory._check_read_only`)."""
        table = self.records.get("write")
        if table is None or not self.m.tracker.hb.races:
            return
        who = table["who"][index]
        if not any_set(who):
            return
        i, j = np.unravel_index(np.argmax(who != 0), who.shape)
        w, b = int(who[i, j]), int(index[i, j])
        writer = self.describe((w >> 16) - 1, (w >> 3) & 0x1FFF)
        raise self.m.tracker.hb.hazard(
            inst, f"reads {self.where(b)} through the non-coherent read-only path, which the instruction at line "
                  f"{int(table['line'][b])} ({writer}) wrote during this launch: data loaded by ld.global.nc or ldu "
                  "(__ldg, const __restrict__) must be read-only for the whole launch, as no synchronisation makes a "
                  "write visible to that cache (load it with ld.global, or ld.acquire after a release)", int(lanes[i]))

    def _touched(self, low: int, high: int) -> bool:
        """Whether the per-byte tables may hold a record in [low, high)."""
        return meets_any(self.touched, low, high)

    def _touch(self, low: int, high: int) -> None:
        """The per-byte tables may hold records in [low, high) from now (`byte_ranges.with_range`)."""
        self.touched = with_range(self.touched, low, high)

    def _record_read(self, inst, lanes: np.ndarray, index: np.ndarray, who: np.ndarray, epochs: np.ndarray) -> None:
        """Keep every read of `index` since its last write that no later read of it happens after (FastTrack's
        read epoch, inflated to a set of readers when two reads are concurrent) [memory_model.DATA_RACE]: a
        byte's one reader in the "read" table while each read happens after the one before, else its readers in
        `sets[read_set[byte]]`. A read drops the readers that happen before it (a write ordered after it is
        ordered after them); two threads reading one byte in one instruction are concurrent."""
        read = self._table("read")
        if len(lanes) > 1 and all_set(index == index[:1]):
            # every lane reads the same bytes (a broadcast load): one set of readers for bytes read alike before
            row = index[0]
            if self.read_set is None:
                self.read_set = np.zeros(self.size, np.int32)
            s0, pw, pe, pl = self.read_set[row], read["who"][row], read["epoch"][row], read["line"][row]
            if is_uniform(s0) and is_uniform(pw) and is_uniform(pe) and is_uniform(pl):
                s = int(s0[0])
                self._read_into(row, s, 0 if s else int(pw[0]), 0 if s else int(pe[0]), int(pl[0]), lanes,
                                who[:, 0], epochs[:, 0], inst.line)
                return
        prev_who, prev_epoch = read["who"][index], read["epoch"][index]
        ids = self.read_set[index] if self.read_set is not None else None
        if len(lanes) == 1 and is_uniform(prev_who) and is_uniform(prev_epoch) and (ids is None or is_uniform(ids)):
            # one thread's bytes (a TMA box, a bulk copy) all read by the same readers before: one decision
            s, pw, pe = (0 if ids is None else int(ids[0, 0])), int(prev_who[0, 0]), int(prev_epoch[0, 0])
            if not s and (not pw or self._ordered(lanes, prev_who[:, :1], prev_epoch[:, :1])[0, 0]):
                read["who"][index], read["epoch"][index], read["line"][index] = who, epochs, inst.line
                return
            lines = read["line"][index]
            if is_uniform(lines):
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
            if any_set(same):
                hit = np.zeros(flat.size, bool)
                hit[order[1:][same]] = hit[order[:-1][same]] = True
                twice = hit.reshape(index.shape)
                simple &= ~twice
        if all_set(simple):
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
        if any_set(alone):
            columns = np.stack([ids[alone].astype(np.int64), prev_who[alone].astype(np.int64),
                                prev_epoch[alone].astype(np.int64), read["line"][index[alone]].astype(np.int64),
                                rows[alone]])
            if all_set(columns == columns[:, :1]):
                groups, inverse = columns[:, :1], np.zeros(columns.shape[1], np.int64)
            else:
                groups, inverse = np.unique(columns, axis=1, return_inverse=True)
            where = index[alone]
            for g in range(groups.shape[1]):
                s, pw, pe, pl, r = (int(x) for x in groups[:, g])
                self._read_into(where[inverse.reshape(-1) == g], s, pw, pe, pl, lanes[[r]], who[[r], 0], epochs[[r], 0],
                                inst.line)
        if any_set(twice):
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
        put_at(self.read_set, where, new)
        if not new:
            for field, value in (("who", int(who[0])), ("epoch", int(epochs[0])), ("line", line)):
                put_at(read[field], where, value)


__all__ = ["GlobalOrder"]
