"""`tessera.interpreters.ranges`: lanes as slices and blocks, distinct values of ascending lanes, marked positions
(the simulators' index helpers), each against the plain NumPy it replaces."""

import numpy as np
import pytest

from tessera.interpreters.ranges import as_slice, consecutive, distinct_ascending, lane_block, marked

T = 384  # threads of a CTA of the warp-specialized flash kernel


def _lanes(ctas, threads):
    return np.concatenate([c * T + np.asarray(threads) for c in ctas]).astype(np.int64)


@pytest.mark.parametrize("ctas, threads", [
    ([0], range(128, 384)), ([2], range(0, 384)), ([0, 1, 2, 3], range(128, 384)), ([1, 2], range(0, 128)),
    ([0, 1], range(0, 384)), ([3], [5]), ([0, 1, 2], range(100, 101)),
])
def test_lane_block_views_the_same_lanes(ctas, threads):
    lanes = _lanes(ctas, threads)
    block = lane_block(lanes, T)
    assert block is not None
    grid = np.arange(8 * T).reshape(-1, T)
    assert np.array_equal(grid[block].reshape(-1), lanes)


@pytest.mark.parametrize("lanes", [
    _lanes([0, 2], range(128, 384)),  # CTAs not consecutive
    np.concatenate([_lanes([0], range(128, 384)), _lanes([1], range(128, 256))]),  # runs of unequal length
    np.concatenate([_lanes([0], range(128, 256)), _lanes([1], range(256, 384))]),  # not the same threads
    np.arange(100, 500),  # consecutive, across a CTA boundary, not whole CTAs
    _lanes([0, 1], [0, 1, 2, 4]),  # holes in a run
])
def test_lane_block_refuses_what_no_block_holds(lanes):
    assert lane_block(lanes, T) is None


def test_distinct_ascending_is_unique_of_sorted_values():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 1024):
        values = np.sort(rng.integers(0, 9, n))
        assert np.array_equal(distinct_ascending(values), np.unique(values))


def test_consecutive_and_as_slice():
    assert consecutive(np.arange(5, 9)) == slice(5, 9)
    assert isinstance(consecutive(np.array([1, 3])), np.ndarray)
    assert as_slice([4, 5, 6]) == slice(4, 7)
    assert np.array_equal(as_slice([6, 5]), [6, 5])
    assert np.count_nonzero(marked(np.array([3, 5, 5]), 0, 8)) == 2


def test_lane_runs_kept_by_content_are_the_runs_of_those_lanes():
    """`LaneRuns.of` finds the runs of a lanes array it saw before by content: a new array of the same lanes gets
    them, one with the same count, first and last lane but other lanes gets its own."""
    from tessera.interpreters.ptx.fuse_transfers import LaneRuns, _runs

    t = 384
    consumers = np.concatenate([np.arange(c * t + 128, c * t + 384) for c in range(4)])
    other = consumers.copy()
    other[256:512] -= 1  # CTA 1's consumers one lane lower: the same count, first and last lane, other runs
    assert (len(other), other[0], other[-1]) == (len(consumers), consumers[0], consumers[-1])
    lanes = LaneRuns(t)
    for array in (consumers, consumers.copy(), other, consumers.copy(), other.copy()):
        found = lanes.of(array)
        assert found.lanes is array
        assert found.runs == _runs(array)
        expected = lane_block(array, t) if found.runs is not None and len(found.runs) > 1 else None
        assert found.block == expected
