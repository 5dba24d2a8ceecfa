"""Kernels a user writes next, not the gallery's (`tests/user_kernels/*.mlir`): GEMM epilogues with f16 and bf16
outputs and per-row/per-column scales, a transposed-A batched GEMM, column sums by a tensor-core product with
ones, fused residual + RMSNorm, cross-entropy with i32 labels, a row argmax, rotary embeddings, integer index
arithmetic, i32 tiles, per-block scalars (arith.select, cmpf, maximumf, fptosi, scf.if) and a chain of every
approximate unary op. Each runs through `tessera.launch` at the Tile, target and PTX levels on odd shapes (1,
17, 100, 129, 130; never a multiple of the tile) against a float64 NumPy reference.

The default run takes one odd shape of the kernels that found bugs, at the levels where they were found (i32 row
vectors and tiles, integer fills, arith.select taken for tile.select, of scalars and of whole tiles); `-m slow`
runs every kernel at every level on every shape, and checks each with every ptxas found and with
`tessera-run --check`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.sm90 import approx
from unseen_rounds import Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F32_ULP = 2.0**-23
RSQRT = approx.approx_relative_error("rsqrt")
TANH = approx.approx_relative_error("tanh")


def _silu(x):
    return x / (1 + np.exp(-x))


# region inputs and references


def _gemm_relu_inputs(shape, rng):
    m, n, k = shape
    return [rng.standard_normal((m, k)).astype(np.float16), (rng.standard_normal((k, n)) / 8).astype(np.float16),
            rng.standard_normal(n).astype(np.float32)], {}


def _gemm_relu_ref(a, b, bias):
    a, b, bias = f64(a, b, bias)
    return (np.maximum(a @ b + bias, 0),)


def _dequant_inputs(shape, rng):
    m, n, k = shape
    return [rng.standard_normal((m, k)).astype(BF16), (rng.standard_normal((n, k)) / 8).astype(BF16),
            rng.uniform(0.5, 2, m).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32)], {}


def _dequant_ref(a, bt, srow, scol):
    a, bt, srow, scol = f64(a, bt, srow, scol)
    return (_silu((a @ bt.T) * srow[:, None] * scol[None, :]),)


def _rms_inputs(shape, rng):
    m, n = shape
    return [rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32)], {}


def _rms_ref(x, r, w):
    x, r, w = f64(x, r, w)
    h = x + r
    return h, h / np.sqrt((h**2).mean(1, keepdims=True) + 1e-6) * w


def _rows_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 3).astype(np.float32)], {}


def _argmax_inputs(shape, rng):
    return [rng.integers(-5, 5, shape).astype(np.float32)], {}  # small integers: ties, the first one wins


def _argmax_ref(x):
    return x.max(1).astype(np.float64), x.argmax(1).astype(np.float64)


def _ce_inputs(shape, rng):
    m, n = shape
    return [(rng.standard_normal((m, n)) * 2).astype(np.float32), rng.integers(0, n, m).astype(np.int32)], {}


def _ce_ref(x, labels):
    x, = f64(x)
    m = x.max(1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(1, keepdims=True))
    return x - lse, lse[:, 0] - x[np.arange(len(x)), labels]


def _rotary_inputs(shape, rng):
    heads, tokens = shape
    angle = np.arange(tokens)[:, None] * (10000.0 ** (-np.arange(32) / 32))[None, :]
    return [rng.standard_normal((heads, tokens, 64)).astype(np.float32), np.cos(angle).astype(np.float32),
            np.sin(angle).astype(np.float32)], {}


def _rotary_ref(x, cos, sin):
    x, cos, sin = f64(x, cos, sin)
    x1, x2 = x[..., :32], x[..., 32:]
    return (np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1),)


def _bgemm_inputs(shape, rng):
    batch, m, n, k = shape
    return [rng.standard_normal((batch, k, m)).astype(BF16), rng.standard_normal((batch, k, n)).astype(BF16)], {}


def _bgemm_ref(at, b):
    at, b = f64(at, b)
    return (np.einsum("bkm,bkn->bmn", at, b),)


def _block_scalars_ref(x):
    x, = f64(x)
    b = np.arange(len(x)) // 64
    s = np.maximum(b * 0.5, 0.75)
    t = np.where(s > 1, -1.0, 2.0)
    s2 = np.where(b == 1, np.trunc(3 * s), s)
    x2 = np.where((s > 1)[:, None], 2 * x, x)
    return (x2 * s2[:, None] + t[:, None],)


def _colsum_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(BF16)], {}


def _colsum_ref(x):
    return (x.astype(np.float64).sum(0),)


def _index_inputs(shape, rng):
    m, n = shape
    return [rng.integers(-1000, 1000, m).astype(np.int32)], {"N": n}


def _unary_ref(x):
    x, = f64(x)
    ax = np.abs(x)
    return (1 / (1 + np.exp(-x)) * np.tanh(np.sqrt(ax)) + 2 ** np.minimum(x, 4) / np.sqrt(1 + x * x)
            + np.log2(1 + ax) - 1 / (2 + ax) - np.exp(-x * x / 2) + np.maximum(x, -x / 2),)


def _i32_inputs(shape, rng):
    return [rng.integers(-2**31, 2**31 - 1, shape).astype(np.int32),
            rng.integers(-2**31, 2**31 - 1, shape[1]).astype(np.int32)], {}


def _i32_ref(x, o):
    return ((x.astype(np.int64) * np.arange(x.shape[1]) + o - 7).astype(np.int32).astype(np.float64),)


def _index_ref(d, n):
    i, j = np.indices((len(d), n)).astype(np.int64)
    den = j - 39
    quotient = np.where(den == 0, 0, d[:, None] // np.where(den == 0, 1, den))
    y = ((i * n + j) // 7) % 5 - j % 3 + quotient
    return y.astype(np.float64), y * 0.5, (d.astype(np.int64) % 7).astype(np.float64)


# endregion


GEMM_SHAPES = ((17, 129, 100), (1, 1, 1), (100, 70, 129), (130, 64, 64))
ROW_SHAPES = ((17, 128), (1, 1), (100, 100), (130, 3))

CASES = {
    # f16 products accumulate exactly in f32 (K <= 129 terms of |a b| ~ 1/8): the f16 output's half ulp (2^-11)
    "gemm_bias_relu_f16": Case("gemm_bias_relu_f16", _gemm_relu_inputs, _gemm_relu_ref, 2.0**-11, 1e-5, GEMM_SHAPES),
    # the bf16 output's half ulp (2^-8 relative to the output), silu's ex2 + rcp bounds far below it
    "gemm_dequant": Case("gemm_dequant", _dequant_inputs, _dequant_ref, 2.0**-8 + 1e-6, 1e-6, GEMM_SHAPES),
    # H: one f32 add; Y: the bf16 rounding of the output (2^-8) plus rsqrt.approx and the f32 row sum
    "residual_rmsnorm": Case("residual_rmsnorm", _rms_inputs, _rms_ref, 2.0**-8 + RSQRT + 128 * F32_ULP, 1e-6,
                             ROW_SHAPES),
    # exact: compares, selects and a max
    "row_argmax": Case("row_argmax", _argmax_inputs, _argmax_ref, 0.0, 0.0, ROW_SHAPES),
    # ex2/lg2 approximations and f32 sums of at most 128 terms, on logits of a few units
    "cross_entropy": Case("cross_entropy", _ce_inputs, _ce_ref, 1e-5, 2e-6, ROW_SHAPES),
    # f32 products and one fma, then the bf16 output's half ulp
    "rotary": Case("rotary", _rotary_inputs, _rotary_ref, 2.0**-8 + 4 * F32_ULP, 1e-6, ((2, 129), (1, 1), (3, 100))),
    # bf16 products are exact in f32; the sum of up to 129 terms of |a b| <~ 10 moves by K ulp of their magnitude
    "batched_gemm_ta": Case("batched_gemm_ta", _bgemm_inputs, _bgemm_ref, 0.0, 129 * 64 * F32_ULP,
                            ((2, 17, 129, 100), (1, 1, 1, 1), (3, 100, 70, 129))),
    # bf16 inputs times 1.0 are exact; an f32 sum of at most 200 terms of |x| < 5
    "column_sums": Case("column_sums", _colsum_inputs, _colsum_ref, 0.0, 200 * 5 * 200 * F32_ULP,
                        ((200, 100), (1, 1), (129, 64))),
    # exact integer arithmetic (floor division and modulo as Python's), then an exact cast and halving
    "index_math": Case("index_math", _index_inputs, _index_ref, 0.0, 0.0, ((130, 41), (1, 1), (100, 64))),
    # sigmoid, tanh, exp2, rsqrt, lg2, rcp, ex2 approximations, each at most 2^-11 relative (tanh.approx)
    "unary_chain": Case("unary_chain", _rows_inputs, _unary_ref, 2 * TANH, 1e-5, ((130, 37), (1, 1), (100, 64))),
    # scalars exact in f32 (halves, small integers); one fma rounding of x s2 + t
    "block_scalars": Case("block_scalars", _rows_inputs, _block_scalars_ref, F32_ULP, 0.0,
                          ((300, 64), (1, 64), (129, 64))),
    # exact: i32 multiplies wrap, as int32 does
    "i32_tile": Case("i32_tile", _i32_inputs, _i32_ref, 0.0, 0.0, ((70, 13), (1, 1), (129, 16))),
}

FAST = {  # kernel: levels of the default run (the ones that found a bug, and each lowering once)
    "index_math": ("ptx",), "i32_tile": ("target",),
    "block_scalars": ("tile", "target"),
}


TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "gemm_bias_relu_f16": ["M=70", "N=40", "K=72"], "gemm_dequant": ["M=70", "N=40", "K=72"],
    "residual_rmsnorm": ["M=70", "N=100"], "row_argmax": ["M=70", "N=100"],
    "cross_entropy": ["M=70", "N=100"], "rotary": ["H=2", "T=70"], "batched_gemm_ta": ["batch=2", "M=70", "N=40", "K=72"],
    "index_math": ["M=70", "N=41"], "unary_chain": ["M=70", "N=64"], "i32_tile": ["M=70", "N=13"],
    "block_scalars": ["M=200"], "column_sums": ["M=200", "N=100"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


CAST_TO_I32 = """
builtin.module {
  func.func @cast_to_i32(%X: !tile.tile<?x16xf32, global> {tile.dims = #tile.dims<M, 16>},
      %Y: !tile.tile<?x16xi32, global> {tile.dims = #tile.dims<M, 16>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %xw = tile.view %X[%c0, %c0] : !tile.tile<?x16xf32, global> -> !tile.tile<64x16xf32, global>
    %x = tile.load %xw : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
    %y = tile.cast %x : !tile.tile<64x16xf32, register> -> !tile.tile<64x16xi32, register>
    %yw = tile.view %Y[%c0, %c0] : !tile.tile<?x16xi32, global> -> !tile.tile<64x16xi32, global>
    tile.store_global %y, %yw : !tile.tile<64x16xi32, register>, !tile.tile<64x16xi32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", ["tile", pytest.param("ptx", marks=pytest.mark.slow)])
def test_cast_to_i32_saturates(level):
    """f32 to i32 truncates toward zero, saturates to the i32 range and takes NaN to 0 at every level, as
    cvt.rzi.s32.f32 does (the Tile interpreter gave NumPy's undefined cast, -2^31, for inf, NaN and 3e9)."""
    values = np.array([np.inf, -np.inf, np.nan, 3e9, -3e9, 2147483520.0, -7.9, 7.9, -0.0, 0.5], np.float32)
    x = np.zeros((1, 16), np.float32)
    x[0, :len(values)] = values
    y = tessera.launch(tessera.parse_module(CAST_TO_I32), x, level=level)[0, :len(values)]
    top, bottom = 2**31 - 1, -2**31
    np.testing.assert_array_equal(y, [top, bottom, 0, top, bottom, 2147483520, -7, 7, 0, 0])
