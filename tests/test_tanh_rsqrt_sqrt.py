"""tanh.approx.f32, rsqrt.approx.ftz.f32 and sqrt.rn.f32 at every level below Tile IR: the documented error
bounds (`tessera.sm90.approx`, against the PTX ISA's text and special-value tables), the Target IR ops
`sm90.tanh_approx`, `sm90.rsqrt_approx` and upstream `math.sqrt` in the CTA simulator, their printed PTX in the
PTX executor (the same bits) and under ptxas."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import toolchain
from tessera.ptx import print_ptx
from tessera.sm90 import approx

from unary_kernel import SHAPE, execute_ptx, simulate, unary_module

# The PTX ISA's special-value tables (input -> result) [P#floating-point-instructions-tanh, -rsqrt, -sqrt];
# rsqrt.approx.ftz flushes a subnormal input to a zero of its sign first, tanh.approx.f32 keeps subnormals.
CASES = {
    "tanh": ("sm90.tanh_approx", "tanh.approx.f32", np.tanh,
             [(-np.inf, -1.0), (-0.0, -0.0), (0.0, 0.0), (np.inf, 1.0), (np.nan, np.nan), (1e-40, 1e-40)]),
    "rsqrt": ("sm90.rsqrt_approx", "rsqrt.approx.ftz.f32", lambda x: 1.0 / np.sqrt(x),
              [(-np.inf, np.nan), (-2.0, np.nan), (-0.0, -np.inf), (0.0, np.inf), (np.inf, 0.0), (np.nan, np.nan),
               (1e-40, np.inf)]),
    "sqrt": ("math.sqrt", "sqrt.rn.f32", np.sqrt,
             [(-np.inf, np.nan), (-2.0, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.inf), (np.nan, np.nan)]),
}
BOUND = {"tanh": approx.TANH_APPROX_RELATIVE_ERROR, "rsqrt": approx.RSQRT_APPROX_RELATIVE_ERROR, "sqrt": 2.0**-24}
"""Relative error allowed against the exact function: the documented bound; sqrt.rn is correctly rounded."""


def _inputs(name: str) -> np.ndarray:
    rng = np.random.default_rng(11)
    if name == "tanh":
        x = rng.uniform(-12, 12, 64).astype(np.float32)
    else:
        x = np.exp2(rng.uniform(-120, 120, 64)).astype(np.float32)
    special = CASES[name][3]
    x[: len(special)] = [s for s, _ in special]
    return x.reshape(SHAPE)


def _simulate(name: str) -> tuple[np.ndarray, np.ndarray]:
    x = _inputs(name)
    return x.reshape(-1), simulate(CASES[name][0], x).reshape(-1)


def test_documented_bounds():
    """[P#floating-point-instructions-tanh]: "The maximum relative error over the entire floating point range is
    2^-11."; [-rsqrt]: "The maximum relative error for rsqrt.f32 over the entire positive finite floating-point
    range is 2^-22.9."; [-rcp]: "The maximum ulp error is 1 across the full range of inputs." """
    assert approx.approx_relative_error("tanh") == 2.0**-11
    assert approx.approx_relative_error("rsqrt") == 2.0**-22.9
    assert approx.approx_relative_error("rcp") == 2.0**-23
    with pytest.raises(ValueError, match="no documented relative error bound for sin"):
        approx.approx_relative_error("sin")


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulator_is_within_the_documented_error_and_gives_the_special_values(name):
    x, got = _simulate(name)
    special = CASES[name][3]
    for i, (_, expected) in enumerate(special):
        np.testing.assert_equal(got[i], np.float32(expected), err_msg=f"{name}({x[i]})")
    rest = slice(len(special), None)
    exact = CASES[name][2](x[rest].astype(np.float64))
    assert (np.abs(got[rest] - exact) <= BOUND[name] * np.abs(exact)).all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_ptx_runs_to_the_same_bits_in_the_executor(name):
    x, target = _simulate(name)
    ptx, out = execute_ptx(CASES[name][0], x)
    assert f"{CASES[name][1]} " in ptx
    np.testing.assert_array_equal(out.reshape(-1).view(np.uint32), target.view(np.uint32))


@pytest.mark.parametrize("name", sorted(CASES))
def test_ptxas_accepts(name, ptxas):
    result = toolchain.compile_ptx(print_ptx(unary_module(CASES[name][0])), ptxas=ptxas)
    assert not result.log.diagnostics, result.text
