"""The PTX executor's vector-clock joins skip the `fenced` rows of lanes that never fenced nor acquired a fence
(`HappensBefore.fenced_rows`): the clocks they publish are those of the full join."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.happens_before import HappensBefore


def _clocks(fence_lanes):
    hb = HappensBefore(8, 4, 64, None, None, None)
    for lanes in fence_lanes:
        hb.fence(np.array(lanes))
    first, second = np.arange(4), np.arange(4, 8)
    hb.barrier(first, first)
    hb.arrive(None, (0, 0), first)  # an mbarrier phase from the first CTA's lanes to the second's (one frame)
    hb.phase_completed((0, 0))
    hb.waited(None, (0, 0), second)
    return hb


def test_joins_without_fences_publish_zero_fenced_rows():
    hb = _clocks([])
    assert not hb.fenced.any() and not hb.fenced_rows.any()
    assert (hb.clock[4:, :4] >= 1).all()  # the waiters know the arrivals' epochs


def test_a_fence_travels_through_barrier_and_mbarrier_as_the_full_join():
    hb = _clocks([[1]])
    assert hb.fenced_rows.all()
    expected = np.zeros(8, np.int32)
    expected[[1, 5]] = 1  # thread 1's epoch 1 (its store before the fence), shared and global columns
    assert np.array_equal(hb.fenced[0], expected) and np.array_equal(hb.fenced[7], expected)
