"""Kernels a user writes next, round 7 (`tests/user_kernels/*.mlir`, not rounds 1 to 6's): Mamba's depthwise causal
convolution (four taps read through windows that start up to three rows before the tensor, silu), windows shifted
one row and one column before the tensor through every kind of access (f32 and 16-bit loads and stores, a 1-D row
vector, a [1, 64] broadcast, a copy to shared memory by threads), cross-entropy over a vocabulary longer than any
tile (bf16 logits, the log-sum-exp carried online over column blocks and the label's logit picked up in the block
that holds it; V = 32000 under `-m slow`), a batched GEMM whose weight every batch shares (a broadcast operand,
bias, bf16 out, K not a multiple of 16), dynamic per-token FP8 quantization (a row's absolute maximum, its
scale, e4m3 bytes and the dequantization scale out; zero rows and NaN rows), a split-K GEMM (slices of K on the
grid's z axis, loops from a lower bound that is not 0, partial products added with `tile.atomic_add`, 128-row
blocks) and a mixture-of-experts top-2 router (two argmaxes with NumPy's first-index ties, i32 indices and
their softmax weights). Each runs through `tessera.launch` at
the Tile, target and PTX levels on shapes no tile divides (1, 3, 17, 63, 65, 127, 129, 1000) against a float64
NumPy reference.

Bugs found: a window starting before its tensor (a row or column index below 0, `t0 - k`) read as 0 and dropped
its stores in the Tile interpreter, but its lowering masked only the end of the tensor: the CTA simulator and
the PTX executor stopped at an access below the tensor (on a GPU: reads and writes outside it). `tessera.validate`
named an element of the first output whatever output was off (a right element of a right output), and looked
for the first diverging op of a custom kernel in block (0, 0, 0) whatever block was wrong. An element
two blocks store (a race on a GPU, refused by the CTA simulator) ran at Tile level keeping the last block's value.
A window whose leading index (a batch) lies past its tensor, in a grid rounded up, read 0 and stored nothing at
Tile level, but was lowered without a mask on it: the CTA simulator and the PTX executor stopped outside the
tensor.

The default run takes each kernel at one level (about 5 s of CPU); `-m slow` runs every kernel at every level on
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
import tessera.interpreters.block_batch
from unseen_rounds import KERNELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
F32_U = 2.0**-24  # f32's unit roundoff


# region inputs and references

def _shift(a: np.ndarray, k: int) -> np.ndarray:
    """out[i, j, ...] = a[i - k, j - k, ...] along every axis, 0 where that index lies outside a."""
    out = np.zeros_like(a)
    inner = tuple(slice(k, None) if k >= 0 else slice(None, k) for _ in a.shape)
    outer = tuple(slice(None, n - k) if k >= 0 else slice(-k, None) for n in a.shape)
    out[inner] = a[outer]
    return out


def _conv_inputs(shape, rng):
    t, c = shape
    return [rng.standard_normal((t, c)).astype(np.float32), rng.standard_normal((4, c)).astype(np.float32),
            rng.standard_normal(c).astype(np.float32)], {}


def _conv_ref(x, w, bias):
    x, w, bias = f64(x, w, bias)
    s = bias + np.zeros_like(x)
    for k in range(4):
        s += w[k] * np.concatenate([np.zeros((min(k, len(x)), x.shape[1])), x[:len(x) - k]])
    return (s / (1 + np.exp(-s)),)


def _shifted_inputs(shape, rng):
    m, n = shape
    return [rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((m, n)).astype(BF16),
            rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)], {}


def _shifted_ref(x, xh, v, r):
    x, xh, v, r = f64(x, xh, v, r)
    p = _shift(xh, 1)
    return _shift(x, -1), p + _shift(v, 1)[:, None] + _shift(r, 1)[None, :], p


def _xent_inputs(shape, rng):
    m, v = shape
    labels = rng.integers(0, v, m).astype(np.int32)
    labels[m // 2] = v  # outside the vocabulary: picks nothing, LOSS = LSE
    return [(rng.standard_normal((m, v)) * 4).astype(BF16), labels], {}


def _xent_ref(x, labels):
    x, = f64(x)
    top = x.max(1)
    lse = top + np.log(np.exp(x - top[:, None]).sum(1))
    inside = labels < x.shape[1]
    picked = np.where(inside, x[np.arange(len(x)), np.minimum(labels, x.shape[1] - 1)], 0.0)
    return lse - picked, lse


def _bcast_inputs(shape, rng):
    b, m, n, k = shape
    return [rng.integers(-3, 4, (b, m, k)).astype(BF16), rng.integers(-3, 4, (k, n)).astype(BF16),
            (rng.integers(-40, 40, n) / 4).astype(np.float32)], {}


def _bcast_ref(a, w, bias):
    a, w, bias = f64(a, w, bias)
    return ((a @ w + bias).astype(BF16).astype(np.float64),)


def _quant_inputs(shape, rng):
    m, n = shape
    x = (rng.standard_normal((m, n)) * np.exp(rng.uniform(-8, 8, (m, 1)))).astype(np.float32)
    x[m // 2] = 0.0  # a row of zeros: amax is the floor 2^-20, Y = 0
    if m > 3:
        x[1, n // 2] = np.nan  # a NaN row: every byte NaN, S NaN (row_max and max propagate NaN, as NumPy)
    return [x], {}


def _quant_ref(x):
    amax = np.maximum(np.abs(x).max(1), np.float32(2.0**-20))
    scale = np.float32(448) / amax
    return (x * scale[:, None]).astype(E4M3).astype(np.float64), (amax / np.float32(448)).astype(np.float64)


def _split_k_inputs(shape, rng):
    m, n, k = shape
    return [rng.integers(-3, 4, (m, k)).astype(BF16), rng.integers(-3, 4, (k, n)).astype(BF16)], {}


def _split_k_ref(a, b):
    a, b = f64(a, b)
    return (a @ b,)


def _moe_inputs(shape, rng):
    m, e = shape
    x = (rng.standard_normal((m, e)) * 3).astype(np.float32)
    x[0, e - 1] = x[0].max()  # a tie for the first pick: the first index wins
    if m > 2:
        x[2] = 1.5  # every expert equal: picks 0 and 1, weights 1/2
    return [x], {}


def _moe_ref(x):
    x, = f64(x)
    rows = np.arange(len(x))
    i1 = x.argmax(1)
    rest = x.copy()
    rest[rows, i1] = -np.inf
    i2 = rest.argmax(1)
    with np.errstate(invalid="ignore", over="ignore"):
        d = x[rows, i1] - rest[rows, i2]
        return i1.astype(np.float64), i2.astype(np.float64), 1 / (1 + np.exp(-d)), 1 / (1 + np.exp(d))


def _rounded_inputs(shape, rng):
    b, m, n = shape
    return [rng.standard_normal((b, m, n)).astype(np.float32), rng.standard_normal((b, n)).astype(np.float32)], {}


def _rounded_ref(x, w):
    x, w = f64(x, w)
    return (x * w[:, None, :],)


def _accumulate_inputs(shape, rng):
    b, m = shape
    return [rng.standard_normal((b, m, 64)).astype(np.float32)], {}


def _accumulate_ref(x):
    x, = f64(x)
    b, m, _ = x.shape
    s, st = np.zeros_like(x), np.zeros_like(x)
    s[:, :-1] = x[:, 1:]
    for m0 in range(0, m, 64):
        rows = np.arange(m0 - 1, m0 + 63)  # row m0 - 1 + c of ST takes column c of the block's tile
        inside = (rows >= 0) & (rows < m)
        n = min(64, m - m0)
        st[:, rows[inside], :n] += x[:, m0:m0 + n, :].swapaxes(1, 2)[:, inside]
    return s, st


# endregion

CASES = {
    # the pre-activation: 4 products and 4 sums in f32 (below 8 U of sum |terms| < 2^-18 absolute for these
    # inputs); silu = s rcp.approx(1 + ex2.approx(-s log2 e)): ex2's and rcp's bounds and the argument's rounding
    # (|s log2 e| U), below 2^-17 of the value
    "causal_conv1d": Case("causal_conv1d", _conv_inputs, _conv_ref, 2.0**-17, 2.0**-18,
                          ((70, 33), (1, 1), (3, 17), (129, 65), (1000, 63))),
    # Y and P move values exactly; Z is two f32 additions of values below 8: below 2^-18
    "shifted_windows": Case("shifted_windows", _shifted_inputs, _shifted_ref, 0.0, (0.0, 2.0**-18, 0.0),
                            ((70, 33), (1, 1), (65, 129), (3, 64), (127, 63))),
    # LSE: exact bf16 logits; the f32 sums of V <= 32000 exponentials over 64-column chunks (64 roundings in a
    # chunk, two per chunk after it: below 600 U relative), ex2.approx's 2 ulp per term and its argument's
    # rounding, lg2.approx: below 2^-13 absolute for these logits (|x| < 24); LOSS the same, the pick exact
    "xent_vocab": Case("xent_vocab", _xent_inputs, _xent_ref, 2.0**-20, 2.0**-13,
                       ((70, 1000), (1, 1), (3, 129), (65, 127), (17, 32000))),
    # integer products and quarter biases: exact f32 sums below 2^24, then one bf16 rounding on both sides
    "batched_gemm_bcast": Case("batched_gemm_bcast", _bcast_inputs, _bcast_ref, 0.0, 0.0,
                               ((3, 17, 65, 63), (1, 1, 1, 1), (2, 65, 3, 129), (1, 3, 127, 17),
                                (2, 63, 1000, 3))),
    # every operation one f32 rounding, the same at every level (div.rn, mul.rn, cvt.rn.satfinite): bitwise
    "fp8_token_quant": Case("fp8_token_quant", _quant_inputs, _quant_ref, 0.0, 0.0,
                            ((70, 128), (1, 2), (65, 34), (129, 64), (3, 126))),
    # integer products: every partial sum exact in f32 (below 2^24), in any order of the atomic adds
    "gemm_split_k": Case("gemm_split_k", _split_k_inputs, _split_k_ref, 0.0, 0.0,
                         ((17, 65, 1000), (1, 1, 1), (129, 3, 63), (65, 127, 129), (3, 1000, 17))),
    # indices exact; weights sigmoid(d) of an exact d (|d| < 30): ex2.approx's and rcp.approx's bounds and the
    # argument's rounding (|d log2 e| U): below 2^-18 of the value
    "moe_top2": Case("moe_top2", _moe_inputs, _moe_ref, (0.0, 0.0, 2.0**-18, 2.0**-18), 0.0,
                     ((70, 8), (1, 1), (65, 3), (129, 63), (3, 64), (17, 2))),
    # one f32 product: correctly rounded
    "batch_rounded_grid": Case("batch_rounded_grid", _rounded_inputs, _rounded_ref, F32_U, 0.0,
                               ((3, 70, 33), (1, 1, 1), (5, 129, 64), (7, 3, 17))),
    # each element one f32 addition into 0, or (ST) the sum of two: correctly rounded
    "shifted_accumulate": Case("shifted_accumulate", _accumulate_inputs, _accumulate_ref, F32_U, 0.0,
                               ((3, 70), (1, 1), (2, 129), (5, 64))),
}

FAST = {"causal_conv1d": ("tile",), "shifted_windows": ("target",), "xent_vocab": ("target",),
        "batched_gemm_bcast": ("tile",), "fp8_token_quant": ("target",),
        "gemm_split_k": ("tile",), "moe_top2": ("tile",), "batch_rounded_grid": ("target",),
        "shifted_accumulate": ("target",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "causal_conv1d": ["T=70", "C=33"], "shifted_windows": ["M=70", "N=33"], "xent_vocab": ["M=70", "V=1000"],
    "batched_gemm_bcast": ["batch=3", "M=17", "N=65", "K=63"], "fp8_token_quant": ["M=70", "N=128"],
    "gemm_split_k": ["M=65", "N=127", "K=1000"], "moe_top2": ["M=70", "E=8"],
    "batch_rounded_grid": ["B=3", "M=70", "N=33"], "shifted_accumulate": ["B=3", "M=70"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


# region the verdict names the output and the elements that are off

def _truncating_rint_mismatch(monkeypatch, kernel: str, sizes: dict):
    """The mismatch `tessera.validate` reports for `kernel` through the single-stage pipeline with `tile.rint`
    lowered as a truncation (seeded wrong)."""
    from xdsl.dialects import math

    from tessera.dialects import tile
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    lowering = importlib.import_module("tessera.passes.convert_tile_to_sm90.elementwise")
    monkeypatch.setitem(lowering._ROUNDING, tile.RintOp, math.TruncOp)
    module = tessera.parse_module((KERNELS / f"{kernel}.mlir").read_text(), f"{kernel}.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mismatch = validate(module, PTX_PIPELINE, sizes=sizes, ptx=False).mismatch
    assert mismatch is not None
    assert (mismatch.pass_name, mismatch.level, mismatch.kind) == ("convert-tile-to-sm90", "target", "result")
    return mismatch


def test_a_wrong_lowering_of_a_second_output_is_named_there(monkeypatch):
    """Regression: `tessera.validate` named an element of the first output whatever output was off: with
    `tile.rint` lowered as a truncation (seeded), copy_and_round's verdict read "Y[0,0] = 0.12573 (was 0.12573,
    reference 0.12573)", an element that is right, of the output that is right. It now names Q, the first of its
    elements beyond their tolerance, how many there are and the box they lie in."""
    mismatch = _truncating_rint_mismatch(monkeypatch, "copy_and_round", {"M": 70, "N": 33})
    assert mismatch.output == "Q", str(mismatch)
    assert re.search(r"Q\[\d+,\d+\] = -?\d+ \(was -?\d+, reference -?\d+\); \d+ of 2310 elements of Q, in "
                     r"Q\[0\.\.69,0\.\.32\] beyond their tolerance", str(mismatch)), str(mismatch)
    assert "Y[" not in str(mismatch)


def test_the_first_diverging_op_is_searched_in_the_block_that_wrote_the_element(monkeypatch):
    """Regression: for a kernel of no builder's kind, `tessera.validate` searched for the first diverging op in
    block (0, 0, 0) whatever element was off: a wrong lowering of `tile.rint` (seeded: a truncation) used only by
    the last block read "no named value of the block diverges". The block that wrote the element is now found
    by running the Tile IR (`levels.writer_block`), and the op is named."""
    mismatch = _truncating_rint_mismatch(monkeypatch, "last_block_rounds", {"M": 65, "N": 8})
    assert mismatch.element[0] == 64, str(mismatch)
    assert "first diverging op: %r = math.trunc" in str(mismatch), str(mismatch)

# endregion


# region two blocks storing one element

COLUMN_FLAGS = """builtin.module {
  func.func @column_flags(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<1x?xf32, global> {tile.dims = #tile.dims<1, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c64 : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %ones = tile.fill 1.0 : !tile.tile<1x64xf32, register>
    %t = tile.mul %ones, %ones : !tile.tile<1x64xf32, register>
    %sw = tile.view %S[%c0, %n0] : !tile.tile<1x?xf32, global> -> !tile.tile<1x64xf32, global>
    tile.store_global %t, %sw : !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, global>
    func.return
  }
}
"""


def test_two_blocks_storing_one_element_is_a_hazard_at_tile_level():
    """Regression: a [1, N] result stored by every row block (where a user meant one block, or an atomic add)
    ran at Tile level and kept the last block's value, silently; the CTA simulator refused it as a race between
    CTAs. The Tile interpreter now refuses it too, naming the element and both blocks."""
    module = tessera.parse_module(COLUMN_FLAGS, "column_flags.mlir")
    x = np.ones((70, 33), np.float32)
    with pytest.raises(tessera.interpreters.block_batch.KernelHazardError,
                       match=r"writes S\[0, 0\], which block \(1, 0, 0\) writes too: blocks run in no order.*\) in "
                             r"block \(0, 0, 0\)"):
        tessera.launch(module, x, level="tile")
    assert tessera.launch(module, x[:64], level="tile").shape == (1, 33)  # one row block: one writer

# endregion
