"""Kernels a user writes next, round 5 (`tests/user_kernels/*.mlir`, not rounds 1 to 4's): softmax cross-entropy
backward with PyTorch's ignore_index, a GEMM with a SwiGLU-and-residual epilogue (two accumulators, silu, the
residual read in the epilogue), row statistics over K chunks carried by the user's own `scf.for` (a running sum
of squares and a running maximum whose tail chunk is masked), one tensor read through three views (finite
differences along rows and columns, 0 past the edges), a 1 x 1 grid whose one block folds every row chunk, and
grids of 65535 x 2 and 1 x 65535 blocks (the launch limit in y; 65536 is refused by name). Each runs through
`tessera.launch` at the Tile, target and PTX levels on odd shapes (1, 17, 70, 129, 1000) against a float64
NumPy reference.

The default run takes each kernel at one level and the 65535 x 2 grid at Tile level (about 4 s of CPU); `-m
slow` runs every kernel at every level on every shape, the 1 x 65535 grid in the CTA simulator (about 140 s;
65535 x 2 blocks take it about 7 minutes, the PTX executor hours), and checks each kernel with every ptxas
found (no warning, no spill: the SwiGLU kernel spills 4 bytes, an expected failure) and with `tessera-run
--level ptx --check`.
"""

from __future__ import annotations

import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.sm90 import approx
from unseen_rounds import KERNELS, LEVELS, Case, check_tools, f64, round_tests

BF16 = ml_dtypes.bfloat16
F32_ULP = 2.0**-23
EX2 = approx.approx_relative_error("ex2")
RCP = approx.approx_relative_error("rcp")


# region inputs and references

def _xent_inputs(shape, rng):
    m, n = shape
    labels = rng.integers(0, n, m).astype(np.int32)
    labels[::3] = -100  # ignored rows: a zero gradient
    return [(rng.standard_normal((m, n)) * 3).astype(np.float32), labels,
            rng.uniform(-2, 2, m).astype(np.float32)], {}


def _xent_ref(x, labels, dloss):
    x, g = f64(x, dloss)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.zeros_like(p)
    kept = np.nonzero(labels != -100)[0]
    onehot[kept, labels[kept]] = 1.0
    return (np.where(labels == -100, 0.0, g)[:, None] * (p - onehot),)


def _chunks_inputs(shape, rng):
    return [(rng.standard_normal(shape) - 3).astype(np.float32)], {}  # mostly negative: a 0 would win the max


def _chunks_ref(x):
    x, = f64(x)
    return (x**2).sum(1), x.max(1)


def _views_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(np.float32)], {}


def _views_ref(x):
    m, n = x.shape
    padded = np.pad(f64(x)[0], ((0, 1), (0, 1)))
    return padded[:m, 1:] - padded[:m, :n], padded[1:, :n] - padded[:m, :n]


