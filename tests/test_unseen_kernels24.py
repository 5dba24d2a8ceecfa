"""Kernels a user writes next, round 24 (`tests/user_kernels/*.mlir`, not earlier rounds'): a softmax over rows as
long as a vocabulary in three passes (1,000 and GPT-2's 50,257 columns); a per-row dynamic int8 quantizer with its
scales out (zero rows, ties to even); a fused AdamW step (three outputs, the bias corrections 1 - b^t on [1, 1]
tiles from a step count read from memory); a GEGLU epilogue with the exact erf GELU (Abramowitz and Stegun's
7.1.26: Tile IR has no erf); the KL divergence of two rows of logits (two online log-sum-exps); the tanh GELU's
backward; a batched nn.Linear (weights [batch, N, K], transpose_b) with Mish and f16 out; GPT-NeoX rotary embedding
at head_dim 128 with angles picked by a position table (`tile.gather` at a row vector of positions); row L2
normalization; cross-entropy with label smoothing and an ignored label; a mixture-of-experts grouped GEMM (each
block's expert read with `tile.load_index`, its bias row gathered at that [1, 1] coordinate, padding blocks running
zero trips); tables gathered at a [1, 1] coordinate into [1, 1], [64, 64] and [64, 1] tiles; a Mixtral-style
router (8 experts' logits by a wgmma with N = 8 over Wr^T's [8, 64] tiles, their softmax, the top-1 expert and its
probability); a lower-triangular TRMM (each row block's trip count its program id + 1, A's diagonal tile masked in
registers and stored to shared memory as the mma's operand); dropout by a counter-based hash (wrapping i32
products of iota coordinates and a seed, Python's `%`); a GEMM batched over two leading dims with per-head weights
(a loop over N blocks around the K loop: a grid of B * H is refused by name, `dims-product-invalid.mlir`). Each runs through `tessera.launch` at the Tile, target and
PTX levels on shapes no tile divides (1, 3, 17, 70, 130, 1000) against a float64 NumPy reference.

Bugs found: `tile.gather` at a [1, 1] coordinate (an expert's bias row) was refused below Tile IR as if it
depended on where the value lies in the block; the op's contract broadcasts it as any operand, and the lowering
does now. The router at a K whose rows need not start on 16 bytes was refused below Tile IR: its [8, 64] tile,
copied by the threads without TMA, gave each of 128 threads half a swizzle period; 64 threads copy it now
(`tests/test_any_shape.py`). The hash's multiplier as `tile.fill 73856093` of an i32 tile ran as 73856096 at every
level (the fill holds an f32): refused where it is written now, naming `tile.splat` of an `arith.constant`, which
the kernel uses (`tests/lit/dialects/tile/fill-syntax-invalid.mlir`; a hex fill of an i32 tile, read as f32 bits,
is its value now: `fill-hex.mlir`). A CTA simulator hazard of a lowered kernel (the MoE table one entry short) was
located by `tessera-run` at the kernel's line, not the op's (`tests/test_tessera_run.py`).

Refused by name at their line, by `tessera.launch` and `tessera-run` (exit 1, no traceback): the MoE kernel's K
loop of copies under an `scf.if` (the kernel as kept gives padding blocks zero trips), and a tile copied to shared
memory read back with `tile.load` (tile-ir.md promised it at every level; it now says Tile level only).

The verdict of `tessera-run --check` is held both ways: each kernel checks ok (`-m slow`, at PTX level), and each
with one lowering seeded wrong the way a compiler bug would be (a comparison off by one, a subtraction lowered as
an addition, the arms of a select swapped, an op dropped) exits 1 with MISMATCH and the elements off.

The default run takes each kernel at one level, the 50,257 columns at Tile level and the seeded verdicts in the
CTA simulator (about 30 s of CPU); `-m slow` runs every kernel at every level on every shape, the 50,257 columns
in the CTA simulator, and checks each kernel with every ptxas found (no warning, no spill) and with `tessera-run
--level ptx --check`.
"""

from __future__ import annotations

import math
import re
import sys

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import arith

import inprocess
import tessera
from tessera.passes.convert_tile_to_sm90.common import LoweringError
from text_edits import checked
from unseen_rounds import KERNELS, Case, f64, round_tests, run_case

BF16 = ml_dtypes.bfloat16
F32_U = 2.0**-24  # f32's unit roundoff


