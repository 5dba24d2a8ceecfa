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
