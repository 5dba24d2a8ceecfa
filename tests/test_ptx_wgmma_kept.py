"""What the wgmma checks keep to decide without a look, against the look, on the three-CTA grid of the
warp-specialized flash kernel: a wgmma's reads of landed bytes kept once they passed
(`WgmmaTracking.wgmma_reads_landed`, `landed_seen`: every call decides as judging each of its reads by `_landed_read`
does, most reads are decided by the kept ones, and the output bits are those of a launch that judges every read;
`ByteRanges.holding`, which names the ranges a read lies in, finds the ranges `covering` finds), and a chain's
lanes clean of touches since their wgmma.fence (`check_fenced_in_chain`: each wgmma it passes passes
`check_fenced`); and what a wgmma.wait_group does at once, against doing it piece by piece: its completions
recorded for all its warpgroups (`AsyncRecords.wgmma_wait_completed`) as one `wgmma_groups_completed` per
warpgroup records them, its pending registers pruned per groups array as a walk per register prunes them.
A chain opened on the entries `wgmma_issued` and `wgmma_shaped` made for its accumulators (`_sole_entry` not asked)
and a wgmma step's warpgroups kept for the last lanes object (`wgmma._warpgroups_kept`), against asking each time."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.byte_ranges import ByteRanges
from tessera.interpreters.ptx.tagged_accesses import TaggedAccesses
from tessera.interpreters.ptx.wgmma_tracking import WgmmaTracking

from test_ptx_ctas_together import _launch
from test_ptx_hazards import _attention


def test_holding_finds_the_ranges_covering_finds():
    """Ranges with gaps and adjacent ones, some dropped: for every [low, high) `holding` holds it exactly when
    `covering` does, with the same values in order."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        ranges, at = ByteRanges(), 0
        for _ in range(int(rng.integers(0, 8))):
            at += 8 * int(rng.integers(0, 3))  # a gap, or none (adjacent ranges)
            stop = at + 8 * int(rng.integers(1, 5))
            ranges.put(at, stop, (int(rng.integers(0, 3)), int(rng.integers(0, 3))))
            at = stop
        if ranges and rng.random() < 0.3:
            ranges.pop(int(rng.choice(ranges.starts)))
        for _ in range(30):
            low = int(rng.integers(0, at + 16))
            high = low + int(rng.integers(1, 40))
            held, cover = ranges.holding(low, high), ranges.covering(low, high)
            assert (held is None) == (cover is None), (ranges.ranges, low, high)
            if held is not None:
                assert [value for _, value in held] == cover


def test_kept_landed_reads_decide_as_each_read_judged(monkeypatch):
    decided, looked, checked = [], [], []
    landed, judge = WgmmaTracking.wgmma_reads_landed, TaggedAccesses._landed_read

    def judged(self, inst, checks, records):
        each = all(judge(self, lanes, where) for lanes, where, _ in checks)
        result = landed(self, inst, checks, records)
        decided.append((result, each))
        checked.append(len(checks))
        return result

    def counted(self, lanes, where):
        looked.append(1)
        return judge(self, lanes, where)
    monkeypatch.setattr(WgmmaTracking, "wgmma_reads_landed", judged)
    monkeypatch.setattr(TaggedAccesses, "_landed_read", counted)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray)
    assert decided and all(result == each for result, each in decided)
    assert sum(result for result, _ in decided) > len(decided) // 2
    assert len(looked) < sum(checked) // 2, (len(looked), sum(checked))  # most reads decided by kept ones
    monkeypatch.undo()
    monkeypatch.setattr(ByteRanges, "holding", lambda self, low, high: None)  # every read judged
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()


def test_a_clean_chain_passes_its_a_registers_as_check_fenced_does(monkeypatch):
    """The P.V chains (register A) of the grid open clean and their wgmmas pass `check_fenced_in_chain` without a
    look; each would pass `check_fenced`, and the bits are those of a launch that checks each one."""
    passed = []
    in_chain, check = WgmmaTracking.check_fenced_in_chain, WgmmaTracking.check_fenced

    def compared(self, inst, lanes, roles):
        in_chain(self, inst, lanes, roles)
        passed.append(self.chain[7])
        check(self, inst, lanes, roles)  # raises where the look would
    monkeypatch.setattr(WgmmaTracking, "check_fenced_in_chain", compared)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and passed and all(passed)
    monkeypatch.undo()
    monkeypatch.setattr(WgmmaTracking, "check_fenced_in_chain", check)
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()