# region inputs and references

def _softmax_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 4).astype(BF16)], {}


def _softmax_ref(x):
    x, = f64(x)
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True),)


def _quant_inputs(shape, rng):
    """Rows whose absolute maximum is 127 2^k (so 127 / max is exact in f32) and elements in steps of max / 1016:
    every code x 127 / max is a multiple of 1/8, ties of .5 included, computed exactly at every level; every fifth
    row zeros."""
    m, n = shape
    top = 127.0 * 2.0 ** rng.integers(-3, 4, m)
    x = rng.integers(-1016, 1017, (m, n)) / 1016 * top[:, None]
    x[np.arange(m), rng.integers(0, n, m)] = top * rng.choice([-1, 1], m)
    x[::5] = 0
    return [x.astype(np.float32)], {}


def _quant_ref(x):
    x, = f64(x)
    top = np.abs(x).max(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.nan_to_num(np.clip(np.rint(x * (127 / top)[:, None]), -127, 127))
    return codes, top / 127


def _adam_inputs(shape, rng):
    r, c, t = shape
    p, g, m = (rng.standard_normal((r, c)).astype(np.float32) for _ in range(3))
    v = (rng.random((r, c)) * 0.1).astype(np.float32)
    return [p, g, m, v, np.array([t], np.float32)], {}


def _adam_ref(p, g, m, v, t):
    p, g, m, v, t = f64(p, g, m, v, t)
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    p2 = p - 1e-3 * (m2 / (1 - 0.9 ** t[0]) / (np.sqrt(v2 / (1 - 0.999 ** t[0])) + 1e-8) + 0.01 * p)
    return p2, m2, v2


def _geglu_inputs(shape, rng):
    m, n, k = shape
    return [rng.integers(-3, 4, (m, k)).astype(BF16), (rng.integers(-8, 9, (k, n)) / 16).astype(BF16),
            (rng.integers(-8, 9, (k, n)) / 16).astype(BF16), rng.standard_normal(n).astype(np.float32)], {}


_erf = np.vectorize(math.erf)


def _geglu_ref(a, bg, bu, bias):
    a, bg, bu, bias = f64(a, bg, bu, bias)
    x = a @ bg + bias
    return (x * (1 + _erf(x / math.sqrt(2))) / 2 * (a @ bu),)


def _kl_inputs(shape, rng):
    p = (rng.standard_normal(shape) * 3).astype(np.float32)
    return [p, (p + rng.standard_normal(shape)).astype(np.float32)], {}


def _log_softmax(x):
    top = x.max(1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(1, keepdims=True))


def _kl_ref(p, q):
    lp, lq = (_log_softmax(x) for x in f64(p, q))
    return ((np.exp(lp) * (lp - lq)).sum(1),)


def _gelu_bwd_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(BF16), rng.uniform(-1, 1, shape).astype(BF16)], {}


def _gelu_bwd_ref(x, dy):
    x, dy = f64(x, dy)
    k, c = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(k * (x + c * x**3))
    return ((dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x))),)


def _mish_inputs(shape, rng):
    b, m, n, k = shape
    return [rng.integers(-3, 4, (b, m, k)).astype(BF16), (rng.integers(-8, 9, (b, n, k)) / 8).astype(BF16)], {}


def _mish_ref(x, w):
    x, w = f64(x, w)
    h = x @ np.swapaxes(w, 1, 2)
    softplus = np.where(h > 20, h, np.log1p(np.exp(np.minimum(h, 20))))
    return (h * np.tanh(softplus),)


def _rope_inputs(shape, rng):
    h, t, s = shape
    angle = np.arange(s)[:, None] * 10000.0 ** (-np.arange(64) / 64)
    return [rng.standard_normal((h, t, 128)).astype(BF16), rng.integers(0, s, t).astype(np.int32),
            np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)], {}


def _rope_ref(q, pos, cos, sin):
    q, cos, sin = f64(q, cos, sin)
    c, s = cos[pos], sin[pos]
    q1, q2 = q[..., :64], q[..., 64:]
    return (np.concatenate([q1 * c - q2 * s, q2 * c + q1 * s], -1),)


def _l2_inputs(shape, rng):
    x = rng.standard_normal(shape) * 3
    x[::4] = 0
    return [x.astype(np.float32)], {}


