"""Bounds of a block's vector-clock rows (`sync_edges`: `SyncEdges.block_bounds`), kept by the arrives and waits of
a batch's CTAs as one unit: the release publishes the kept join of the rows and the acquire writes only the
columns a row may lack. On a grid of three CTAs of the warp-specialized flash kernel every release published, and
every clock row at that point, are the same as with the join and the acquire taken over every row, and the kept
bounds are used (most arrives and waits of the consumers find them kept). The kernel's consumers fence once before
their main loop (mask-by-mma's key-bias table), so their fenced rows take the same paths (`SyncEdges._fenced_join`)."""

from __future__ import annotations

import hashlib

import numpy as np

from tessera.interpreters.ptx.sync_edges import SyncEdges

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
