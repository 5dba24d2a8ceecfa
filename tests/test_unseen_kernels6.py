"""Kernels a user writes next, round 6 (`tests/user_kernels/*.mlir`, not rounds 1 to 5's): RMSNorm over rows
longer than one tile (bf16 read, f32 written, a learned weight, rsqrt) and its input gradient (row sums
carried over the chunks, bf16 out), rotary embedding in the interleaved
even/odd form applied to Q and K at once (GQA: fewer key heads; partner columns and table columns from i32
coordinate tiles, read with `tile.gather`), the attention-output projection fused with its epilogue (the heads
merged by the K loop, + bias + residual) and an int8-style quantize epilogue on a GEMM whose A is given
transposed (per-row and per-column scales, `tile.rint`, a clamp to [-128, 127], i32 out; an infinite scale
times 0 is NaN and converts to 0), and FP8 GEMMs of e5m2 and of mixed types (e5m2 x e4m3 and e4m3 x e5m2, bitwise
the Tile interpreter's at every level: first lowered with B read as e5m2, then refused below Tile IR). Each runs through `tessera.launch` at the Tile, target and PTX levels on
shapes no tile divides (1, 7, 33, 257, 1000) against a float64 NumPy reference; `tessera.validate` names a
lowering seeded wrong (rint lowered as trunc: it validated, the tolerance being the largest move of any
element; every output is now held element by element).

The default run takes each kernel at one level (about 3 s of CPU); `-m slow` runs every kernel at every level on
every shape, and checks each with every ptxas found (no warning, no spill) and with `tessera-run --level ptx
--check`.
"""

from __future__ import annotations

import importlib
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.sm90 import approx
from unseen_rounds import KERNELS, Case, assert_ptxas_clean, f64, round_tests

BF16 = ml_dtypes.bfloat16
F32_U = 2.0**-24  # f32's unit roundoff: one rounding moves a value by at most this much of it
RSQRT = approx.approx_relative_error("rsqrt")


# region inputs and references

def _rms_inputs(shape, rng):
    m, n = shape
    return [(rng.standard_normal((m, n)) * 3).astype(BF16), rng.standard_normal(n).astype(np.float32)], {}


def _rms_ref(x, w):
    x, w = f64(x, w)
    rstd = 1 / np.sqrt((x**2).mean(1) + 1e-6)
    return x * rstd[:, None] * w, rstd


def _rms_bwd_inputs(shape, rng):
    x, w = _rms_inputs(shape, rng)[0]
    rstd = _rms_ref(x, w)[1].astype(np.float32)
    return [rng.standard_normal(shape).astype(np.float32), x, w, rstd], {}


def _rms_bwd_ref(dy, x, w, rstd):
    dy, x, w, rstd = f64(dy, x, w, rstd)
    xhat, g = x * rstd[:, None], dy * w
    return (rstd[:, None] * (g - xhat * (g * xhat).mean(1, keepdims=True)),)


def _rope_inputs(shape, rng):
    hq, hk, t = shape
    angles = np.arange(t)[:, None] * 10000.0 ** (-np.arange(32) / 32)
    return [rng.uniform(-4, 4, (hq, t, 64)).astype(np.float32), rng.uniform(-4, 4, (hk, t, 64)).astype(np.float32),
            np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)], {}


