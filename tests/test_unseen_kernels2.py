"""Kernels a user writes next, round 2 (`tests/user_kernels/*.mlir`, not round 1's `test_unseen_kernels.py`):
LayerNorm forward of rows of any length with its saved statistics, and its backward (the input gradient, and
the weight gradients as a column reduction across blocks through `tile.atomic_add`), softmax backward, a GEMM
with a GELU and residual epilogue (f16, K not a multiple of the K step), a K loop stepping by 64 with TMA, a GEMV
without the tensor core, FP8 GEMMs with per-row and per-column scales and with DeepSeek's K-block scales, a
transpose through `tile.gather`,
column sums and maxima, a 2-D reduction to a scalar, a top-1 with NumPy's first-index tie-break across column
blocks, a masked softmax with emptied rows, two K loops in sequence, a loop whose trip count is an input, a grid
using program ids x, y and z, f16/bf16 inputs with an output of each dtype, and NaN/inf through every kind of
op. Each runs through `tessera.launch` at the Tile, target and PTX levels on odd shapes (1, 17, 100, 129, 1000)
against a float64 NumPy reference (NaN where NumPy gives NaN, the same infinities).

The default run takes the kernels that found bugs, at the levels where they were found (a row vector added into
a 1-D window was refused; [1, N] windows read and wrote the block's other rows; an [BM, 1] column was added four
times; a loop of 2e9 trips read from the inputs ran for hours; a K loop with compute after its trailing barrier
was refused by the default pipeline instead of compiled single-stage), about 6 s. `-m slow` runs every kernel at every
level on every shape, checks each with every ptxas found (no warning, no spill) and with `tessera-run --check`,
and gives a few of them to `tessera.validate`.
"""

from __future__ import annotations

import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.limits import MAX_LOOP_TRIPS
from tessera.passes import PTX_PIPELINE
from tessera.sm90 import approx
from tessera.validate import validate
from unseen_rounds import KERNELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F8 = ml_dtypes.float8_e4m3fn
F32_ULP = 2.0**-23
EX2 = approx.approx_relative_error("ex2")


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


# region inputs and references


def _ln_inputs(shape, rng):
    m, n = shape
    return [(rng.standard_normal((m, n)) * 2 + 1).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            rng.standard_normal(n).astype(np.float32)], {}


def _ln_stats(x):
    x, = f64(x)
    mean = x.mean(1)
    return mean, 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(1) + 1e-5)


def _ln_ref(x, g, b):
    mean, rstd = _ln_stats(x)
    xd, g, b = f64(x, g, b)
    return (xd - mean[:, None]) * rstd[:, None] * g + b, mean, rstd


def _ln_bwd_inputs(shape, rng):
    (x, g, _), _ = _ln_inputs(shape, rng)
    mean, rstd = (s.astype(np.float32) for s in _ln_stats(x))
    return [rng.standard_normal(x.shape).astype(np.float32), x, g, mean, rstd], {}


def _ln_dx_ref(dy, x, g, mean, rstd):
    dy, x, g, mean, rstd = f64(dy, x, g, mean, rstd)
    xhat, gdy = (x - mean[:, None]) * rstd[:, None], dy * g
    return (rstd[:, None] * (gdy - gdy.mean(1, keepdims=True) - xhat * (gdy * xhat).mean(1, keepdims=True)),)


def _ln_dw_inputs(shape, rng):
    (dy, x, _, mean, rstd), _ = _ln_bwd_inputs(shape, rng)
    return [dy, x, mean, rstd], {}


def _ln_dw_ref(dy, x, mean, rstd):
    dy, x, mean, rstd = f64(dy, x, mean, rstd)
    return (dy * (x - mean[:, None]) * rstd[:, None]).sum(0), dy.sum(0)


def _softmax_bwd_inputs(shape, rng):
    y = rng.random(shape).astype(np.float32)
    return [y / y.sum(1, keepdims=True), rng.standard_normal(shape).astype(np.float32)], {}


def _softmax_bwd_ref(y, dy):
    y, dy = f64(y, dy)
    return (y * (dy - (dy * y).sum(1, keepdims=True)),)


