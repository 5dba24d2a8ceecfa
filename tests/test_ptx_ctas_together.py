"""The CTAs of a batch as one unit in the PTX executor's TMA and mbarrier paths: a step's TMA loads of one box into
the same offset of each CTA (`bulk_copy._tma_loads_together`), a wait step's landings (`mbarrier._wait_landing_
together`), the arrives and successful waits of the same lanes of consecutive CTAs (`HappensBefore.arrive_ctas`,
`mbarrier._observe_together`) and the loads' global read records (`TmaReadRecords.read_box_ctas`). On a grid of three
CTAs of the warp-specialized flash kernel they give the same bits as the one-CTA-at-a-time paths, and every seeded
bug of tests/race_seeds.py that reaches them is reported with the same text, or deadlocks the same way."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tessera.interpreters.ptx import bulk_copy, mbarrier
from tessera.interpreters.ptx.global_order import GlobalOrder
from tessera.interpreters.ptx.happens_before import HappensBefore
from tessera.interpreters.ptx.state import PtxExecutionError
from tessera.reference_attention import attention_operands

from race_seeds import FLASH_BUGS, seed
from test_ptx_hazards import _attention, _run

SEQ_Q, SEQ_K = 384, 300  # three CTAs of 128 queries, three key blocks (the last one clipped)

TOGETHER = {bulk_copy: ("_tma_loads_together", False), mbarrier: ("_wait_landing_together", None),
            HappensBefore: ("arrive_ctas", False), GlobalOrder: ("read_box_ctas", False)}
"""The entry points of the CTAs-as-one paths, and what each returns when it declines (nothing done)."""

BUGS = ["wait deleted: the K empty wait in the producer loop", "expect_tx too small: the producer's first K",
        "expect_tx too large: the producer's first V", "slot released before the read: V, right after its full wait",
        "bar.sync deleted: after mbarrier.init", "mbarrier count wrong: empty barrier counts half the consumers"]


def _launch(text: str):
    """The output of the kernel `text` on the three-CTA grid, or the text of the error it stops with."""
    try:
        return _run(_attention(True), text, attention_operands(np.random.default_rng(7), SEQ_Q, SEQ_K, 64))[3]
    except PtxExecutionError as error:
        return f"{type(error).__name__}: {error}"


def _one_by_one(monkeypatch) -> None:
    for owner, (name, declined) in TOGETHER.items():
        monkeypatch.setattr(owner, name, lambda *args, declined=declined: declined)
    monkeypatch.setattr(mbarrier, "_observe_together", lambda *args: False)


def test_the_grid_takes_the_paths_and_gives_the_same_bits(monkeypatch):
    taken: Counter = Counter()
    for owner, (name, _) in TOGETHER.items():
        original = getattr(owner, name)

        def counted(*args, original=original, name=name):
            result = original(*args)
            taken[name] += result not in (False, None)
            return result
        monkeypatch.setattr(owner, name, counted)
    together = _launch(_attention(True)[2])
    assert isinstance(together, np.ndarray)
    assert all(taken[name] for name, _ in TOGETHER.values()), taken
    monkeypatch.undo()
    _one_by_one(monkeypatch)
    alone = _launch(_attention(True)[2])
    assert together.dtype == alone.dtype and together.tobytes() == alone.tobytes()


@pytest.mark.parametrize("bug", BUGS)
def test_a_seeded_bug_reports_the_same(bug, monkeypatch):
    kind, name, edit = next(b for b in FLASH_BUGS if f"{b[0]}: {b[1]}" == bug)
    text = seed(_attention(True)[2], edit)
    together = _launch(text)
    _one_by_one(monkeypatch)
    alone = _launch(text)
    assert isinstance(together, str) and "error" in together, together  # each of these is reported on this grid
    assert together == alone


def test_the_block_told_from_the_runs_is_the_lanes_block():
    """`mbarrier._runs_block`: the block an arrive's or wait's lanes form, told from their runs (`_own_barriers`: one a
    CTA), is `ranges.lane_block`'s, on lanes that are one (the same threads of consecutive CTAs, whole CTAs, one CTA)
    and lanes that are not (a lane dropped or added, a run shifted, a CTA skipped)."""
    from types import SimpleNamespace

    from tessera.interpreters.ranges import lane_block

    rng = np.random.default_rng(3)
    t, blocks = 16, 0
    m = SimpleNamespace(threads=t)
    for _ in range(3000):
        first, ctas = int(rng.integers(0, 3)), int(rng.integers(1, 5))
        offset = int(rng.integers(0, t))
        n = t - offset if rng.random() < .2 else int(rng.integers(1, t - offset + 1))
        lanes = {(first + k) * t + offset + j for k in range(ctas) for j in range(n)}
        change = rng.integers(5)
        if change == 1:  # a lane dropped
            lanes.discard(int(rng.choice(sorted(lanes))))
        elif change == 2:  # a lane added
            lanes.add(int(rng.integers(0, (first + ctas + 1) * t)))
        elif change == 3 and ctas > 1:  # a CTA skipped
            lanes -= {(first + 1) * t + offset + j for j in range(n)}
        elif change == 4:  # one CTA's run shifted by a thread
            k = int(rng.integers(ctas))
            moved = {(first + k) * t + offset + j for j in range(n)}
            lanes = (lanes - moved) | {lane + 1 for lane in moved if (lane + 1) % t}
        if not lanes:
            continue
        lanes = np.array(sorted(lanes), np.int64)
        runs = mbarrier._own_barriers(m, lanes, np.zeros(len(lanes), np.int64))
        expected = lane_block(lanes, t)
        assert mbarrier._runs_block(m, lanes, runs) == expected, lanes
        blocks += expected is not None
    assert 1000 < blocks < 2900


def test_an_mbarrier_operands_bounds_and_uniformity_are_its_min_and_max():
    """`mbarrier_state._bounds` and `_uniform` (one comparison where every lane holds the first value) decide what min()
    and max() decide, for operands of one value, of several, of one lane, and negative ones."""
    from tessera.interpreters.ptx.mbarrier_state import _bounds, _uniform

    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        values = np.full(n, int(rng.integers(-5, 1 << 20))) if trial % 2 else rng.integers(-8, 9, n) * 8
        assert _bounds(values) == (int(values.min()), int(values.max()))
        assert _uniform(values) == (values.min() == values.max())