def _l2_ref(x):
    x, = f64(x)
    return (x / np.maximum(np.sqrt((x * x).sum(1, keepdims=True)), 1e-12),)


def _smoothing_inputs(shape, rng):
    m, v = shape
    labels = rng.integers(0, v, m).astype(np.int32)
    labels[::3] = -100
    return [(rng.standard_normal((m, v)) * 4).astype(BF16), labels], {}


def _smoothing_ref(x, labels):
    x, = f64(x)
    top = x.max(1)
    lse = top + np.log(np.exp(x - top[:, None]).sum(1))
    loss = lse - 0.9 * x[np.arange(len(x)), np.maximum(labels, 0)] - 0.1 * x.mean(1)
    return (np.where(labels == -100, 0.0, loss),)


def _moe_inputs(shape, rng):
    """Tokens sorted by expert: each block of 64 rows one expert (sorted, some experts owning none), the last block
    padding (-1) where there are two or more, the one before it past E (its weight and bias read as 0) where there
    are three or more."""
    m, n, k, e = shape
    blocks = -(-m // 64)
    experts = np.sort(rng.integers(0, e, blocks))
    if blocks > 1:
        experts[-1] = -1
    if blocks > 2:
        experts[-2] = e
    return [rng.integers(-3, 4, (m, k)).astype(BF16), experts.astype(np.int32),
            (rng.integers(-8, 9, (e, k, n)) / 8).astype(BF16), rng.standard_normal((e, n)).astype(np.float32)], {}


def _moe_ref(x, experts, w, bias):
    x, w, bias = f64(x, w, bias)
    e = len(w)
    w = np.concatenate([w, np.zeros_like(w[:1])])  # an expert past the table: zeros
    bias = np.concatenate([bias, np.zeros_like(bias[:1])])
    return (np.concatenate([x[64 * b:64 * (b + 1)] @ w[e if i < 0 else i] + bias[e if i < 0 else i]
                            for b, i in enumerate(experts)]),)


def _gather_inputs(shape, rng):
    m, n, e = shape
    blocks = -(-n // 64)
    index = rng.integers(0, e, blocks)
    index[-1] = e if blocks > 1 else index[-1]  # past the tables: reads 0
    return [rng.standard_normal((m, n)).astype(np.float32), index.astype(np.int32),
            rng.standard_normal(e).astype(np.float32), rng.standard_normal((e, m)).astype(np.float32)], {}


def _gather_ref(x, index, s, t):
    x, s, t = f64(x, s, t)
    s, t = np.append(s, 0.0), np.concatenate([t, np.zeros_like(t[:1])])
    columns = np.minimum(index, len(s) - 1)[np.arange(x.shape[1]) // 64]
    return (x * s[columns] + 2 * t[columns].T,)


def _router_inputs(shape, rng):
    m, k = shape
    return [rng.integers(-3, 4, (m, k)).astype(BF16), (rng.integers(-8, 9, (8, k)) / 8).astype(BF16)], {}


def _router_ref(x, w):
    x, w = f64(x, w)
    logits = x @ w.T
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    return p, logits.argmax(1).astype(np.float64), p.max(1)


def _trmm_inputs(shape, rng):
    m, n = shape
    return [rng.integers(-3, 4, (m, m)).astype(BF16), (rng.integers(-8, 9, (m, n)) / 8).astype(BF16)], {}


def _trmm_ref(a, b):
    a, b = f64(a, b)
    return (np.tril(a) @ b,)


def _dropout_inputs(shape, rng):
    m, n, seed = shape
    return [rng.standard_normal((m, n)).astype(np.float32), np.array([seed], np.int32)], {}


def _wrap(v):
    """int64 values as i32 arithmetic leaves them (two's complement)."""
    return (v + 2**31) % 2**32 - 2**31


def _dropout_ref(x, seed):
    i, j = np.indices(x.shape).astype(np.int64)
    h = _wrap(_wrap(_wrap(i * 73856093) + _wrap(j * 19349663)) + int(seed[0]))
    keep = _wrap(h * h) % 1000 < 900
    return np.where(keep, x.astype(np.float32) * np.float32(1.1111111111111112), 0).astype(np.float64), \
        keep.astype(np.float64)


def _bhmk_inputs(shape, rng):
    b, h, m, n, k = shape
    return [rng.integers(-3, 4, (b, h, m, k)).astype(BF16), (rng.integers(-8, 9, (h, k, n)) / 8).astype(BF16)], {}


def _bhmk_ref(x, w):
    x, w = f64(x, w)
    return (np.einsum("bhmk,hkn->bhmn", x, w),)


# endregion

CASES = {
    # ex2.approx on |x - max| < 2^6 (2^-22 + 2^6 2^-23 relative), the f32 sum of N <= 1000 terms (1000 U) and the
    # correctly rounded division: below 2^-13 relative
    "softmax_three_pass": Case("softmax_three_pass", _softmax_inputs, _softmax_ref, 2.0**-13, 2.0**-40,
                               ((70, 130), (3, 1000), (1, 1), (129, 64), (17, 65))),
    # every code and scale exact (the inputs' docstring), ties to even as NumPy's rint
    "int8_row_quant": Case("int8_row_quant", _quant_inputs, _quant_ref, 0.0, 0.0,
                           ((70, 130), (3, 1000), (1, 1), (129, 17))),
    # M', V': a few f32 roundings of terms below 2^3. P': ex2.approx's 2 ulp of b^t cancel in 1 - b2^t = 1e-3 at
    # t = 1 (2^-12 relative in V'/(1 - b2^t), half that through the sqrt), in an update lr |M'/sqrt(V')| below 2^5
    # 1e-3: below 2^-17 absolute
    "adamw_step": Case("adamw_step", _adam_inputs, _adam_ref, 0.0, (2.0**-17, 2.0**-20, 2.0**-24),
                       ((70, 130, 1), (3, 17, 1000), (1, 1, 10), (129, 65, 2))),
    # A B exact (integers times sixteenths), erf within 1.5e-7 (7.1.26) after rcp.approx and ex2.approx, then one
    # bf16 rounding: one bf16 ulp relative, and the erf's error times |x u| < 2^6 absolute
    "gemm_geglu_erf": Case("gemm_geglu_erf", _geglu_inputs, _geglu_ref, 2.0**-8, 2.0**-12,
                           ((70, 130, 72), (1, 1, 1), (3, 17, 7), (65, 64, 129))),
    # two log-sum-exps (lg2.approx's absolute bound, f32 sums), then N terms p (lp - lq) with |lp - lq| < 2^5
    "kl_div_rows": Case("kl_div_rows", _kl_inputs, _kl_ref, 2.0**-20, 2.0**-16,
                        ((70, 130), (3, 1000), (1, 1), (129, 64))),
    # tanh.approx's 2^-11 relative moves 1 - t^2 by 2^-10, times |0.5 x k (1 + 3 c x^2) dy| < 2^3 for |x| < 5,
    # |dy| <= 1; then one bf16 rounding
    "gelu_tanh_bwd": Case("gelu_tanh_bwd", _gelu_bwd_inputs, _gelu_bwd_ref, 2.0**-8, 2.0**-7,
                          ((70, 130), (1, 1), (3, 17), (129, 65))),
    # X W^T exact (integers times eighths), tanh.approx's 2^-11 relative, ex2/lg2 approx on the softplus, one f16
    # rounding (2^-11 relative): 2^-9 relative
    "bmm_linear_mish": Case("bmm_linear_mish", _mish_inputs, _mish_ref, 2.0**-9, 2.0**-14,
                            ((2, 70, 65, 40), (1, 1, 1, 1), (3, 3, 17, 7), (1, 129, 64, 72))),
    # two f32 products and a sum of values below 2^3 (2^-20), then one bf16 rounding
    "rope_neox_positions": Case("rope_neox_positions", _rope_inputs, _rope_ref, 2.0**-8, 2.0**-20,
                                ((2, 70, 17), (1, 1, 1), (3, 3, 1000), (1, 129, 64))),
    # sums of N <= 1000 squares, a correctly rounded sqrt and division, one bf16 rounding
    "l2_normalize_rows": Case("l2_normalize_rows", _l2_inputs, _l2_ref, 2.0**-8, 0.0,
                              ((70, 130), (3, 1000), (1, 1), (129, 64))),
    # the log-sum-exp of values below 2^5 (lg2.approx, ex2.approx, f32 sums), the row's f32 sum of N <= 1000 values
    # below 2^5 divided by N, the label's logit exact
    "xent_label_smoothing": Case("xent_label_smoothing", _smoothing_inputs, _smoothing_ref, 2.0**-20, 2.0**-14,
                                 ((70, 130), (3, 1000), (1, 1), (129, 64))),
    # X W exact (integers times eighths, sums exact in f32), the bias added once: one f32 rounding
    "moe_grouped_gemm": Case("moe_grouped_gemm", _moe_inputs, _moe_ref, F32_U, 0.0,
                             ((200, 130, 72, 3), (1, 1, 1, 1), (130, 17, 7, 5), (257, 64, 64, 2))),
    # a product and two sums: three f32 roundings of values below 2^4
    "gather_at_a_scalar": Case("gather_at_a_scalar", _gather_inputs, _gather_ref, 0.0, 2.0**-18,
                               ((70, 130, 3), (1, 1, 1), (129, 200, 2), (3, 65, 5))),
    # logits exact (integers times eighths); P: ex2.approx on |l - max| < 2^8 (2^-22 + 2^8 2^-23 relative), a sum of
    # 8 terms and a division; the first index of the maximum exact (ties: integer logits tie often); its
    # probability a reciprocal of the sum (rcp.approx's ulp)
    "router_top1": Case("router_top1", _router_inputs, _router_ref, (2.0**-13, 0.0, 2.0**-13), (2.0**-30, 0.0, 2.0**-30),
                        ((70, 37), (200, 72), (1, 1), (3, 7), (129, 8))),
    # tril(A) B exact (integers times eighths, sums exact in f32)
    "trmm_lower": Case("trmm_lower", _trmm_inputs, _trmm_ref, 0.0, 0.0,
                       ((200, 130), (70, 17), (1, 1), (129, 64), (3, 5))),
    # integer hashing exact (wrapping i32), the kept values one f32 product as the reference rounds it
    "dropout_hash": Case("dropout_hash", _dropout_inputs, _dropout_ref, 0.0, 0.0,
                         ((70, 130, 12345), (3, 17, 2147483647), (1, 1, 0), (129, 65, -7))),
    # X W exact (integers times eighths, sums exact in f32)
    "gemm_bhmk": Case("gemm_bhmk", _bhmk_inputs, _bhmk_ref, 0.0, 0.0,
                      ((2, 3, 70, 65, 40), (1, 1, 1, 1, 1), (1, 2, 3, 17, 7), (2, 1, 65, 130, 72))),
}

FAST = {"softmax_three_pass": ("target",), "int8_row_quant": ("ptx",), "adamw_step": ("ptx",),
        "gemm_geglu_erf": ("target",), "kl_div_rows": ("target",), "gelu_tanh_bwd": ("ptx",),
        "bmm_linear_mish": ("tile",), "rope_neox_positions": ("target",), "l2_normalize_rows": ("ptx",),
        "xent_label_smoothing": ("target",), "moe_grouped_gemm": ("target",),
        "gather_at_a_scalar": ("ptx",), "router_top1": ("target",), "trmm_lower": ("tile",),
        "dropout_hash": ("tile", "ptx"), "gemm_bhmk": ("target",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "softmax_three_pass": ["M=70", "N=130"], "int8_row_quant": ["M=70", "N=130"], "adamw_step": ["R=70", "C=130"],
    "gemm_geglu_erf": ["M=70", "N=130", "K=72"], "kl_div_rows": ["M=70", "N=130"],
    "gelu_tanh_bwd": ["M=70", "N=130"], "bmm_linear_mish": ["batch=2", "M=70", "N=65", "K=40"],
    "rope_neox_positions": ["H=2", "T=70", "S=17"], "l2_normalize_rows": ["M=70", "N=130"],
    "xent_label_smoothing": ["M=70", "V=130"], "moe_grouped_gemm": ["M=200", "N=130", "K=72", "E=3", "B=4"],
    "gather_at_a_scalar": ["M=70", "N=130", "E=3", "B=3"], "router_top1": ["M=70", "K=37"],
    "trmm_lower": ["M=200", "N=130"], "dropout_hash": ["M=70", "N=130"],
    "gemm_bhmk": ["B=2", "H=3", "M=70", "N=65", "K=40"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES, fast_shape=0)


# region GPT-2's vocabulary

# the f32 sum of 50,257 terms in any order may move by 50257 U relative (2^-8.4); the other terms as above
VOCAB = Case("softmax_three_pass", _softmax_inputs, _softmax_ref, 2.0**-8, 2.0**-40, ((3, 50257),))


def test_softmax_over_gpt2s_vocabulary():
    run_case(VOCAB, VOCAB.shapes[0], "tile")


@pytest.mark.slow
def test_softmax_over_gpt2s_vocabulary_lowered():
    run_case(VOCAB, VOCAB.shapes[0], "target")

# endregion
# region the verdict of a lowering seeded wrong


def _identity(self, op, e):
    """An op dropped: its result is its first operand's registers."""
    self._set(op.result, self._get(op.operands[0]))


def _off_by_one_compare(self, op, e):
    """`lt` lowered as `le`, `ge` as `gt`, `eq` as `ne`: a bound off by one, a label test inverted."""
    predicate = {"lt": "le", "ge": "gt", "eq": "ne"}.get(op.predicate.data, op.predicate.data)
    a, b = (self._broadcast_operand(op, v, op.result.type, e) for v in (op.lhs, op.rhs))
    self._set(op.result, e.setp(predicate, a, b))


def _swapped_select(self, op, e):
    c, a, b = (self._broadcast_operand(op, v, op.result.type, e) for v in (op.condition, op.lhs, op.rhs))
    self._set(op.result, e.select(c, b, a))


def _z_as_x(self, op, e):
    from tessera.dialects import sm90

    axis = {"z": "x"}.get(op.axis.data, op.axis.data)
    self._set(op.result, e.op(sm90.SpecialRegOp(f"ctaid.{axis}")))


SEEDS = {  # kernel: (what is seeded, the KernelLowering method replaced and its replacement, or None and the f32
    # binary op lowered as another)
    "softmax_three_pass": ("compare off by one", "_lower_CmpOp", _off_by_one_compare),
    "int8_row_quant": ("tile.abs dropped", "_lower_AbsOp", _identity),
    "adamw_step": ("tile.exp2 dropped", "_lower_Exp2Op", _identity),
    "gemm_geglu_erf": ("tile.reciprocal dropped", "_lower_ReciprocalOp", _identity),
    "kl_div_rows": ("tile.log dropped", "_lower_LogOp", _identity),
    "gelu_tanh_bwd": ("tile.tanh dropped", "_lower_TanhOp", _identity),
    "bmm_linear_mish": ("select arms swapped", "_lower_SelectOp", _swapped_select),
    "rope_neox_positions": ("f32 subtraction lowered as addition", None, ("SubOp", arith.AddfOp)),
    "l2_normalize_rows": ("tile.sqrt dropped", "_lower_SqrtOp", _identity),
    "xent_label_smoothing": ("compare off by one", "_lower_CmpOp", _off_by_one_compare),
    "moe_grouped_gemm": ("f32 addition lowered as subtraction", None, ("AddOp", arith.SubfOp)),
    "gather_at_a_scalar": ("f32 product lowered as addition", None, ("MulOp", arith.AddfOp)),
    "router_top1": ("tile.reciprocal dropped", "_lower_ReciprocalOp", _identity),
    "trmm_lower": ("select arms swapped", "_lower_SelectOp", _swapped_select),
    "dropout_hash": ("compare off by one", "_lower_CmpOp", _off_by_one_compare),
    "gemm_bhmk": ("program id z read as x (the batch as the row block)", "_lower_ProgramIdOp", _z_as_x),
}


RACING_SEEDS = {"gemm_bhmk"}
"""Seeds whose wrong lowering makes two blocks write one element: the check stops at the race, located."""


def test_every_case_has_a_seeded_bug():
    assert sorted(SEEDS) == sorted(CASES)


@pytest.mark.parametrize("kernel", SEEDS)
def test_a_lowering_seeded_wrong_is_a_mismatch(kernel, monkeypatch):
    """`tessera-run --check` against the kernel's own Tile IR in float64 exits 1 and says MISMATCH, counting the
    elements beyond their tolerance, when one op's lowering is seeded wrong (or, where the seed makes blocks write
    each other's elements, stops at that race): not a false ok."""
    from tessera.passes.convert_tile_to_sm90 import elementwise
    from tessera.passes.convert_tile_to_sm90.kernel import KernelLowering

    _, method, replacement = SEEDS[kernel]
    if method is None:
        op, lowered = replacement
        monkeypatch.setitem(elementwise._FLOAT_BINARY, getattr(elementwise.tile, op), lowered)
    else:
        monkeypatch.setattr(KernelLowering, method, replacement)
    arguments = [arg for size in TOOL_SIZES[kernel] for arg in ("-d", size)]
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(KERNELS / f"{kernel}.mlir"),
                            "--level", "target", "--check", *arguments])
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout + result.stderr
    if kernel in RACING_SEEDS:  # blocks that write each other's elements: the CTA simulator stops at the race
        assert "race" in result.stderr and re.search(rf"{kernel}.mlir:\d+:\d+", result.stderr), output
    else:
        assert "MISMATCH" in output and "beyond their tolerance" in output, output
    assert "Traceback" not in result.stderr

# endregion
# region an scf.if around a K loop of copies


def _moe_branching():
    """The MoE kernel skipping its padding with an scf.if around the K loop, as a user first writes it."""
    text = checked((KERNELS / "moe_grouped_gemm.mlir").read_text()).replace(
        "    %n_k = arith.select %padding, %c0, %n_k_all : index\n",
        "    %acc = scf.if %padding -> (!tile.tile<64x64xf32, register>) {\n"
        "      %none_acc = tile.fill 0.0 : !tile.tile<64x64xf32, register>\n"
        "      scf.yield %none_acc : !tile.tile<64x64xf32, register>\n"
        "    } else {\n"
        "    %n_k = arith.addi %n_k_all, %c0 : index\n").replace(
        "    %acc = scf.for %j", "    %prod = scf.for %j").replace(
        "    %ev = tile.splat %e", "    scf.yield %prod : !tile.tile<64x64xf32, register>\n    }\n    %ev = tile.splat %e")
    return str(text)


def test_a_loop_of_copies_inside_an_scf_if_is_refused_by_name(tmp_path):
    """Right at Tile level; below it refused at the commit's line (a copy group committed inside a branch), by
    `tessera.launch` and by `tessera-run` (exit 1, no traceback). The kernel as kept runs zero trips instead."""
    text = _moe_branching()
    module = tessera.parse_module(text, "k.mlir")
    shape = (200, 130, 72, 3)
    arrays, _ = _moe_inputs(shape, np.random.default_rng(0))
    np.testing.assert_allclose(tessera.launch(module, *arrays, level="tile"), _moe_ref(*arrays)[0], rtol=F32_U)
    message = "tile.cp_commit_group: copy groups of unstaged tiles cannot be committed inside an scf.if"
    with pytest.raises(LoweringError, match=rf"k.mlir:\d+:\d+: kernel @moe_grouped_gemm: .*{re.escape(message)}"):
        tessera.launch(module, *arrays, level="target")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "target",
                            *[arg for size in TOOL_SIZES["moe_grouped_gemm"] for arg in ("-d", size)]])
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert re.search(r"k.mlir:\d+:\d+", result.stderr) and "Traceback" not in result.stderr, result.stderr

# endregion
# region a shared tile read back into registers

SHARED_READ_BACK = """
builtin.module {
  func.func @relu_through_shared(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, K>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(K, 64)>} {
    %c64 = arith.constant 64 : index
    %bm = tile.program_id x : index
    %bk = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %k0 = arith.muli %bk, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %aw = tile.view %A[%m0, %k0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %ah = tile.load %a_smem : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
    %a = tile.cast %ah : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %k0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %a, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


def test_a_shared_tile_read_into_registers_runs_at_every_level(tmp_path):
    """A prologue on a tile copied to shared memory, read back with `tile.load` (tile-ir.md's table promised it;
    refused below Tile level by name until loadshared24): right at every level and through `tessera-run`."""
    module = tessera.parse_module(SHARED_READ_BACK, "k.mlir")
    a = np.random.default_rng(0).integers(-3, 4, (70, 130)).astype(BF16)
    for level in ("tile", "target", "ptx"):
        np.testing.assert_array_equal(tessera.launch(module, a, level=level), a.astype(np.float32))
    path = tmp_path / "k.mlir"
    path.write_text(SHARED_READ_BACK)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "ptx",
                            "-d", "M=70", "-d", "K=130"])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr

# endregion