def _epilogue_inputs(shape, rng):
    m, n, k = shape
    return [rng.standard_normal((m, k)).astype(np.float16), (rng.standard_normal((k, n)) / 8).astype(np.float16),
            rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float16)], {}


def _epilogue_ref(a, b, bias, r):
    a, b, bias, r = f64(a, b, bias, r)
    return (_gelu(a @ b + bias) + r,)


def _gemv_inputs(shape, rng):
    m, k = shape
    return [rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)], {}


def _gemv_ref(a, x):
    a, x = f64(a, x)
    return (a @ x,)


def _fp8_inputs(shape, rng):
    m, n, k = shape
    return [rng.standard_normal((m, k)).astype(F8), rng.standard_normal((n, k)).astype(F8),
            rng.uniform(0.5, 2, m).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32)], {}


def _fp8_ref(a, bt, sa, sb):
    a, bt, sa, sb = f64(a, bt, sa, sb)
    return ((a @ bt.T) * sa[:, None] * sb[None, :],)


def _blockscaled_inputs(shape, rng):
    m, n, k = shape
    blocks = -(-k // 128)
    return [rng.standard_normal((m, k)).astype(F8), rng.standard_normal((n, k)).astype(F8),
            rng.uniform(0.5, 2, (blocks, m)).astype(np.float32), rng.uniform(0.5, 2, blocks).astype(np.float32)], {}


def _blockscaled_ref(a, bt, sat, sb):
    a, bt, sat, sb = f64(a, bt, sat, sb)
    return (sum((a[:, j * 128:(j + 1) * 128] @ bt[:, j * 128:(j + 1) * 128].T) * sat[j][:, None] * sb[j]
                for j in range(len(sb))),)


def _normal_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(np.float32)], {}


def _transpose_ref(x):
    return x.T.astype(np.float64), np.broadcast_to(np.arange(x.shape[0]), x.T.shape).astype(np.float64)


def _column_ref(x):
    return x.astype(np.float64).sum(0), x.max(0).astype(np.float64)


def _total_ref(x):
    return (np.array([x.astype(np.float64).sum()]),)


def _ties_inputs(shape, rng):
    return [rng.integers(-20, 20, shape).astype(np.float32)], {}  # small integers: ties within and across blocks


def _top1_ref(x):
    return x.max(1).astype(np.float64), x.argmax(1).astype(np.float64)


def _masked_inputs(shape, rng):
    m, n = shape
    x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    mask = (rng.random((m, n)) < 0.6).astype(np.int32)
    mask[::5] = 0  # rows the mask empties: NaN, as NumPy's -inf - -inf
    if m > 3:
        mask[1:3] = 1
        x[1, 0], x[2, n - 1] = np.nan, np.inf  # a NaN logit, a +inf logit (inf - inf: NaN)
    return [x, mask], {}


def _masked_ref(x, mask):
    xm = np.where(mask != 0, x.astype(np.float64), -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(xm - xm.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True),)


def _two_gemms_inputs(shape, rng):
    m, n, k1, k2 = shape
    return [rng.standard_normal(s).astype(BF16) for s in ((m, k1), (k1, n), (m, k2), (k2, n))], {}


def _two_gemms_ref(a1, b1, a2, b2):
    a1, b1, a2, b2 = f64(a1, b1, a2, b2)
    return (a1 @ b1 + a2 @ b2,)


def _trips_inputs(shape, rng):
    m, trips = shape
    return [rng.standard_normal((m, 64)).astype(np.float32), np.array([trips], np.int32)], {}


def _trips_ref(x, steps):
    t = int(steps[0])
    x, = f64(x)
    return x * 2.0**-t, t * x + t * (t - 1) / 2


def _xyz_inputs(shape, rng):
    b, m, n = shape
    return [rng.standard_normal((b, m, n)).astype(np.float32), rng.standard_normal(b).astype(np.float32)], {}


