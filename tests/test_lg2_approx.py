"""lg2.approx.f32 at every level: the documented error and special values (`tessera.sm90.approx`, against the
PTX ISA's table for lg2), the Target IR op `sm90.lg2_approx` in the CTA simulator, its printed PTX in the
PTX executor (the same bits) and under ptxas."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import toolchain
from tessera.ptx import print_ptx
from tessera.sm90 import facts

from unary_kernel import SHAPE, execute_ptx, simulate, unary_module

LG2 = "sm90.lg2_approx"

# The PTX ISA's table for lg2.approx.f32 [P#floating-point-instructions-lg2] (input -> result), with .ftz's
# flush of subnormal inputs to sign-preserving zero.
SPECIAL = [(-np.inf, np.nan), (-1.5, np.nan), (-0.0, -np.inf), (0.0, -np.inf), (np.inf, np.inf),
           (np.nan, np.nan), (1e-40, -np.inf), (-1e-40, -np.inf)]


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = np.exp2(rng.uniform(-126, 127, 64)).astype(np.float32)
    x[: len(SPECIAL)] = [s for s, _ in SPECIAL]
    x[len(SPECIAL):len(SPECIAL) + 8] = np.float32([0.5, 0.75, 1.0, 1.0 + 2**-23, 1.5, 1.999, 2.0, 3.0])
    return x.reshape(SHAPE)


def test_error_bound_is_absolute_on_half_to_two_and_relative_elsewhere():
    """[P#floating-point-instructions-lg2]: 'The maximum absolute error is 2^-22 when the input operand is in
    the range (0.5, 2). For positive finite inputs outside of this interval, maximum relative error is 2^-22.'"""
    assert facts.LG2_APPROX_ERROR == 2.0**-22 and facts.LG2_APPROX_ABSOLUTE_RANGE == (0.5, 2.0)
    bound = facts.lg2_approx_error_bound([1.0, 1.9, 0.25, 1024.0])
    np.testing.assert_array_equal(bound, [2.0**-22, 2.0**-22, 2 * 2.0**-22, 10 * 2.0**-22])


def test_simulator_gives_log2_within_the_documented_error_and_the_special_values():
    x = _inputs()
    flat, got = x.reshape(-1), simulate(LG2, x).reshape(-1)
    for i, (_, expected) in enumerate(SPECIAL):
        np.testing.assert_equal(got[i], np.float32(expected), err_msg=f"lg2({flat[i]})")
    finite = slice(len(SPECIAL), None)
    exact = np.log2(flat[finite].astype(np.float64))
    assert (np.abs(got[finite] - exact) <= facts.lg2_approx_error_bound(flat[finite])).all()


def test_printed_ptx_runs_to_the_same_bits_in_the_executor():
    x = _inputs()
    target = simulate(LG2, x)
    ptx, out = execute_ptx(LG2, x)
    assert "lg2.approx.ftz.f32" in ptx
    np.testing.assert_array_equal(out.view(np.uint32), target.view(np.uint32))


def test_ptxas_accepts_lg2(ptxas):
    result = toolchain.compile_ptx(print_ptx(unary_module(LG2)), ptxas=ptxas)
    assert not result.log.diagnostics, result.text
