"""The CTA simulator's `maximumf`/`minimumf` (NaN propagates, -0 < +0: MLIR semantics, PTX `max.NaN.f32`) and
`maxnumf`/`minnumf` (the non-NaN operand, -0 < +0), bit for bit over every ordered pair of special values in
either operand order: the implementations take NumPy's result and fix only its zeros of the wrong sign."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import arith

from tessera.interpreters.sm90.arith import _FLOAT

VALUES = [0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e-40, -1e-40]


def _expected(x: float, y: float, larger: bool, propagate_nan: bool) -> float:
    if math.isnan(x) or math.isnan(y):
        if propagate_nan or (math.isnan(x) and math.isnan(y)):
            return math.nan
        return y if math.isnan(x) else x
    if x == y == 0.0:  # +0 is the larger zero
        negative = (math.copysign(1, x) < 0, math.copysign(1, y) < 0)
        return -0.0 if (all(negative) if larger else any(negative)) else 0.0
    return max(x, y) if larger else min(x, y)


@pytest.mark.parametrize("kind, larger, propagate_nan", [
    (arith.MaximumfOp, True, True), (arith.MinimumfOp, False, True),
    (arith.MaxnumfOp, True, False), (arith.MinnumfOp, False, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
@pytest.mark.parametrize("lane_major", [False, True])
def test_max_min_signed_zeros_and_nan(kind, larger, propagate_nan, dtype, lane_major):
    """Every dtype the zeros are told by the bits of, in registers laid out thread-major or lane-major (a gather's
    result)."""
    a = np.repeat(np.asarray(VALUES, dtype), len(VALUES)).reshape(-1, 3)  # [T, N] registers
    b = np.tile(np.asarray(VALUES, dtype), len(VALUES)).reshape(-1, 3)
    if lane_major:
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    got = _FLOAT[kind](a, b)
    want = np.asarray([_expected(float(x), float(y), larger, propagate_nan) for x, y in zip(a.flat, b.flat)], dtype)
    assert got.dtype == dtype
    nan = np.isnan(want.astype(np.float64))
    assert (np.isnan(got.reshape(-1).astype(np.float64)) == nan).all()
    assert got.reshape(-1)[~nan].tobytes() == want[~nan].tobytes()