def _xyz_ref(x, w):
    b, m, n = x.shape
    i, j = np.indices((m, n))
    x, w = f64(x, w)
    return (x * w[:, None, None] + 1000 * np.arange(b)[:, None, None] + i - j,)


def _mixed_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 4).astype(np.float16), (rng.standard_normal(shape) * 4).astype(BF16)], {}


def _mixed_ref(a, b):
    s = a.astype(np.float32) + b.astype(np.float32)  # the f32 sum, rounded once to each output type
    a, b = f64(a, b)
    return s.astype(np.float64), s.astype(np.float16).astype(np.float64), s.astype(BF16).astype(np.float64), \
        (a * b).sum(1)


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.25, 100.0, -100.0, 60.0, -0.75], np.float32)
"""Special values, and finite ones whose sums are exact in f32 in any order (multiples of 1/4, small), whose
squares and exponentials overflow (100) or not."""


def _specials_inputs(shape, rng):
    x = rng.choice(SPECIALS, shape).astype(np.float32)
    x[0] = rng.integers(-8, 8, shape[1]) / 4  # a finite row
    if shape[0] > 3:
        x[1] = np.where(np.arange(shape[1]) % 2, np.inf, 1.0)  # +inf without NaN
        x[2] = np.where(np.arange(shape[1]) % 2, -np.inf, 1.0)
        x[3, 5], x[3, 6] = np.inf, -np.inf  # inf - inf in a sum: NaN
    return [x], {}


def _specials_ref(x):
    with np.errstate(all="ignore"):
        return tuple(np.asarray(r, np.float64) for r in (
            np.maximum(x, 0), np.minimum(x, 0), -np.abs(x), x * x, np.float32(1) / x, np.exp(x),
            np.where(x > 0, x, 0.5), x.max(1), x.sum(1)))


# endregion


