"""Kernels a user writes next, round 3 (`tests/user_kernels/*.mlir`, not rounds 1 and 2's): RMSNorm backward
(the input gradient, and the weight gradient as column sums of transposed gathers added across blocks with
`tile.atomic_add`), a fused residual + RMSNorm + projection whose normalized rows go to shared memory as the
A operand of `tile.mma`, a softmax over rows of any length with the online softmax written as a user's loop
(running max and sum as `scf.for` iter_args) and its LSE, and a cumulative sum along rows written as a product
with a triangular matrix of ones plus a carry, since Tile IR has no scan op. Each runs through `tessera.launch`
at the Tile, target and PTX levels on odd shapes (1, 17, 100, 129, 1000) against a float64 NumPy reference.

Tile IR has neither a scan op nor 8-bit integer tiles: `tile.cumsum` and an int8 GEMM are refused by name at
their line, by the Python API and by `tessera-opt` (exit 1, no traceback).

The default run takes the cumulative sum in the PTX executor (about 2 s) and the two refusals;
`-m slow` runs every kernel at every level on every shape, and checks each with every ptxas found (no warning,
no spill) and with `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.sm90 import approx
from text_edits import checked
from unseen_rounds import KERNELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F32_ULP = 2.0**-23
RSQRT = approx.approx_relative_error("rsqrt")
EX2 = approx.approx_relative_error("ex2")


# region inputs and references

def _rms_bwd_inputs(shape, rng):
    m, n = shape
    x = (rng.standard_normal((m, n)) * 2).astype(np.float32)
    rstd = (1 / np.sqrt((x.astype(np.float64) ** 2).mean(1) + 1e-6)).astype(np.float32)
    return [rng.standard_normal((m, n)).astype(np.float32), x, rng.standard_normal(n).astype(np.float32), rstd], {}


def _rms_bwd_ref(dy, x, w, rstd):
    dy, x, w, rstd = f64(dy, x, w, rstd)
    xhat, g = x * rstd[:, None], dy * w
    return rstd[:, None] * (g - xhat * (g * xhat).mean(1, keepdims=True)), (dy * xhat).sum(0)


def _rms_gemm_inputs(shape, rng):
    m, n, k = shape
    return [rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal(k).astype(np.float32), rng.standard_normal((k, n)).astype(BF16)], {}


def _rms_gemm_ref(x, r, w, b):
    x, r, w, b = f64(x, r, w, b)
    h = x + r
    y = h / np.sqrt((h**2).mean(1, keepdims=True) + 1e-6) * w
    return (round_bf16(y) @ b,)  # the kernel rounds the normalized rows to bf16 for the tensor core


def round_bf16(x):
    return x.astype(np.float32).astype(BF16).astype(np.float64)


def _softmax_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 3).astype(np.float32)], {}


def _softmax_ref(x):
    x, = f64(x)
    top = x.max(1, keepdims=True)
    e = np.exp(x - top)
    total = e.sum(1, keepdims=True)
    return e / total, (top + np.log(total))[:, 0]


def _cumsum_inputs(shape, rng):
    return [rng.integers(-8, 9, shape).astype(BF16)], {}  # small integers: every partial sum exact in f32


def _cumsum_ref(x):
    return (np.cumsum(x.astype(np.float64), 1),)


# endregion

CASES = {
    # DX: two f32 row sums of at most 128 products of a few units and a few roundings; DW: f32 sums of up to
    # 1000 terms added by atomics in any order
    "rmsnorm_bwd": Case("rmsnorm_bwd", _rms_bwd_inputs, _rms_bwd_ref, (1e-5, 0.0), (1e-5, 1e-4),
                        ((17, 100), (1, 1), (129, 128), (1000, 17))),
    # the reference rounds the normalized rows to bf16 as the kernel does (rsqrt.approx's 2^-22.9 moves none of
    # these seeded roundings); then sums of at most 128 exact bf16 products of magnitude < 16 in f32
    "rmsnorm_gemm": Case("rmsnorm_gemm", _rms_gemm_inputs, _rms_gemm_ref, 0.0, 128 * 16 * F32_ULP,
                         ((100, 70, 100), (17, 129, 128), (1, 1, 1), (130, 64, 64))),
    # ex2.approx of each term and of the rescale factors, f32 sums of up to 1000 terms <= 1; the LSE's lg2
    "online_softmax": Case("online_softmax", _softmax_inputs, _softmax_ref, (4 * EX2 + 1e-6, 1e-6), (1e-7, 1e-5),
                           ((100, 1000), (1, 1), (17, 129), (129, 64))),
    # exact: integer partial sums below 2^24 in f32
    "row_cumsum": Case("row_cumsum", _cumsum_inputs, _cumsum_ref, 0.0, 0.0,
                       ((100, 1000), (1, 1), (17, 129), (129, 64))),
}

FAST = {"row_cumsum": ("ptx",)}


TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "rmsnorm_bwd": ["M=70", "N=100"], "rmsnorm_gemm": ["M=70", "N=40", "K=100"], "online_softmax": ["M=70", "N=300"],
    "row_cumsum": ["M=70", "N=300"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES, fast_shape=2)


# region what Tile IR does not have: refused by name at the line

_MMA = ("%part = tile.mma %x_smem, %u_smem, %zeros : !tile.tile<64x64xbf16, shared, swizzle 128>, "
        "!tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>")
MISSING = {  # name: (edit of row_cumsum.mlir, "line:col", message)
    "scan op": (lambda text: checked(text).replace(_MMA, "%part = tile.cumsum %x_smem : !tile.tile<64x64xbf16, shared, "
                                                "swizzle 128> -> !tile.tile<64x64xf32, register>"),
                "37:15", "Operation tile.cumsum is not registered"),
    "int8 GEMM": (lambda text: checked(text).replace("xbf16", "xi8"), "9:21",
                  "element type must be bf16, f16, f32, f8E4M3FN, f8E5M2, i32, i64, index or i1, got i8"),
}


@pytest.mark.parametrize("name", MISSING)
def test_missing_vocabulary_is_refused_at_its_line(name, tmp_path):
    edit, place, message = MISSING[name]
    text = edit((KERNELS / "row_cumsum.mlir").read_text())
    with pytest.raises(Exception, match=rf"k.mlir:{place}[\s\S]*{message}"):
        tessera.parse_module(text, "k.mlir")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run(["tessera-opt", str(path)])
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert f"k.mlir:{place}" in result.stderr

# endregion
