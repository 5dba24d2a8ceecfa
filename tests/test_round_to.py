"""`tessera.numerics.round_to`: float64 to bf16 is rounded once, to nearest even, whichever ml_dtypes is
installed (0.6 casts through float32 and rounds twice, 0.7 casts directly), checked against an integer
rounding of each float64 that uses no float conversion at all."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tessera.numerics import BF16, F16, f32_round_to_odd, round_to

BF16_SIGNIFICAND, BF16_MIN_EXPONENT, BF16_MAX = 8, -126, (2 - 2 ** -7) * 2.0 ** 127


def bf16_nearest_even(x: float) -> float:
    """x rounded to bf16 by hand: 8 significand bits (fewer below 2^-126), ties to even, inf past the
    largest finite value plus half its ulp."""
    if x == 0 or math.isinf(x) or math.isnan(x):
        return x
    exponent = max(math.frexp(abs(x))[1] - 1, BF16_MIN_EXPONENT)
    ulp = Fraction(2) ** (exponent - (BF16_SIGNIFICAND - 1))
    units = Fraction(abs(x)) / ulp
    whole = math.floor(units)
    rest = units - whole
    whole += 1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2) else 0
    value = float(whole * ulp)
    if value > BF16_MAX:
        value = math.inf
    return math.copysign(value, x)


# float64 values whose float32 rounding lands on a bf16 tie (rounded twice they go the wrong way)
DOUBLE_ROUNDING_CASES = [0.7480468529370716, 0.07495116866846924, -0.19873046528625654, -0.48535157001933055]


def test_the_cases_that_rounding_through_float32_gets_wrong():
    x = np.array(DOUBLE_ROUNDING_CASES)
    expected = [bf16_nearest_even(v) for v in DOUBLE_ROUNDING_CASES]
    assert round_to(x, BF16).astype(np.float64).tolist() == expected
    through_f32 = x.astype(np.float32).astype(BF16).astype(np.float64).tolist()
    assert all(a != b for a, b in zip(through_f32, expected))


@pytest.mark.parametrize("scale", [1.0, 2.0 ** -130, 2.0 ** 120, 2.0 ** 127])
def test_random_float64_round_once(scale):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(20_000) * scale
    # values just beside bf16 ties, and the ties themselves
    ties = (np.arange(-500, 500) * 2 + 1) * 2.0 ** -9 * scale
    x = np.concatenate([x, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf), [0.0, -0.0, 3.4e38, -3.5e38]])
    got = round_to(x, BF16).astype(np.float64)
    expected = np.array([bf16_nearest_even(float(v)) for v in x])
    np.testing.assert_array_equal(got, expected)


def test_special_values_and_other_types():
    x = np.array([np.nan, np.inf, -np.inf, 1e300, -1e300, 5e-324])
    got = round_to(x, BF16).astype(np.float64)
    assert np.isnan(got[0]) and got[1:5].tolist() == [np.inf, -np.inf, np.inf, -np.inf] and got[5] == 0
    # f16 and float32 inputs round as NumPy / ml_dtypes do (one rounding each)
    y = np.array(DOUBLE_ROUNDING_CASES)
    np.testing.assert_array_equal(round_to(y, F16), y.astype(F16))
    np.testing.assert_array_equal(round_to(y.astype(np.float32), BF16), y.astype(np.float32).astype(BF16))


def test_round_to_odd_keeps_exact_values_and_marks_inexact_ones():
    exact = np.array([1.0, -2.5, 2.0 ** -140, 3.0e38], np.float64).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(f32_round_to_odd(exact), exact.astype(np.float32))
    inexact = f32_round_to_odd(np.array([1.0 + 2.0 ** -40, -(1.0 + 2.0 ** -40)]))
    assert inexact.view(np.uint32).tolist() == [0x3F800001, 0xBF800001]


def test_launch_inputs_are_rounded_once(tmp_path):
    """float64 inputs of an interpreter launch (Tile, target and PTX levels share `prepare_arguments`) and of
    the PTX executor's command line (a .npy file) become bf16 through `round_to`."""
    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx import cli
    from tessera.kernel_abi import kernels, signature

    sig = signature(kernels(tessera.kernels.gemm())[0])
    a = np.resize(np.array(DOUBLE_ROUNDING_CASES), (128, 64))
    arguments, _ = prepare_arguments(sig, [a, np.ones((64, 128))])
    assert arguments[0].dtype == BF16
    expected = [bf16_nearest_even(v) for v in DOUBLE_ROUNDING_CASES]
    assert arguments[0].astype(np.float64).reshape(-1)[:4].tolist() == expected
    np.save(tmp_path / "x.npy", np.array(DOUBLE_ROUNDING_CASES))
    loaded = cli._array(f"bf16[4]={tmp_path / 'x.npy'}", np.random.default_rng(0))
    assert loaded.dtype == BF16 and loaded.astype(np.float64).tolist() == expected