def _rope_ref(q, k, cos, sin):
    cos, sin = f64(cos, sin)

    def rotate(x):
        x, = f64(x)
        y = np.empty_like(x)
        y[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        y[..., 1::2] = x[..., 1::2] * cos + x[..., 0::2] * sin
        return y

    return rotate(q), rotate(k)


def _proj_inputs(shape, rng):
    b, h, s, n = shape
    return [rng.integers(-3, 4, (b, h, s, 64)).astype(BF16), rng.integers(-3, 4, (64 * h, n)).astype(BF16),
            (rng.integers(-40, 40, n) / 4).astype(np.float32),
            (rng.integers(-400, 400, (b, s, n)) / 4).astype(np.float32)], {}


def _proj_ref(o, w, bias, r):
    o, w, bias, r = f64(o, w, bias, r)
    heads = o.shape[1]
    return (np.einsum("bhsd,hdn->bsn", o, w.reshape(heads, 64, -1)) + bias + r,)


def _quant_inputs(shape, rng):
    m, n, k = shape
    srow = (2.0 ** rng.integers(-6, 0, m)).astype(np.float32)
    scol = (2.0 ** rng.integers(-3, 2, (1, n))).astype(np.float32)
    srow[m // 2] = np.inf  # a row whose zero products become NaN (inf 0): 0 after the cast, as cvt.rzi
    scol[0, n // 3] = 0.0
    return [rng.integers(-4, 5, (k, m)).astype(BF16), rng.integers(-4, 5, (k, n)).astype(BF16), srow, scol], {}


def _quant_ref(at, b, srow, scol):
    at, b, srow, scol = f64(at, b, srow, scol)
    with np.errstate(invalid="ignore"):
        x = np.rint((at.T @ b) * srow[:, None] * scol)
        return (np.nan_to_num(np.clip(x, -128, 127), nan=0.0),)


# endregion

CASES = {
    # RSTD: the f32 sum of N bf16 squares (exact in f32): each term passes at most 63 adds in its chunk's row sum
    # and one per chunk after it (N <= 1000: 16), then the division by N, the eps add and rsqrt.approx: below
    # RSQRT + 90 U; Y two more products
    "rmsnorm_long": Case("rmsnorm_long", _rms_inputs, _rms_ref, (RSQRT + 92 * F32_U, RSQRT + 90 * F32_U), 0.0,
                         ((70, 257), (1, 1), (129, 1000), (33, 7))),
    # bf16 out (half an ulp: 2^-8 of the value) of an f32 computation whose error stays below 2^-16 (|DX| < 4:
    # the row sums of N <= 1000 products carry at most 80 roundings each, then five f32 operations)
    "rmsnorm_long_bwd": Case("rmsnorm_long_bwd", _rms_bwd_inputs, _rms_bwd_ref, 2.0**-8 + 2.0**-20, 2.0**-16,
                             ((70, 257), (1, 1), (129, 1000), (33, 7))),
    # the product x' s rounded once, the fma once (|x'| s <= 4.1: below 2^-21 absolute), then bf16 (half an ulp:
    # 2^-8 of the value)
    "rope_interleaved": Case("rope_interleaved", _rope_inputs, _rope_ref, 2.0**-8 + 2.0**-22, 2.0**-21,
                             ((4, 2, 70), (1, 1, 1), (8, 1, 257), (3, 3, 33))),
    # integer products summed below 2^24, bias and residual in quarters: every value exact in f32
    "attn_out_proj": Case("attn_out_proj", _proj_inputs, _proj_ref, 0.0, 0.0,
                          ((2, 3, 70, 100), (1, 1, 1, 1), (1, 4, 257, 33), (3, 1, 7, 257))),
    # exact: integer sums below 2^24, power-of-two scales; rint ties (x.5) go to even
    "gemm_quant_i8": Case("gemm_quant_i8", _quant_inputs, _quant_ref, 0.0, 0.0,
                          ((70, 33, 257), (1, 1, 1), (257, 7, 33), (7, 257, 1))),
}

FAST = {"rmsnorm_long": ("target",), "rmsnorm_long_bwd": ("tile",), "rope_interleaved": ("target",),
        "attn_out_proj": ("tile",),
        "gemm_quant_i8": ("tile",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "rmsnorm_long": ["M=70", "N=257"], "rmsnorm_long_bwd": ["M=70", "N=257"],
    "rope_interleaved": ["HQ=4", "HK=2", "T=70"],
    "attn_out_proj": ["B=2", "H=3", "S=70", "N=100"], "gemm_quant_i8": ["M=70", "N=33", "K=257"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


# region the verdict on integer outputs

def _quant_module(output: str = "i32"):
    """The quantize kernel; with output "f32" its clamped values are stored as f32 (fake quantization)."""
    text = (KERNELS / "gemm_quant_i8.mlir").read_text()
    if output == "f32":
        cast = "    %q = tile.cast %x4 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xi32, register>\n"
        assert cast in text
        text = text.replace(cast, "").replace("%q, %qw", "%x4, %qw").replace("64x64xi32", "64x64xf32") \
            .replace("?x?xi32", "?x?xf32")
    return tessera.parse_module(text, "gemm_quant_i8.mlir")


@pytest.mark.parametrize("output", ["i32", "f32"])
def test_a_lowering_that_truncates_instead_of_rounding_is_named(output, monkeypatch):
    """Regression: convert-tile-to-sm90 seeded to lower `tile.rint` as `math.trunc` (cvt.rzi) made every
    quantized value with a fraction of at least 1/2 one too small toward 0, and `tessera.validate` passed it:
    its tolerance was the largest move of any element, 4 for the i32 output (tile.element_min, missing from the
    table of exact ops, moved the clamped integral values by half an ulp and the truncating cast dropped them by
    1) and 2 for the f32 one (the 2 elements a straightforward run rounds across). Every output is now held
    element by element, and the clamp moves nothing."""
    from xdsl.dialects import math

    from tessera.dialects import tile
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    lowering = importlib.import_module("tessera.passes.convert_tile_to_sm90.elementwise")
    monkeypatch.setitem(lowering._ROUNDING, tile.RintOp, math.TruncOp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = validate(_quant_module(output), PTX_PIPELINE, sizes={"M": 64, "N": 64, "K": 64}, ptx=False)
    mismatch = report.mismatch
    assert mismatch is not None, report.table()
    assert (mismatch.pass_name, mismatch.level, mismatch.kind) == ("convert-tile-to-sm90", "target", "result")
    assert re.search(r"max error vs reference 1.000e\+00 > tolerance [0-9.]+e-0[4-9]|tolerance 0.000e\+00",
                     str(mismatch)), str(mismatch)


def test_integer_outputs_are_held_element_by_element():
    """The quantize kernel's tolerance is 0 on every element but those a straightforward run moves across a
    rounding boundary (2 of 4096 here), and a count off by one is a mismatch however large the counts."""
    from tessera.validation import rounding
    from tessera.validation.levels import generate_inputs

    module = _quant_module()
    sig = tessera.find_kernel(module)
    sizes = {"M": 64, "N": 64, "K": 64}
    reference = rounding.kernel_reference(module, sig, generate_inputs(sig, sizes, seed=0), sizes)
    (tolerance,) = reference.tolerances
    assert isinstance(tolerance, np.ndarray) and np.count_nonzero(tolerance) <= 8
    counts = np.full((4, 4), 2**21, np.int32)
    held = rounding.KernelReference((counts,), (np.zeros(counts.shape),))
    assert held.judge([counts]) == (0.0, 0.0)
    error, bound = held.judge([counts + np.eye(4, dtype=np.int32)])
    assert error == 1.0 and bound == 0.0

# endregion


# region FP8 of both formats: e5m2 x e5m2 and the mixed e5m2 x e4m3, e4m3 x e5m2 at every level

def _fp8_gemm(b_type: str):
    text = (KERNELS / "fp8_mixed_gemm.mlir").read_text()
    return tessera.parse_module(text.replace("f8E4M3FN", b_type), "fp8_mixed_gemm.mlir")


def _fp8_operands(shape, b_dtype):
    m, n, k = shape
    rng = np.random.default_rng(sum(shape))
    return (rng.standard_normal((m, k)) * 1000).astype(ml_dtypes.float8_e5m2), \
        np.clip(rng.standard_normal((n, k)) * 200, -448, 448).astype(b_dtype)  # e4m3fn: no inf, past 448 NaN


@pytest.mark.parametrize("level", ["target", pytest.param("tile", marks=pytest.mark.slow),
                                   pytest.param("ptx", marks=pytest.mark.slow)])
def test_an_e5m2_gemm_at_every_level(level):
    """e5m2 x e5m2 (no earlier round multiplied e5m2) with K = 272, not a multiple of the 128-byte K step: exact
    products, an f32 sum of K terms (K 2^-24 sum |terms|)."""
    a, b = _fp8_operands((70, 33, 272), ml_dtypes.float8_e5m2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tessera.launch(_fp8_gemm("f8E5M2"), a, b, level=level)
    a, b = f64(a, b)
    bound = 272 * F32_U * (np.abs(a) @ np.abs(b).T)
    assert c.dtype == np.float32 and np.all(np.abs(c - a @ b.T) <= bound)


_FP8 = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}


def _mixed_gemm(a_type: str, b_type: str):
    """fp8_mixed_gemm.mlir with A of `a_type` and Bt of `b_type` (its own: A e5m2, Bt e4m3)."""
    text = (KERNELS / "fp8_mixed_gemm.mlir").read_text().replace("f8E5M2", "@A@").replace("f8E4M3FN", "@B@")
    return tessera.parse_module(text.replace("@A@", a_type).replace("@B@", b_type), "fp8_mixed_gemm.mlir")


def _exact_fp8(rng, shape, name: str) -> np.ndarray:
    """Values of 8-bit type `name` with every mantissa bit in play (1 + 3 bits for e4m3, 1 + 2 for e5m2), exponents
    -2 .. 2, signs and a tenth zeros: each product is a multiple of 2^-9 below 2^6, so every partial sum of K = 272
    of them is an f32 (below 2^15, 24 bits) and every level's sum, in any order and rounding, is the exact one."""
    bits = 3 if name == "f8E4M3FN" else 2
    mantissa = rng.integers(2**bits, 2 ** (bits + 1), shape)
    values = rng.choice([-1.0, 1.0], shape) * mantissa * 2.0 ** (rng.integers(-2, 3, shape) - bits)
    values[rng.random(shape) < 0.1] = 0.0
    out = values.astype(_FP8[name])
    assert np.array_equal(out.astype(np.float64), values)
    return out


MIXED = [("f8E5M2", "f8E4M3FN"), ("f8E4M3FN", "f8E5M2")]


@pytest.mark.parametrize("a_type,b_type", MIXED, ids=["e5m2xe4m3", "e4m3xe5m2"])
def test_a_mixed_fp8_gemm_is_bitwise_the_tile_interpreters_at_every_level(a_type, b_type):
    """Regression: `tile.mma` of e5m2 A by e4m3 B (FP8 training's dgrad/wgrad GEMMs mix them) was first lowered to
    `wgmma ... .e5m2.e5m2`, B's e4m3 bytes read as e5m2 (the CTA simulator and the PTX executor agreed with each
    other and were off by 166 on inputs of about 2), then refused below Tile IR. Target IR's wgmma now carries B's
    type (`b_type`), printed `.f32.e5m2.e4m3`, each operand decoded with its own: M = 70, N = 33, K = 272 (not a
    multiple of the 128-byte K step) are bitwise the Tile interpreter's and the exact product at target and PTX
    level (sums exact by construction: `_exact_fp8`; reading either operand as the other type breaks it)."""
    rng = np.random.default_rng(272)
    a, b = _exact_fp8(rng, (70, 272), a_type), _exact_fp8(rng, (33, 272), b_type)
    module = _mixed_gemm(a_type, b_type)
    exact = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = {level: tessera.launch(module, a, b, level=level) for level in ("tile", "target", "ptx")}
    for level, c in results.items():
        assert c.dtype == np.float32 and np.array_equal(c.view(np.uint32), exact.view(np.uint32)), level


@pytest.mark.parametrize("a_type,b_type", MIXED, ids=["e5m2xe4m3", "e4m3xe5m2"])
def test_a_mixed_fp8_gemm_prints_both_types_and_every_ptxas_takes_it(a_type, b_type):
    """The printed wgmma names A's type then B's (`.f32.e5m2.e4m3`), and every installed ptxas (13.x and 12.x)
    assembles it without a diagnostic or a spill."""
    text = tessera.compile(_mixed_gemm(a_type, b_type))
    names = {"f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}
    wgmmas = {line.split()[0] for line in text.splitlines() if "wgmma.mma_async" in line}
    assert wgmmas == {f"wgmma.mma_async.sync.aligned.m64n64k32.f32.{names[a_type]}.{names[b_type]}"}, wgmmas
    assert_ptxas_clean(text, "fp8_mixed_gemm")

# endregion