def _fold_ref(x):
    m, n = x.shape
    rows = -(-m // 64) * 64
    zeros, lows = np.zeros((rows, n)), np.full((rows, n), -np.inf)
    zeros[:m] = lows[:m] = x
    return zeros.reshape(-1, 64, n).sum(0), lows.reshape(-1, 64, n).max(0)


def _grid_ref(x):
    return (f64(x)[0] * 2 + np.arange(x.shape[0])[:, None],)


# endregion

CASES = {
    # p: ex2.approx of each term (|x - m| < 40: 2^-22 + 40 2^-24), an f32 sum of at most 128 terms <= 1, the
    # division, p - onehot and the product by |g| <= 2, each one rounding: below 2 (4 EX2 + 140 ulp), absolute
    "xent_bwd": Case("xent_bwd", _xent_inputs, _xent_ref, 0.0, 2 * (4 * EX2 + 140 * F32_ULP),
                     ((70, 100), (1, 1), (129, 128), (17, 17))),
    # SS: f32 squares and an f32 sum of at most 1000 positive terms (2 K ulp of the sum); MX exact
    "k_chunk_reduce": Case("k_chunk_reduce", _chunks_inputs, _chunks_ref, (2 * 1000 * F32_ULP, 0.0), 0.0,
                           ((70, 100), (1, 1), (129, 1000), (17, 64))),
    # one f32 subtraction: the float64 difference rounded once
    "two_views": Case("two_views", _views_inputs, _views_ref, F32_ULP / 2, 0.0, ((70, 100), (1, 1), (129, 65),
                                                                                (64, 64))),
    # SUM: an f32 sum of at most 16 chunks of |x| < 8 (16 ulp of 128); MAX exact (-inf where no row folds in)
    "one_block_fold": Case("one_block_fold", lambda shape, rng: _chunks_inputs(shape, rng), _fold_ref,
                           0.0, (16 * 128 * F32_ULP, 0.0), ((70, 33), (1, 1), (1000, 64), (17, 64))),
    # one fma, one f32 rounding
    "grid_wide": Case("grid_wide", _views_inputs, _grid_ref, F32_ULP / 2, 0.0, ((2, 70), (1, 1), (3, 129))),
}

FAST = {"xent_bwd": ("tile",), "k_chunk_reduce": ("ptx",), "two_views": ("target",), "one_block_fold": ("tile",),
        "grid_wide": ("tile",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "xent_bwd": ["M=70", "N=100"], "k_chunk_reduce": ["M=70", "K=100"], "two_views": ["M=70", "N=100"],
    "one_block_fold": ["M=70", "N=33"], "grid_wide": ["B=3", "M=129"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


# region the SwiGLU epilogue: a bound through silu's approximation

SWIGLU_SHAPES = ((70, 104, 136), (1, 8, 8), (129, 64, 1000), (128, 200, 128))  # (M, K, N): K, N multiples of 8
SILU = EX2 + RCP + 4 * F32_ULP  # tile.silu: x rcp.approx(1 + ex2.approx(-x log2 e)) (docs/tile-elementwise.md)


def _check_swiglu(shape, level):
    """OUT against float64: the products are exact (small integers in bf16, sums below 2^24), so the error is
    silu's (SILU of |silu(G + bias) U|), the f32 rounding of G + bias carried through silu (slope below 1.1)
    times |U|, and the fma's rounding of OUT."""
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    a = rng.integers(-3, 4, (m, k)).astype(BF16)
    b1, b2 = (rng.integers(-2, 3, (k, n)).astype(BF16) for _ in range(2))
    bias = rng.standard_normal(n).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(np.float32)
    module = tessera.parse_module((KERNELS / "gemm_swiglu_residual.mlir").read_text(), "gemm_swiglu_residual.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.launch(module, a, b1, b2, bias, r, level=level)
    a, b1, b2, bias, r = f64(a, b1, b2, bias, r)
    gb, up = a @ b1 + bias, a @ b2
    act = gb / (1 + np.exp(-gb))
    expected = act * up + r
    bound = SILU * np.abs(act * up) + 1.1 * F32_ULP * np.abs(gb * up) + F32_ULP * np.abs(expected) + 1e-30
    error = np.abs(out.astype(np.float64) - expected)
    assert out.shape == (m, n) and np.all(error <= bound), \
        f"gemm_swiglu_residual at {level} {shape}: worst excess {(error - bound).max():.3g}"


@pytest.mark.parametrize("level", ["target", pytest.param("tile", marks=pytest.mark.slow),
                                   pytest.param("ptx", marks=pytest.mark.slow)])
def test_gemm_swiglu_residual(level):
    _check_swiglu(SWIGLU_SHAPES[0], level)


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_gemm_swiglu_residual_every_shape(level):
    for shape in SWIGLU_SHAPES:
        _check_swiglu(shape, level)


@pytest.mark.slow
def test_gemm_swiglu_residual_tools():
    """Warp-specialized, its count (235 of the consumers' 240) is tight and every ptxas spilled 4 bytes; the
    default pipeline asks the newest ptxas, which spills it (`tessera.lowering.fallback.CONSUMER_HEADROOM`), and
    compiles it two stages without a producer warpgroup, which every ptxas assembles without a spill."""
    check_tools("gemm_swiglu_residual", ["M=70", "K=104", "N=136"])

# endregion


# region the launch limit in y

def _grid_case(batch, length, level):
    x = np.random.default_rng(batch + length).standard_normal((batch, length)).astype(np.float32)
    module = tessera.parse_module((KERNELS / "grid_wide.mlir").read_text(), "grid_wide.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = tessera.launch(module, x, level=level)
    np.testing.assert_array_equal(y, _grid_ref(x)[0].astype(np.float32))


def test_a_grid_of_65535_by_2_blocks():
    _grid_case(2, 65535 * 64, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("batch, length, level", [(65535, 1, "tile"), (65535, 1, "target")])
def test_the_widest_grids_lowered(batch, length, level):
    _grid_case(batch, length, level)


def test_a_grid_of_65536_in_y_is_refused_by_name():
    """B = 65536 asks for 65536 blocks in y, one past the launch limit: refused before any block runs, by the
    Python API and by `tessera-run` (exit 1, no traceback)."""
    module = tessera.parse_module((KERNELS / "grid_wide.mlir").read_text(), "grid_wide.mlir")
    message = "grid y = 65536 exceeds the launch limit of 65535"
    with pytest.raises(ValueError, match=message):
        tessera.launch(module, np.zeros((65536, 1), np.float32), level="tile")
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(KERNELS / "grid_wide.mlir"),
                            "--level", "tile", "-d", "B=65536", "-d", "M=1"])
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr

# endregion
