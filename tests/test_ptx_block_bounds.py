"""Bounds of a block's vector-clock rows (`sync_edges`: `SyncEdges.block_bounds`), kept by the arrives and waits of
a batch's CTAs as one unit: the release publishes the kept join of the rows and the acquire writes only the
columns a row may lack. On a grid of three CTAs of the warp-specialized flash kernel every release published, and
every clock row at that point, are the same as with the join and the acquire taken over every row, and the kept
bounds are used (most arrives and waits of the consumers find them kept). The kernel's consumers fence once before
their main loop (mask-by-mma's key-bias table), so their fenced rows take the same paths (`SyncEdges._fenced_join`)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError
from tessera.interpreters.ptx.sync_edges import SyncEdges
from tessera.interpreters.ranges import consecutive

from test_ptx_ctas_together import _launch
from test_ptx_hazards import _attention


def _recorded(monkeypatch) -> list:
    """Each phase's published release (its clock and fenced clock) and a digest of every clock and fenced row then, as
    a list filled by the launch."""
    seen = []
    completed = SyncEdges.phase_completed

    def recording_completed(self, key):
        completed(self, key)
        if key in self.published:
            clock, fenced = self.published[key][:2]
            seen.append((key, clock.tobytes(), fenced.tobytes(), hashlib.sha1(self.clock.tobytes()).hexdigest(),
                         hashlib.sha1(self.fenced.tobytes()).hexdigest()))
    monkeypatch.setattr(SyncEdges, "phase_completed", recording_completed)
    return seen


def _same_as_one_by_one(monkeypatch, fast_path: str) -> list:
    """The launch's outputs and its records (`_recorded`) with the block path `fast_path` of `SyncEdges` and with it
    declining (the CTAs then taken one by one), asserted equal; the records."""
    seen = _recorded(monkeypatch)
    together = _launch(_attention(True)[2])
    monkeypatch.undo()
    monkeypatch.setattr(SyncEdges, fast_path, lambda *args: False)
    alone = _recorded(monkeypatch)
    one_by_one = _launch(_attention(True)[2])
    assert isinstance(together, np.ndarray) and together.tobytes() == one_by_one.tobytes()
    assert seen and seen == alone
    return seen


def test_kept_bounds_give_the_clocks_of_a_pass_over_every_row(monkeypatch):
    used = []
    bounds_of = SyncEdges._bounds_of

    def counted(self, block):
        bounds = bounds_of(self, block)
        used.append(bounds[1] is not None)
        return bounds
    monkeypatch.setattr(SyncEdges, "_bounds_of", counted)
    seen = _recorded(monkeypatch)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and seen and sum(used) > len(used) // 2, used
    monkeypatch.undo()
    monkeypatch.setattr(SyncEdges, "_bounds_of", lambda self, block: [None] * 4)  # nothing kept
    fresh = _recorded(monkeypatch)
    every_row = _launch(_attention(True)[2])
    assert kept.tobytes() == every_row.tobytes()
    assert seen == fresh


def test_a_block_arrive_gives_the_clocks_and_releases_of_arrives_one_by_one(monkeypatch):
    """`SyncEdges.arrive_ctas` (each lane's own epoch advanced through a strided view of the block's rows, the
    CTAs' releases from the kept join) against `arrive` CTA by CTA: every release published and every clock row
    at that point the same."""
    _same_as_one_by_one(monkeypatch, "arrive_ctas")


def test_block_waits_give_the_clocks_of_waits_one_by_one(monkeypatch):
    """`SyncEdges.waited_ctas` (the published clock and fenced clock taken into the block's rows through their low
    bounds) against the acquire CTA by CTA: every release published and every clock and fenced row the same."""
    seen = _same_as_one_by_one(monkeypatch, "waited_ctas")
    assert any(fenced.strip(b"\0") for _, _, fenced, _, _ in seen)  # fenced clocks were published and taken in


def _barrier_acquires_checked(monkeypatch) -> list:
    """Each named barrier's completion (`SyncEdges.bar_completed`) run as it is, then again on the state before it
    through the acquire that reads every waiter's row (`_acquire`), its clocks, fenced clocks and fenced rows asserted
    equal; a list of whether each completion's waiters were all its arrivals (those taking the shortcut)."""
    taken = []
    completed = SyncEdges.bar_completed

    def checked(self, key, waiters):
        state = [array.copy() for array in (self.clock, self.fenced, self.fenced_rows)]
        released, arrivals = self.bar_released.get(key), self.bar_arrivals.get(key, 0)
        completed(self, key, waiters)
        after = [array.copy() for array in (self.clock, self.fenced, self.fenced_rows)]
        self.clock[...], self.fenced[...], self.fenced_rows[...] = state
        if released is not None and len(waiters):
            self._acquire(waiters, *released)
        assert all(np.array_equal(a, b) for a, b in zip(after, (self.clock, self.fenced, self.fenced_rows)))
        taken.append(arrivals == len(waiters))
    monkeypatch.setattr(SyncEdges, "bar_completed", checked)
    return taken


def test_a_barrier_whose_waiters_all_arrived_writes_the_rows_an_acquire_of_each_would(monkeypatch):
    """`bar_completed`'s shortcut (the waiters' rows written as the release with each one's own epoch one more,
    without reading them) against the acquire over every row: the warp-specialized flash grid (its CTA barriers,
    the consumers' bias-table barrier after their fence), the ping-pong kernel (named barriers of 256 consumer
    threads, one warpgroup's `bar.arrive` and the other's `bar.sync`), a producer warp's `bar.arrive` to a consumer
    warp, on min-pc and with a warp delayed."""
    from test_ptx_delayed_warp import _run_pingpong
    from test_ptx_exec import test_named_barriers_order_shared_memory_between_warps

    taken = _barrier_acquires_checked(monkeypatch)
    assert isinstance(_launch(_attention(True)[2]), np.ndarray)
    assert _run_pingpong(256).ok
    with pytest.raises(PtxExecutionError, match="barrier 1 used with thread counts"):  # (the seeded miscount)
        _run_pingpong(256, schedule="delayed-warpgroup", seed=0)
    test_named_barriers_order_shared_memory_between_warps()
    assert any(taken) and not all(taken), taken


def _bounds_hold(edges: SyncEdges) -> None:
    """Every kept block's bounds (`block_bounds`) against its rows: `high` and `fenced high` their joins exactly,
    `low` and `fenced low` below every row."""
    t = edges.threads
    for (c0, c1, w0, w1), (low, high, fenced_low, fenced_high) in edges.block_bounds.items():
        clocks = edges.clock.reshape(-1, t, t)[c0:c1, w0:w1]
        fenced = edges.fenced.reshape(-1, t, 2 * t)[c0:c1, w0:w1]
        assert high is None or np.array_equal(high, clocks.max(axis=1))
        assert fenced_high is None or np.array_equal(fenced_high, fenced.max(axis=1))
        assert low is None or (clocks >= low[:, None, :]).all()
        assert fenced_low is None or (fenced >= fenced_low[:, None, :]).all()


def test_barriers_and_fences_of_a_kept_block_keep_its_bounds_exact(monkeypatch):
    """A `bar.sync` of one CTA's row of a kept block (the consumers of each CTA of the flash grid) releases the kept
    joins without reading a row and keeps the block's bounds (`SyncEdges._kept_row`), and so does a
    fence.proxy.async of the whole block: after each release, completion and fence every kept bound holds against
    the rows, the shortcut is taken, and the releases published and the clock rows are those of the launch that
    keeps no bounds (`_bounds_of`: nothing kept)."""
    kept_rows, release, completed, fence = [], SyncEdges._release, SyncEdges.bar_completed, SyncEdges.fence

    def checked_fence(self, lanes, *args):
        fence(self, lanes, *args)
        _bounds_hold(self)

    def checked_release(self, lanes):
        kept_rows.append(self._kept_row(consecutive(lanes)) is not None)
        released = release(self, lanes)
        _bounds_hold(self)
        return released

    def checked_completed(self, key, waiters):
        completed(self, key, waiters)
        _bounds_hold(self)
    monkeypatch.setattr(SyncEdges, "_release", checked_release)
    monkeypatch.setattr(SyncEdges, "bar_completed", checked_completed)
    monkeypatch.setattr(SyncEdges, "fence", checked_fence)
    seen = _recorded(monkeypatch)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and seen and sum(kept_rows) > len(kept_rows) // 4, kept_rows
    monkeypatch.undo()
    monkeypatch.setattr(SyncEdges, "_bounds_of", lambda self, block: [None] * 4)  # nothing kept
    fresh = _recorded(monkeypatch)
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()
    assert seen == fresh