def _sole_entry_walked(table: dict, names: tuple):
    """`wgmma_tracking._sole_entry` as a walk in Python, one register at a time."""
    first = table.get(names[0]) if names else None
    if type(first) is not list or any(table.get(name) is not first for name in names):
        return None
    return first if sum(entry is first for entry in table.values()) == len(names) else None


def test_a_chain_opens_on_the_entries_the_walk_finds(monkeypatch):
    """`chain_open` at each chain start of the grid: the entries `wgmma_issued` and `wgmma_shaped` hand it (made
    for the accumulators alone) are those `_sole_entry` finds, and `_sole_entry` (identity counted in C) finds
    what a walk in Python finds, on `pending` and on `shaped`; the bits are those of a launch that looks each
    entry up."""
    import tessera.interpreters.ptx.wgmma_tracking as tracking

    handed, opened = [], WgmmaTracking.chain_open

    def compared(self, lanes, roles, pending=None, shaped=None):
        for table, entry in ((self.pending, pending), (self.shaped, shaped)):
            found = tracking._sole_entry(table, roles.results)
            assert found is _sole_entry_walked(table, roles.results)
            assert entry is None or entry is found
            handed.append(entry is not None)
        opened(self, lanes, roles, pending, shaped)
    monkeypatch.setattr(WgmmaTracking, "chain_open", compared)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and any(handed)
    monkeypatch.undo()
    monkeypatch.setattr(WgmmaTracking, "chain_open", lambda self, lanes, roles, pending=None, shaped=None:
                        opened(self, lanes, roles))
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()


def test_sole_entry_counts_as_the_walk_does():
    """`_sole_entry` against the walk in Python on tables where the names share an entry, split it, share it with
    another register, or hold none."""
    from tessera.interpreters.ptx.wgmma_tracking import _sole_entry

    shared, other = [1], [2]
    names = ("a", "b", "c")
    tables = [{}, dict.fromkeys(names, shared), {**dict.fromkeys(names, shared), "d": shared},
              {**dict.fromkeys(names, shared), "d": other}, {"a": shared, "b": shared, "c": other},
              {"a": shared, "b": shared}, {"a": (1,), "b": (1,), "c": (1,)}]
    for table in tables:
        for wanted in (names, names[:1], ()):
            assert _sole_entry(table, wanted) is _sole_entry_walked(table, wanted), (table, wanted)


def _snapshot(hb) -> tuple:
    return ([(r.tolist(), e.tolist(), line, reader, by) for r, e, line, reader, by in hb.completions],
            list(hb.completed_groups), hb.wgmma_groups.tolist())


