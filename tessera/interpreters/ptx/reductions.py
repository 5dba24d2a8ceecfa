"""Reductions between CTAs in the PTX executor: `cp.reduce.async.bulk`, the bulk groups' `.read` rule, and the
races that no order of the CTAs makes right.

`cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src], size` [P#data-movement-and-
conversion-instructions-cp-reduce-async-bulk] adds `size / 4` f32 from shared memory into global memory (.ftz,
as global f32 atomics are) when issued, one legal timing, but its source stays *being read* until a
`cp.async.bulk.wait_group.read N` (or `wait_group N`) of the issuing thread covers its group
(`cp.async.bulk.commit_group`, per thread): a store into those shared bytes before then (st.shared,
stmatrix, any generic access) is reported, and so is one after it that no synchronisation orders after that
wait (happens_before: a buffer released to other threads before the wait), and a CTA that exits while one is
still being read [memory_model.BULK_READ_BEFORE_EXIT].

A `ReductionWatch` is attached to the machine (`Machine.watch`) when the entry has `red`, `atom` or
`cp.reduce`: every global access then marks the 32-bit words it touches with the CTA (its linear index in the
grid) that stored, added or read them, and reports, naming both CTAs:
- a plain store to a word another CTA adds into (red, atom, cp.reduce): the store and the add are unordered.
  With the race checks on, a store against `atom` is left to `global_order`, which knows when a release and
  acquire order the two (threadFenceReduction's last block resets the ticket counter every block took);
- a plain load of a word another CTA *reduces* into (red, cp.reduce: the result-less reductions that
  accumulate, like dq_accum): it reads before every contribution landed, unless (with the race checks on)
  happens-before orders every `red` of the other CTAs before the load: they released after adding and the
  loading thread acquired it (the last CTA of a split reduction reading the total, CUDA's
  threadFenceReduction). `atom`, whose result orders it (a counter, a semaphore), may be read.
The CTAs run in the launch's `cta_order` (a permutation; batches of CTAs run together), so a test can show
that the sum does not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.interpreters.ptx.global_accesses import ASYNC_REDUCE
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.memory import access, lanes_of
from tessera.interpreters.ptx.state import GLOBAL_BASE, Machine
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import any_set

NO_CTA, MANY_CTAS = -1, -2
WORD = 4
BULK_ALIGNMENT = 16
"""cp.reduce.async.bulk: addresses and size are multiples of 16 bytes."""


def uses_reductions(entry) -> bool:
    """Whether the entry has red, atom or cp.reduce (then the launcher attaches a `ReductionWatch`)."""
    return any(inst.opcode in ("red", "atom") or (inst.opcode == "cp" and "reduce" in inst.modifiers)
               for inst in entry.instructions)


@dataclass(eq=False)
class BulkRead:
    inst: object
    lane: int
    index: np.ndarray  # flat indices into Machine.shared
    group: int | None = None


@dataclass
class ReductionWatch:
    m: Machine
    marks: dict[str, np.ndarray] = field(default_factory=dict)
    reading: list[BulkRead] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    adders: dict[int, np.ndarray] = field(default_factory=dict)
    """Per CTA rank that reduced into global memory with `red`: each thread's epoch at its latest one (-1: none)."""
    bulk_reduced: bool = False
    """A cp.reduce.async.bulk ran: its adds are in flight past their issue, so no epoch orders them."""

    # region marks of global words
    def _table(self, kind: str) -> np.ndarray:
        if kind not in self.marks:
            self.marks[kind] = np.full(self.m.memory.buffer.size // WORD + 1, NO_CTA, np.int32)
        return self.marks[kind]

    def ranks(self, lanes: np.ndarray) -> np.ndarray:
        gx, gy, _ = self.m.grid
        cid = self.m.ctaid[self.m.lane_cta[lanes]]
        return (cid[:, 0] + gx * (cid[:, 1] + gy * cid[:, 2])).astype(np.int32)

    def _cta(self, rank: int) -> str:
        if rank == MANY_CTAS:
            return "several other CTAs"
        gx, gy, _ = self.m.grid
        return f"CTA ({rank % gx}, {rank // gx % gy}, {rank // (gx * gy)})"

    def _race(self, inst, message: str, lane: int):
        """A race these marks expose is a hazard (`PtxHazardError`), as happens_before reports the others."""
        return self.m.tracker.hazard(inst, message, lane)

    def _conflict(self, kind: str, words: np.ndarray, ranks: np.ndarray):
        if kind not in self.marks:
            return None
        marks = self.marks[kind][words]
        other = (marks != NO_CTA) & (marks != ranks)
        return int(np.argmax(other)) if any_set(other) else None

    def _mark(self, kind: str, words: np.ndarray, ranks: np.ndarray) -> None:
        """Mark `words` as touched by the CTA of each (`ranks`); lanes of several CTAs of the batch may share a
        word in one instruction (MANY_CTAS then)."""
        if not len(words):
            return
        table = self._table(kind)
        order = np.argsort(words, kind="stable")
        unique, start = np.unique(words[order], return_index=True)
        low, high = np.minimum.reduceat(ranks[order], start), np.maximum.reduceat(ranks[order], start)
        mine = np.where(low == high, low, MANY_CTAS)
        before = table[unique]
        table[unique] = np.where((before == NO_CTA) | (before == mine), mine, MANY_CTAS)

    def _words(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        first = (addresses - GLOBAL_BASE) // WORD
        return (first[:, None] + np.arange(max(1, nbytes // WORD))).reshape(-1)

    def _store_conflicts(self) -> str:
        """The marks a plain store conflicts with: every add ("added"), or with the race checks on only the
        result-less reductions ("reduced"; `global_order` judges stores against `atom` by happens-before)."""
        return "reduced" if self.m.tracker.hb.races else "added"

    def on_global(self, inst, lanes: np.ndarray, addresses: np.ndarray, nbytes: int, write: bool) -> None:
        """A plain ld/st of `nbytes` per lane at global `addresses` (checked, in bounds)."""
        words = self._words(addresses, nbytes)
        lanes = np.repeat(lanes, len(words) // max(len(lanes), 1))
        ranks = self.ranks(lanes)
        kinds = (self._store_conflicts(), "stores plainly to", "a race between CTAs: the store and the atomic add are "
                 "unordered") if write else ("reduced", "reads", "it reads before every contribution landed")
        i = self._conflict(kinds[0], words, ranks)
        if i is not None and not write and self._adds_ordered(lanes, int(self.marks[kinds[0]][words[i]])):
            i = None
        if i is not None:
            rank = int(self.marks[kinds[0]][words[i]])
            raise self._race(inst, f"{kinds[1]} global address {GLOBAL_BASE + WORD * int(words[i]):#x}, which "
                                   f"{self._cta(rank)} {'add' if rank == MANY_CTAS else 'adds'} into in this launch "
                                   f"({kinds[2]})", int(lanes[i]))
        self._mark("stored" if write else "read", words, ranks)

    def on_add(self, inst, lanes: np.ndarray, addresses: np.ndarray, nbytes: int, reduction: bool) -> None:
        """An atomic add (`reduction`: red or cp.reduce, without a result) at global `addresses`."""
        words = self._words(addresses, nbytes)
        lanes = np.repeat(lanes, len(words) // max(len(lanes), 1))
        ranks = self.ranks(lanes)
        checks = []
        if reduction or self._store_conflicts() == "added":
            checks.append(("stored", "stored plainly to", "a race between CTAs: the store and the atomic add are "
                                                          "unordered"))
        if reduction:
            checks.append(("read", "read", "it read before every contribution landed"))
        for kind, what, why in checks:
            i = self._conflict(kind, words, ranks)
            if i is not None:
                raise self._race(inst, f"adds into global address {GLOBAL_BASE + WORD * int(words[i]):#x}, which "
                                       f"{self._cta(int(self.marks[kind][words[i]]))} {what} earlier in this "
                                       f"launch ({why})", int(lanes[i]))
        self._mark("added", words, ranks)
        if reduction:
            self._mark("reduced", words, ranks)
            self._note_reduction(inst, lanes, ranks)

    def _note_reduction(self, inst, lanes: np.ndarray, ranks: np.ndarray) -> None:
        """`lanes` (of CTAs `ranks`) reduced into global memory now (`adders`; a bulk one: `bulk_reduced`)."""
        if inst.opcode != "red":
            self.bulk_reduced = True
            return
        threads = self.m.threads
        epochs = self.m.tracker.hb.clock[lanes, lanes % threads]
        for rank in np.unique(ranks).tolist():
            latest = self.adders.get(rank)
            if latest is None:
                latest = self.adders[rank] = np.full(threads, -1, np.int64)
            mine = ranks == rank
            np.maximum.at(latest, lanes[mine] % threads, epochs[mine])

    def _adds_ordered(self, lanes: np.ndarray, marked: int) -> bool:
        """Whether every `red` of a CTA other than each of `lanes`' own (of CTA `marked`, or any: MANY_CTAS)
        happens before each lane's present point (what it acquired of that CTA, `HappensBefore.remote`), with
        the race checks on and no bulk reduction (in flight past its issue) in the launch."""
        hb = self.m.tracker.hb
        if not hb.races or self.bulk_reduced:
            return False
        threads = self.m.threads
        for lane, rank in zip(*np.unique(np.stack([lanes, self.ranks(lanes)]), axis=1)):
            known = hb.remote.get(int(lane), {})
            for r, epochs in self.adders.items():
                if r == rank or marked not in (MANY_CTAS, r):
                    continue
                row, added = known.get(r), epochs >= 0
                if row is None or any_set(row[:threads][added] < epochs[added]):
                    return False
        return True

    # endregion
    # region bulk groups
    def on_shared_write(self, inst, lanes: np.ndarray, index: np.ndarray) -> None:
        """Generic stores into the flat shared indices `index` ([n, nbytes], by `lanes`)."""
        for r in self.reading:
            hit = np.isin(index, r.index).any(axis=-1) if index.ndim > 1 else np.isin(index, r.index)
            if any_set(hit):
                i = int(np.argmax(hit))
                raise self._race(inst, f"overwrites shared memory that cp.reduce.async.bulk at line {r.inst.line} "
                                       f"({self.m.describe_lane(r.lane)}) may still be reading: no "
                                       "cp.async.bulk.wait_group.read of that thread covers it yet", int(lanes[i]))

    def commit(self, lanes: np.ndarray) -> None:
        for lane in lanes:
            lane = int(lane)
            group = self.committed.get(lane, 0)
            for r in self.reading:
                if r.lane == lane and r.group is None:
                    r.group = group
            self.committed[lane] = group + 1

    def wait(self, lanes: np.ndarray, allowed: int, inst) -> None:
        """`lanes` waited (`inst`) until at most `allowed` of their bulk groups are pending: the reductions of the
        others have read their source, as of this point of their thread (happens_before orders later writes)."""
        lanes = {int(lane) for lane in lanes}
        done = [r for r in self.reading
                if r.lane in lanes and r.group is not None and r.group < self.committed.get(r.lane, 0) - allowed]
        for r in done:
            self.m.tracker.bulk_read_completed(inst, r.lane, r.index, "the bulk reduction", r.inst.line)
        self.reading = [r for r in self.reading if not any(r is d for d in done)]

    def check_exit(self) -> None:
        """The batch ended: no bulk reduction may still be reading shared memory."""
        if self.reading:
            r = self.reading[0]
            raise self._race(r.inst, "the CTA exits while this bulk reduction may still read its shared source "
                                     "(no cp.async.bulk.commit_group and wait_group.read cover it)", r.lane)
        self.committed.clear()

    # endregion


def decode_cp_reduce(ops, inst, mods):
    """cp.reduce.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint}.add.f32 [dst], [src], size{, policy}
    (the cache policy is a hint: read and ignored)."""
    m = ops.m
    mods.take("reduce")
    mods.take("async")
    mods.take("bulk")
    form = [mods.take("global"), mods.take("shared::cta"), mods.take("bulk_group"), mods.take("add")]
    if not all(form) or inst.modifiers.index("global") > inst.modifiers.index("shared::cta"):
        raise ops.refuse(inst, "cp.reduce.async.bulk forms other than .global.shared::cta.bulk_group.add.f32")
    hinted = "L2::cache_hint" in inst.modifiers
    mods.drop_prefixed("L2::")
    t = mods.type()
    if t.name != "f32" or len(inst.operands) != 3 + hinted:
        raise ops.refuse(inst, "cp.reduce.async.bulk ... .add on types other than .f32")
    dst, src = ops.address(inst, inst.operands[0]), ops.address(inst, inst.operands[1])
    size = ops.read(inst, inst.operands[2], ptx_type("u32"))

    def run(sel):
        lanes = lanes_of(m, sel)
        dests = np.broadcast_to(np.asarray(dst(sel), np.int64), lanes.shape)
        sources = np.broadcast_to(np.asarray(src(sel), np.int64), lanes.shape)
        sizes = np.broadcast_to(np.asarray(size(sel), np.int64), lanes.shape)
        for i, lane in enumerate(lanes):
            one, n = lanes[i:i + 1], int(sizes[i])
            if n <= 0 or n % BULK_ALIGNMENT:
                raise m.error(inst, f"bulk reduction size {n} is not a positive multiple of {BULK_ALIGNMENT}", int(lane))
            data = access(m, inst, "shared", one, sources[i:i + 1], n, align=BULK_ALIGNMENT)
            # the async proxy reads the source: its generic stores need a fence.proxy.async on the way here
            m.tracker.async_read(inst, one, m.shared_flat(one, sources[i:i + 1])[0] + np.arange(n),
                                 "the bulk reduction")
            values = np.ascontiguousarray(data).view("<f4").reshape(-1)
            old = access(m, inst, "global", one, dests[i:i + 1], n, align=BULK_ALIGNMENT, watched=False,
                         how=ASYNC_REDUCE)
            watch = getattr(m, "watch", None)
            if watch is not None:
                watch.on_add(inst, one, dests[i:i + 1], n, reduction=True)
            with np.errstate(over="ignore", invalid="ignore"):
                new = flush_f32(flush_f32(np.ascontiguousarray(old).view("<f4").reshape(-1)) + flush_f32(values))
            access(m, inst, "global", one, dests[i:i + 1], n, new.astype("<f4").view(np.uint8).reshape(1, n),
                   align=BULK_ALIGNMENT, watched=False, how=ASYNC_REDUCE)
            if watch is not None:
                index = m.shared_flat(one, sources[i:i + 1])[0] + np.arange(n)
                watch.reading.append(BulkRead(inst, int(lane), index))

    return run


def decode_bulk_group(ops, inst, mods):
    """cp.async.bulk.commit_group and cp.async.bulk.wait_group{.read} N: the bulk reductions' groups."""
    m = ops.m
    if mods.take("commit_group"):
        if inst.operands:
            raise ops.refuse(inst, "cp.async.bulk.commit_group takes no operand")
        mods.left = []
        return lambda sel: m.watch.commit(lanes_of(m, sel)) if getattr(m, "watch", None) is not None else None
    mods.take("wait_group")
    mods.take("read")
    if len(inst.operands) != 1:
        raise ops.refuse(inst, "cp.async.bulk.wait_group needs one operand, the number of groups left pending")
    allowed = ops.static(inst, inst.operands[0])
    mods.left = []
    return lambda sel: m.watch.wait(lanes_of(m, sel), allowed, inst) if getattr(m, "watch", None) is not None \
        else None

