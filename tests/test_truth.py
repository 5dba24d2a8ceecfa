"""`tessera.interpreters.truth` answers as NumPy's `any()`, `all()` and `array_equal` do, on the arrays the simulators
ask about (bools, ints, floats with NaN and -0.0, empty, 0-d, NumPy scalars, shapes that differ)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.truth import all_set, any_set, equal_arrays

CASES = [np.zeros(0, bool), np.zeros(5, bool), np.ones(5, bool), np.array([0, 0, 3]), np.array([-0.0, 0.0]),
         np.array([0.0, np.nan]), np.array([np.nan]), np.zeros((3, 4), np.int32), np.eye(3, dtype=np.uint8),
         np.array(True), np.array(0.0), np.bool_(False), np.int64(7), np.float32(np.nan), np.full((2, 0, 3), 1)]


@pytest.mark.parametrize("x", CASES, ids=range(len(CASES)))
def test_any_and_all_as_numpy(x):
    assert any_set(x) is bool(np.asarray(x).any())
    assert all_set(x) is bool(np.asarray(x).all())


def test_equal_arrays_as_array_equal():
    pairs = [(np.arange(4), np.arange(4)), (np.arange(4), np.arange(5)), (np.arange(4), np.arange(4).reshape(2, 2)),
             (np.array([1.0, np.nan]), np.array([1.0, np.nan])), (np.array([0.0]), np.array([-0.0])),
             (np.zeros(0), np.zeros(0)), (np.zeros(0), np.zeros((0, 1))), ([1, 2], np.array([1, 2])), (3, np.int64(3))]
    for a, b in pairs:
        assert equal_arrays(a, b) is np.array_equal(a, b), (a, b)