def test_a_wait_records_its_completions_as_one_call_per_warpgroup(monkeypatch):
    """`AsyncRecords.wgmma_wait_completed` (the lanes' points gathered once per wait) leaves after each
    wgmma.wait_group of the grid the records that a `wgmma_groups_completed` per warpgroup, each gathering its own,
    leaves; and `_completions` names its lanes where they lie in the wait's lanes (whole warpgroups, and threads of
    some warps)."""
    from tessera.interpreters.ptx.async_records import AsyncRecords
    from tessera.interpreters.ptx.wgmma_tracking import _completions

    batched = AsyncRecords.wgmma_wait_completed

    def each(self, found, lanes, inst):
        for w, first, last, members, _ in found:
            self.wgmma_groups_completed(w, first, last, members, inst)

    def run(how) -> list:
        seen = []

        def recorded(self, found, lanes, inst):
            for _, _, _, members, where in found:
                assert np.array_equal(lanes[where], members)
            how(self, found, lanes, inst)
            seen.append(_snapshot(self))
        monkeypatch.setattr(AsyncRecords, "wgmma_wait_completed", recorded)
        return seen
    fast = run(batched)
    kept = _launch(_attention(True)[2])
    slow = run(each)
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()
    assert fast and fast == slow
    unit = np.arange(512) // 128
    for lanes in (np.arange(128, 384), np.array([0, 5, 40, 200, 201, 330])):
        target = (lanes // 64) % 3
        for w, first, last, members, where in _completions(unit, lanes, np.unique(unit[lanes]), target,
                                                           np.full(len(lanes), -1)):
            assert np.array_equal(lanes[where], members) and (unit[members] == w).all()


def test_a_wgmma_step_given_its_last_lanes_again_runs_as_on_new_ones(monkeypatch):
    """The wgmma steps keep the last lanes object's warpgroups (`_warpgroups_kept`; and a static scale-d's
    per-warpgroup values): on the grid most runs find them kept, and the bits are those of a launch whose every
    run gets a new lanes object (`_warpgroups` called each time)."""
    from tessera.interpreters.ptx import wgmma

    calls, runs, found = [], [], wgmma._warpgroups
    monkeypatch.setattr(wgmma, "_warpgroups", lambda m, inst, lanes: calls.append(1) or found(m, inst, lanes))
    given = wgmma.lanes_of
    monkeypatch.setattr(wgmma, "lanes_of", lambda m, sel: runs.append(1) or given(m, sel))
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and len(calls) < len(runs) // 2, (len(calls), len(runs))
    calls.clear(), runs.clear()
    monkeypatch.setattr(wgmma, "lanes_of", lambda m, sel: runs.append(1) or given(m, sel).copy())
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()
    assert len(calls) == len(runs)


def test_a_wait_keeps_the_pending_registers_a_walk_keeps(monkeypatch):
    """After each wgmma.wait_group of the grid, `pending` holds, in order and as the same entries, the registers
    whose groups array some warpgroup has not waited for (walked register by register), whichever of them the
    wait dropped (all, some or none), and each of their entries is one of `pending_entries` (what the wait looks
    at instead of the registers)."""
    from tessera.interpreters.ptx.wgmma_tracking import _NO_GROUP

    waited, dropped = WgmmaTracking.wgmma_wait, []

    def compared(self, lanes, keep, inst=None):
        before = list(self.pending.items())
        waited(self, lanes, keep, inst)
        least = np.full(self.warpgroups, _NO_GROUP, np.int64)
        np.minimum.at(least, self.m.unit_of[128], self.lane_done)
        walked = [(name, e) for name, e in before if (e[0] > least).any()]
        assert [name for name, _ in walked] == list(self.pending)
        assert all(self.pending[name] is e for name, e in walked)
        assert all(id(e) in self.pending_entries for e in self.pending.values())  # what the next wait looks at
        dropped.append(len(before) - len(walked))
    monkeypatch.setattr(WgmmaTracking, "wgmma_wait", compared)
    assert isinstance(_launch(_attention(True)[2]), np.ndarray)
    assert dropped and max(dropped) > 0


def test_a_wait_records_as_one_call_per_warpgroup_when_groups_were_completed_before():
    """`wgmma_wait_completed` against a `wgmma_groups_completed` per entry on random waits of two CTAs of two
    warpgroups: single groups and ranges, warpgroups completing a group an earlier wait of other warps completed,
    the records' table grown; the same completions, their groups and records after each wait."""
    from tessera.interpreters.ptx.happens_before import HappensBefore

    class _Inst:
        line = 9

    rng = np.random.default_rng(5)
    for _ in range(40):
        fast, slow = (HappensBefore(512, 256, 64, None, str, str) for _ in range(2))
        done = np.full(4, -1)
        for _ in range(int(rng.integers(1, 8))):
            found, lanes = [], []
            for w in sorted(rng.choice(4, int(rng.integers(1, 5)), replace=False).tolist()):
                warp = int(rng.integers(0, 4))
                members = np.arange(w * 128 + warp * 32, w * 128 + warp * 32 + 32)
                first = int(rng.integers(0, done[w] + 2)) if rng.random() < 0.5 else int(done[w]) + 1
                last = first + int(rng.integers(0, 3)) * (rng.random() < 0.3) + int(rng.integers(0, 2)) * 9
                done[w] = max(done[w], last)
                found.append((w, first, last, members, slice(32 * len(lanes), 32 * len(lanes) + 32)))
                lanes.append(members)
            lanes = np.concatenate(lanes)
            for hb in (fast, slow):
                hb.clock[lanes, lanes % 256] += rng.integers(1, 3)
            slow.clock[:] = fast.clock
            fast.wgmma_wait_completed(found, lanes, _Inst())
            for w, first, last, members, _ in found:
                slow.wgmma_groups_completed(w, first, last, members, _Inst())
            assert _snapshot(fast) == _snapshot(slow)