CASES = {
    # f32 row sums of at most 128 terms and rsqrt.approx (2^-22.9), on values of a few units
    "layernorm_fwd": Case("layernorm_fwd", _ln_inputs, _ln_ref, 1e-5, 1e-5, ((17, 100), (1, 1), (129, 128), (100, 17))),
    # as the forward: two row sums of at most 128 products, a few f32 roundings each
    "layernorm_bwd_dx": Case("layernorm_bwd_dx", _ln_bwd_inputs, _ln_dx_ref, 1e-5, 1e-5,
                             ((17, 100), (1, 1), (129, 128), (100, 17))),
    # f32 sums of up to 1000 terms of a few units, in an order the atomics pick
    "layernorm_bwd_dw": Case("layernorm_bwd_dw", _ln_dw_inputs, _ln_dw_ref, 0.0, 1e-4,
                             ((17, 100), (1, 1), (1000, 129), (100, 17))),
    # a row sum of at most 128 products of magnitude <= 3, two roundings after it
    "softmax_bwd": Case("softmax_bwd", _softmax_bwd_inputs, _softmax_bwd_ref, 4 * F32_ULP, 1e-7,
                        ((17, 100), (1, 1), (129, 128))),
    # the f16 output's half ulp (2^-11) and tanh.approx's 2^-11 of 0.5 x tanh(...) (|x| of a few units)
    "gemm_gelu_residual": Case("gemm_gelu_residual", _epilogue_inputs, _epilogue_ref, 2.0**-10, 1e-3,
                               ((17, 100, 129), (1, 1, 1), (100, 17, 70))),
    # the same with tile.divisible (TMA, pipelined) and a loop over K stepping by 64 itself
    "gemm_k_step": Case("gemm_k_step", _epilogue_inputs, _epilogue_ref, 2.0**-10, 1e-3,
                        ((17, 104, 136), (1, 8, 8), (100, 16, 72))),
    # f32 sums of up to 1000 products of |a x| ~ 1
    "gemv": Case("gemv", _gemv_inputs, _gemv_ref, 0.0, 1e-4, ((1, 1000), (100, 17), (129, 129), (1, 1))),
    # 8-bit products are exact in f32; the bf16 output's half ulp
    "fp8_gemm_scaled": Case("fp8_gemm_scaled", _fp8_inputs, _fp8_ref, 2.0**-8, 1e-5,
                            ((17, 100, 144), (1, 1, 16), (129, 64, 272))),
    # as fp8_gemm_scaled: each K block's product exact in f32, scaled and summed in f32, then bf16
    "fp8_blockscaled_gemm": Case("fp8_blockscaled_gemm", _blockscaled_inputs, _blockscaled_ref, 2.0**-8, 1e-4,
                                 ((17, 100, 272), (1, 1, 16), (129, 64, 128))),
    # exact: moves
    "transpose": Case("transpose", _normal_inputs, _transpose_ref, 0.0, 0.0, ((17, 100), (1, 1), (129, 200))),
    # f32 column sums of up to 1000 terms; maxima exact
    "column_reduce": Case("column_reduce", _normal_inputs, _column_ref, 0.0, 1e-4,
                          ((17, 100), (1, 1), (1000, 129), (129, 64))),
    # an f32 sum of up to 128000 normal values in blocks of 64 x 128
    "total_sum": Case("total_sum", _normal_inputs, _total_ref, 0.0, 1e-3, ((17, 100), (1, 1), (1000, 128), (129, 64))),
    # exact: compares, selects, maxima
    "top1": Case("top1", _ties_inputs, _top1_ref, 0.0, 0.0, ((17, 1000), (1, 1), (100, 129), (129, 64))),
    # ex2.approx and an f32 row sum of at most 128 terms <= 1
    "masked_softmax": Case("masked_softmax", _masked_inputs, _masked_ref, 1e-5, 1e-6,
                           ((17, 100), (1, 1), (100, 128), (129, 17))),
    # bf16 products are exact in f32; sums of up to 1129 terms of |a b| <~ 10
    "two_gemms": Case("two_gemms", _two_gemms_inputs, _two_gemms_ref, 0.0, 1129 * 40 * F32_ULP,
                      ((17, 100, 129, 1), (1, 1, 1, 1000), (100, 70, 64, 17))),
    # halvings are exact; a sum of at most 17 terms of x + t
    "scalar_trips": Case("scalar_trips", _trips_inputs, _trips_ref, 0.0, 1e-4, ((100, 3), (1, 0), (129, 17))),
    # x w rounded once (|x w| < 20), then one f32 addition of an exact integer
    "grid_xyz": Case("grid_xyz", _xyz_inputs, _xyz_ref, F32_ULP, 2e-6, ((3, 17, 100), (1, 1, 1), (2, 129, 65))),
    # the sums are the reference's own f32 roundings (exact); the f16 x bf16 products are exact in f32, their
    # row sum of at most 64 terms of magnitude < 400
    "mixed_dtypes": Case("mixed_dtypes", _mixed_inputs, _mixed_ref, (0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1e-3),
                         ((17, 64), (1, 2), (129, 36))),
    # exact but exp: ex2.approx of x log2 e (2 ulp and |x| 2^-24 for |x| <= 100), whose .ftz flushes a subnormal
    # result (exp(-100)) to zero below the Tile level; the sums are exact in any order
    "nan_inf": Case("nan_inf", _specials_inputs, _specials_ref, (0,) * 5 + (2 * EX2 + 100 * 2.0**-24, 0, 0, 0),
                    (0,) * 5 + (float(np.finfo(np.float32).tiny), 0, 0, 0), ((17, 64), (1, 64), (129, 64))),
}

FAST = {  # kernel: levels of the default run (where each bug was found)
    "layernorm_bwd_dw": ("target",), "total_sum": ("ptx",), "fp8_blockscaled_gemm": ("target",),
}


TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "layernorm_fwd": ["M=70", "N=100"], "layernorm_bwd_dx": ["M=70", "N=100"], "layernorm_bwd_dw": ["M=70", "N=100"],
    "softmax_bwd": ["M=70", "N=100"], "gemm_gelu_residual": ["M=70", "N=40", "K=72"],
    "gemm_k_step": ["M=70", "N=40", "K=72"], "gemv": ["M=70", "K=1000"],
    "fp8_gemm_scaled": ["M=70", "N=40", "K=144"], "fp8_blockscaled_gemm": ["M=70", "N=40", "K=272"], "transpose": ["M=70", "N=100"], "column_reduce": ["M=200", "N=100"],
    "total_sum": ["M=200", "N=100"], "top1": ["M=70", "N=1000"], "masked_softmax": ["M=70", "N=100"],
    "two_gemms": ["M=70", "N=40", "K1=72", "K2=17"], "scalar_trips": ["M=70"], "grid_xyz": ["B=3", "M=70", "N=65"],
    "mixed_dtypes": ["M=70", "N=38"], "nan_inf": ["M=70"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["layernorm_bwd_dw", "total_sum", "top1", "masked_softmax", "scalar_trips"])
def test_unseen_kernel_validates(kernel):
    """`tessera.validate` gives every level of the single-stage pipeline a verdict against the kernel's own Tile IR
    in float64: each within its tolerance, the passes within a level bit for bit."""
    module = tessera.parse_module((KERNELS / f"{kernel}.mlir").read_text(), f"{kernel}.mlir")
    sizes = {name: int(value) for name, value in (size.split("=") for size in TOOL_SIZES[kernel])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = validate(module, PTX_PIPELINE, sizes=sizes)
    assert report.ok, report.table()
    assert all(check.vs_reference <= check.tolerance for check in report.checks)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "red", "bulk"])
def test_column_atomics_in_a_pipelined_loop(mode):
    """Atomic adds of an [BM, 1] column and a [1, N] column vector in a pipelined, warp-specialized loop are added
    once per row and per column whatever `atomic-add` says (the producer's bulk reduction takes whole-row tiles
    only): every level of the pipeline within its tolerance of the kernel's own Tile IR in float64."""
    module = tessera.parse_module((KERNELS / "gemm_atomic_stats.mlir").read_text(), "gemm_atomic_stats.mlir")
    pipeline = ("assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90{atomic-add=" + mode + "},canonicalize,"
                "cse,warp-specialize,allocate-registers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = validate(module, pipeline, sizes={"M": 128, "N": 64, "K": 192})
    assert report.ok, report.table()


ROW_WINDOWS = """
builtin.module {
  func.func @row_windows(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %FIRST: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %ADDED: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %SUMS: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>, tile.role = "out"},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %rw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<1x64xf32, global>
    %r = tile.load %rw : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, register>
    %fw = tile.view %FIRST[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<1x64xf32, global>
    tile.store_global %r, %fw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    %aw = tile.view %ADDED[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<1x64xf32, global>
    tile.atomic_add %r, %aw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %s = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sc = tile.reshape %s : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %sw = tile.view %SUMS[%m0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
    tile.atomic_add %sc, %sw : !tile.tile<64x1xf32, register>, !tile.tile<64x1xf32, global>
    %y = tile.add %x, %r : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", ["target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_one_row_windows(level):
    """A [1, N] register tile loads, stores and atomically adds the one row of a [1, N] window of a taller tensor,
    and an [BM, 1] column adds each row once: the lowering moved the thread's own rows (every row of the block
    read and written; an IndexError in the CTA simulator on the add) and added a column from each of a quad's
    four lanes (4x)."""
    x = np.random.default_rng(0).standard_normal((100, 64)).astype(np.float32)
    first, added, sums, y = tessera.launch(tessera.parse_module(ROW_WINDOWS), x, level=level)
    rows = np.zeros_like(x)
    rows[[0, 64]] = x[[0, 64]]
    np.testing.assert_array_equal(first, rows)
    np.testing.assert_array_equal(added, rows)
    np.testing.assert_allclose(sums[:, 0], x.astype(np.float64).sum(1), rtol=0, atol=64 * 4 * F32_ULP * 8)
    np.testing.assert_array_equal(y, x + np.repeat(x[[0, 64]], 64, 0)[:100])


@pytest.mark.parametrize("level", ["tile", pytest.param("target", marks=pytest.mark.slow)])
def test_loop_trips_from_inputs_are_bounded(level):
    """A loop whose trip count an input sets far too large is refused at the loop, naming the limit, instead of
    running for hours (2e9 trips); the PTX executor stops at max_steps."""
    module = tessera.parse_module((KERNELS / "scalar_trips.mlir").read_text(), "scalar_trips.mlir")
    x = np.ones((3, 64), np.float32)
    with pytest.raises(KernelHazardError, match=f"would run 2000000000 trips, more than the interpreters' limit of "
                                                f"{MAX_LOOP_TRIPS}"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tessera.launch(module, x, np.array([2_000_000_000], np.int32), level=level)


# region malformed kernels: each a located diagnostic from tessera-opt (exit 1, no traceback) and the Python API

_MALFORMED_KERNEL = """builtin.module {{
  func.func @k(%X: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>}},
      %Y: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %x = tile.fill 1.0 : !tile.tile<64x64xf32, register>
{body}
    func.return
  }}
}}
"""

MALFORMED = {  # name: (body, "line:col", message); line 9 is the body's first
    "zero step": ("    scf.for %i = %c0 to %c4 step %c0 {\n    }", "9:5",
                  "'scf.for' constant step operand must be positive, got 0"),
    "while loop": ("    %r = scf.while (%i = %c0) : (index) -> index {\n      %go = arith.cmpi ult, %i, %c4 : index\n"
                   "      scf.condition(%go) %i : index\n    } do {\n    ^bb0(%j: index):\n"
                   "      %n = arith.addi %j, %c1 : index\n      scf.yield %n : index\n    }", "9:5",
                   "'scf.while' is not supported in a Tile IR kernel"),
    "fill past f32": ("    %t = tile.fill -1.0e39 : !tile.tile<64x64xf32, register>", "9:20",
                      "fill value out of range for f32"),
    "scale past f32": ("    %t = tile.scale %x by 4.0e38 : !tile.tile<64x64xf32, register>", "9:5",
                       "float literal out of range for its float type"),
    "constant past f32": ("    %t = arith.constant 1.0e39 : f32", "9:25", "float literal out of range for its float type"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_kernel_is_located(name, tmp_path):
    """The Python API raises the located diagnostic; tessera-opt prints it and exits 1, without a traceback."""
    body, place, message = MALFORMED[name]
    text = _MALFORMED_KERNEL.format(body=body)
    with pytest.raises(Exception, match=rf"k.mlir:{place}[\s\S]*{re.escape(message)}") as caught:
        tessera.parse_module(text, "k.mlir")
    assert not isinstance(caught.value, OverflowError | AttributeError | KeyError | TypeError)
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run(["tessera-opt", str(path)])
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert f"k.mlir:{place}" in result.stderr


def test_broken_promise_of_a_custom_kernel_points_to_specialize():
    """A size that breaks a hand-written kernel's tile.divisible is refused naming tile.specialize (the message
    named the GEMM builder, whatever the kernel)."""
    module = tessera.parse_module((KERNELS / "mixed_dtypes.mlir").read_text(), "mixed_dtypes.mlir")
    a = np.ones((4, 5), np.float16)
    with pytest.raises(ValueError, match=r"@mixed_dtypes promises \(tile.divisible\) that N is a multiple of 2, got "
                                         r"N = 5: .*tile.specialize instead") as caught:
        tessera.launch(module, a, a.astype(BF16), level="tile")
    assert "gemm" not in str(caught.value)


def test_python_fill_past_f32_is_refused():
    """A builder's fill or scale past f32's range is a ValueError naming the value (it became an infinity, with
    a NumPy overflow warning)."""
    from xdsl.dialects.builtin import f32

    from tessera.dialects import tile
    from tessera.dialects.tile_types import MemSpace, TileType

    with pytest.raises(ValueError, match=r"1e\+40 is out of range for f32"):
        tile.FillOp(1e40, TileType([64, 64], f32, MemSpace.REGISTER))
    largest = tile.FillOp(-float(np.finfo(np.float32).max), TileType([64, 64], f32, MemSpace.REGISTER))
    assert largest.value.value.data == -float(np.finfo(np.float32).max)


# endregion
