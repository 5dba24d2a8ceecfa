"""Kernels a user writes next, round 27 (`tests/user_kernels/*.mlir`, not earlier rounds'): SwiGLU's backward
(`swiglu_bwd.mlir`), log-softmax's backward over a vocabulary (`logsoftmax_bwd.mlir`), a squared-ReLU GEMM in f16
with a bf16 output and fused row sums added across column blocks (`gemm_relu2_rowsum.mlir`), greedy decoding's
token, log-sum-exp and log-probability under Gemma 2's soft-cap in one online pass (`greedy_softcap.mlir`),
LayerNorm over rows of any length in f16 with bf16 parameters (`layernorm_any_f16.mlir`), RMSNorm's backward with
dW by `tile.col_sum` and atomics (`rmsnorm_bwd_colsum.mlir`), masked mean pooling with an i32 token count
(`masked_mean_pool.mlir`), a mean and variance finished by the grid's last block (`global_moments.mlir`), the
embedding table's gradient by `tile.scatter_add` (`embedding_bwd.mlir`) and cross-entropy's loss and bf16 logit
gradient in one kernel (`xent_fused_bf16.mlir`), each on sizes of 1, 7, 33, 100 and 257 against a float64 NumPy
reference of its own.

The default run takes each kernel at Tile level and a small shape at PTX level; `-m slow` runs every level on
every shape, every ptxas found (no warning, no spill) and `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxHazardError
from xdsl.utils.exceptions import VerifyException
from unseen_rounds import KERNELS, LEVELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F32_EPS = 2.0**-24


def _swiglu_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 3).astype(np.float32) for _ in range(3)], {}


def _swiglu_ref(g, u, dy):
    g, u, dy = f64(g, u, dy)
    s = 1 / (1 + np.exp(-g))
    return dy * u * s * (1 + g * (1 - s)), dy * g * s


def _logsoftmax_bwd_inputs(shape, rng):
    m, n = shape
    x = rng.standard_normal((m, n)) * 2
    y = x - x.max(1, keepdims=True)
    y = y - np.log(np.exp(y).sum(1, keepdims=True))
    return [y.astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)], {}


def _logsoftmax_bwd_ref(y, dy):
    y, dy = f64(y, dy)
    return (dy - np.exp(y) * dy.sum(1, keepdims=True),)


def _relu2_inputs(shape, rng):
    m, n, k = shape
    a = (rng.standard_normal((m, k)) / 2).astype(np.float16)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    return [a, b, (rng.standard_normal(n) / 4).astype(BF16)], {}


def _relu2_ref(a, b, bias):
    a, b, bias = f64(a, b, bias)
    h = np.maximum(a @ b + bias, 0) ** 2
    return h, h.sum(1)


def _greedy_inputs(shape, rng):
    """Logits in quarter steps (ties for the first index to break) and a few past the cap's knee (|x| > 30)."""
    m, v = shape
    x = np.round(rng.standard_normal((m, v)) * 16) / 4
    x[:, ::7] *= 12
    return [x.astype(np.float32)], {}


def _greedy_ref(x):
    z = 30 * np.tanh(x.astype(np.float64) / 30)
    top = z.max(1)
    lse = top + np.log(np.exp(z - top[:, None]).sum(1))
    return np.argmax(x, 1).astype(np.float64), lse, top - lse


def _layernorm_inputs(shape, rng):
    """Rows with a large mean beside their spread (the two-pass variance keeps it)."""
    m, n = shape
    x = (rng.standard_normal((m, n)) + 20 * rng.standard_normal((m, 1))).astype(np.float16)
    return [x, rng.standard_normal(n).astype(BF16), rng.standard_normal(n).astype(BF16)], {}


def _layernorm_ref(x, gamma, beta):
    x, gamma, beta = f64(x, gamma, beta)
    mean = x.mean(1)
    rstd = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(1) + 1e-5)
    return (x - mean[:, None]) * rstd[:, None] * gamma + beta, mean, rstd


def _rmsnorm_bwd_inputs(shape, rng):
    m, n = shape
    x = rng.standard_normal((m, n)).astype(BF16)
    rstd = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(1) + 1e-6)
    return [rng.standard_normal((m, n)).astype(np.float32), x, rng.standard_normal(n).astype(np.float32),
            rstd.astype(np.float32)], {}


def _rmsnorm_bwd_ref(dy, x, w, rstd):
    dy, x, w, rstd = f64(dy, x, w, rstd)
    xhat = x * rstd[:, None]
    g = dy * w
    return rstd[:, None] * (g - xhat * (g * xhat).mean(1, keepdims=True)), (dy * xhat).sum(0)


def _pool_inputs(shape, rng):
    """Sequences padded at the end to random lengths, one of them empty, and a mask with a stray 2 and -1."""
    b, s, d = shape
    lengths = rng.integers(0, s + 1, b)
    lengths[0] = 0 if b > 1 else lengths[0]
    mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int32)
    mask[mask != 0] *= rng.choice(np.array([1, 2, -1], np.int32), int(mask.sum()))
    return [rng.standard_normal((b, s, d)).astype(np.float32), mask], {}


def _pool_ref(x, mask):
    keep = (mask != 0).astype(np.float64)
    count = keep.sum(1)
    return (np.einsum("bs,bsd->bd", keep, x.astype(np.float64)) / np.maximum(count, 1)[:, None], count)


def _moments_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(np.float32)], {}


def _moments_ref(x):
    x = x.astype(np.float64)
    return np.array([x.mean()]), np.array([x.var()])


def _embedding_inputs(shape, rng):
    """Token ids with repeats and padding (-1: outside the table), the vocabulary given at launch."""
    m, v, d = shape
    return [rng.integers(-1, v, m).astype(np.int32), rng.standard_normal((m, d)).astype(np.float32)], {"V": v}


def _embedding_ref(idx, dy, v):
    de = np.zeros((v, dy.shape[1]))
    keep = idx >= 0
    np.add.at(de, idx[keep], dy[keep].astype(np.float64))
    return (de,)


def _xent_inputs(shape, rng):
    """bf16 logits, labels with every fifth row ignored (-100), and the count of the others."""
    m, v = shape
    labels = rng.integers(0, v, m).astype(np.int32)
    labels[::5] = -100
    count = np.array([max(int((labels != -100).sum()), 1)], np.float32)
    return [(rng.standard_normal((m, v)) * 3).astype(BF16), labels, count], {}


def _xent_ref(x, labels, count):
    x = x.astype(np.float64)
    top = x.max(1, keepdims=True)
    lse = (top + np.log(np.exp(x - top).sum(1, keepdims=True)))[:, 0]
    ignored = labels == -100
    rows = np.arange(len(x))
    loss = np.where(ignored, 0, lse - x[rows, np.where(ignored, 0, labels)])
    dx = (np.exp(x - lse[:, None]) - (np.arange(x.shape[1])[None, :] == labels[:, None])) / float(count[0])
    return loss, np.where(ignored[:, None], 0, dx)


BF16_HALF_ULP = 2.0**-8

CASES = {
    # sigmoid/silu below Tile IR: ex2.approx and rcp.approx (a few 2^-22) on g up to ~15 and the f32 products
    "swiglu_bwd": Case("swiglu_bwd", _swiglu_inputs, _swiglu_ref, (1e-5, BF16_HALF_ULP + 1e-5), (1e-5, 1e-5),
                       ((100, 70), (1, 1), (7, 257), (33, 100))),
    # exp of log-probabilities <= 0 (ex2.approx) times a sum of N f32 terms of size ~1: N 2^-24 sqrt(N)-ish
    "logsoftmax_bwd": Case("logsoftmax_bwd", _logsoftmax_bwd_inputs, _logsoftmax_bwd_ref, 1e-5, 1e-4,
                           ((100, 257), (1, 1), (7, 1000), (65, 33))),
    # f16 products exact, f32 accumulation over K; C rounded once to bf16
    "gemm_relu2_rowsum": Case("gemm_relu2_rowsum", _relu2_inputs, _relu2_ref, (BF16_HALF_ULP, 1e-5), (1e-5, 1e-4),
                              ((100, 70, 33), (1, 1, 1), (7, 257, 100), (64, 64, 64), (33, 8, 16))),
    # exact indices; tanh.approx (2^-11 relative) on z up to 30: the sum of exp moves by 30 2^-11 relative at most
    "greedy_softcap": Case("greedy_softcap", _greedy_inputs, _greedy_ref, (0.0, 0.0, 0.0), (0.0, 0.05, 0.05),
                           ((100, 257), (1, 1), (7, 1000), (65, 33))),
    # rsqrt.approx (2^-22.9), sums of N f32 terms of |x| ~ 20; Y rounded once to bf16
    "layernorm_any_f16": Case("layernorm_any_f16", _layernorm_inputs, _layernorm_ref,
                              (BF16_HALF_ULP, 1e-6, 1e-5), (1e-3, 1e-5, 1e-3),
                              ((100, 257), (1, 1), (7, 33), (65, 100), (3, 1000))),
    # f32 products and row/column sums of <= 128 and M terms; DX rounded once to bf16
    "rmsnorm_bwd_colsum": Case("rmsnorm_bwd_colsum", _rmsnorm_bwd_inputs, _rmsnorm_bwd_ref,
                               (BF16_HALF_ULP, 1e-5), (1e-5, 1e-3), ((100, 100), (1, 1), (257, 7), (33, 128))),
    # f32 sums of S terms, one division; counts exact
    "masked_mean_pool": Case("masked_mean_pool", _pool_inputs, _pool_ref, (1e-5, 0.0), (1e-5, 0.0),
                             ((3, 100, 70), (1, 1, 1), (2, 257, 7), (4, 33, 130))),
    # f32 sums of M N terms of size ~1 in any order, one division; E[x^2] - mean^2 with a mean near 0
    "global_moments": Case("global_moments", _moments_inputs, _moments_ref, 1e-5, 1e-5,
                           ((100, 33), (1, 1), (257, 64), (64, 7))),
    # f32 sums of the rows sharing an id, in any order
    "embedding_bwd": Case("embedding_bwd", _embedding_inputs, _embedding_ref, 1e-6, 1e-5,
                          ((100, 7, 70), (1, 1, 1), (257, 33, 5), (64, 1, 64))),
    # the log-sum-exp's sums of V exponentials (ex2.approx, lg2.approx); DX rounded once to bf16, p - 1 near the
    # label cancels to f32's absolute error over n
    "xent_fused_bf16": Case("xent_fused_bf16", _xent_inputs, _xent_ref, (1e-6, BF16_HALF_ULP), (1e-5, 1e-6),
                            ((100, 257), (1, 1), (7, 1000), (65, 33))),
}

FAST = {"swiglu_bwd": ("tile", "ptx"), "logsoftmax_bwd": ("tile", "ptx"), "gemm_relu2_rowsum": ("tile",),
        "greedy_softcap": ("tile", "ptx"), "layernorm_any_f16": ("tile",), "rmsnorm_bwd_colsum": ("tile",),
        "masked_mean_pool": ("tile",), "global_moments": ("tile", "target", "ptx"), "embedding_bwd": ("tile", "ptx"),
        "xent_fused_bf16": ("tile",)}

TOOL_SIZES = {"swiglu_bwd": ["M=70", "N=33"], "logsoftmax_bwd": ["M=65", "N=100"],
              "gemm_relu2_rowsum": ["M=70", "N=33", "K=20"], "greedy_softcap": ["M=7", "V=257"],
              "layernorm_any_f16": ["M=65", "N=100"], "rmsnorm_bwd_colsum": ["M=70", "N=100"],
              "masked_mean_pool": ["B=3", "S=70", "D=33"], "global_moments": ["M=200", "N=33"],
              "embedding_bwd": ["M=130", "V=7", "D=33"], "xent_fused_bf16": ["M=65", "V=300"]}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


# A sum read back in the launch that adds it up. `global_moments.mlir` reads it in its last block after a semaphore
# every other block signalled after adding: clean at every level (the CTA simulator and the PTX executor reported
# it, by a rule that read no happens-before: any load of a word other CTAs add into). Without that order it is a
# race everywhere, the Tile interpreter included (it ran such kernels in its own block order, silently).
MOMENTS = (KERNELS / "global_moments.mlir").read_text()
ADDS = """    tile.atomic_add %t, %s0w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    %s1w = tile.view %S[%c1] : !tile.tile<2xf32, global> -> !tile.tile<1xf32, global>
    tile.atomic_add %t2, %s1w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
"""
WAIT = "      tile.sem_wait %cnt, %last : !tile.tile<1xi32, global>\n"
SIGNAL = "    } else {\n      tile.sem_signal %cnt : !tile.tile<1xi32, global>\n    }\n"
UNORDERED = {
    # no semaphore at all: the last block reads while the others add
    "no semaphore": MOMENTS.replace(WAIT, "").replace(SIGNAL, "    }\n"),
    # the others signal before they add: the wait orders nothing of theirs
    "signal first": MOMENTS.replace(ADDS, ADDS.splitlines(keepends=True)[1]).replace(
        SIGNAL, SIGNAL.replace("    }\n", "") + "".join("  " + line for line in ADDS.splitlines(keepends=True)
                                                       if "atomic_add" in line) + "    }\n"),
}
HAZARDS = {"tile": "reads S\\[0\\], which several other blocks add into",
           "target": "reads the reduction target tensor %S_ptr at byte offset 0, which (several other CTAs|CTA)",
           "ptx": "reads global address 0x[0-9a-f]+, which (several other CTAs|CTA .*) adds? into in this launch"}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("variant", UNORDERED)
def test_a_sum_read_before_every_addition_is_ordered_is_reported(variant, level):
    """Each variant changes the kernel it names (and still parses); a semaphore kernel's Tile level is not
    checked (docs/interpreters.md), so "signal first" is reported below it only."""
    text = UNORDERED[variant]
    assert text != MOMENTS and text.count("tile.atomic_add %") == 2
    module = tessera.parse_module(text, "moments.mlir")
    x = np.random.default_rng(0).standard_normal((200, 33)).astype(np.float32)
    if variant == "signal first" and level == "tile":
        tessera.launch(module, x, level=level)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((KernelHazardError, PtxHazardError), match=HAZARDS[level]):
            tessera.launch(module, x, level=level)


SUMS = """
builtin.module {{
  func.func @sums(%X: !tile.tile<?xf32, global> {{tile.dims = #tile.dims<M>}},
      %S: !tile.tile<64xf32, global> {{tile.dims = #tile.dims<64>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %x = tile.load %xw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %sw = tile.view %S[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
{body}
    func.return
  }}
}}
"""
ADD = "    tile.atomic_add %x, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>"


@pytest.mark.parametrize("body, message", [
    # every block reads the running sum, then adds: another block's addition may come before or after the read
    ("    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>\n" + ADD,
     r"tile.atomic_add .*: adds into S\[0\], which several other blocks read too: blocks run in no order"),
    # block 0 stores the zeros the others add into
    ("    %z = tile.fill 0.0 : !tile.tile<64xf32, register>\n    %first = arith.cmpi eq, %b, %c0 : index\n"
     "    scf.if %first {\n      tile.store_global %z, %sw : !tile.tile<64xf32, register>, "
     "!tile.tile<64xf32, global>\n    }\n" + ADD,
     r"adds into S\[0\], which block \(0, 0, 0\) stores too"),
    ("    %z = tile.fill 0.0 : !tile.tile<64xf32, register>\n" + ADD + "\n    %last = arith.cmpi eq, %b, %c64 : index\n"
     "    scf.if %last {\n      tile.store_global %z, %sw : !tile.tile<64xf32, register>, "
     "!tile.tile<64xf32, global>\n    }\n",
     r"tile.store_global .*: writes S\[0\], which several other blocks add into"),
])
def test_tile_level_orders_reads_and_stores_against_additions(body, message):
    """A tensor some block adds into is judged at Tile level as below it: another block's read or store of an
    element and the addition are unordered (blocks of one batch run each op together: the read comes first)."""
    module = tessera.parse_module(SUMS.format(body=body), "sums.mlir")
    with pytest.raises(KernelHazardError, match=message):
        tessera.launch(module, np.ones(65 * 64, np.float32), level="tile")


def test_a_block_reads_back_its_own_additions():
    """One block adding and reading the sum is ordered by its own program order: no hazard, the sum."""
    body = ADD + "\n    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>"
    module = tessera.parse_module(SUMS.format(body=body), "sums.mlir")
    np.testing.assert_array_equal(tessera.launch(module, np.arange(64, dtype=np.float32), level="tile"),
                                  np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("old, new, message", [
    # an i32 count added across blocks: atomics add f32 (count in f32, exact below 2^24)
    ("    tile.atomic_add %t, %s0w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>",
     "    %ti = tile.cast %t : !tile.tile<1x1xf32, register> -> !tile.tile<1x1xi32, register>\n"
     "    tile.atomic_add %ti, %cnt0 : !tile.tile<1x1xi32, register>, !tile.tile<1xi32, global>",
     r"moments.mlir:\d+:\d+: kernel @global_moments: 'tile.atomic_add' op value must be f32 \(additions are f32\), got i32"),
    # a one-element window read into a [1, 1] tile by tile.load: the op that broadcasts is named
    ("%s0 = tile.load_broadcast %s0w", "%s0 = tile.load %s0w",
     r"moments.mlir:\d+:\d+: kernel @global_moments: 'tile.load' op source and result shapes must match "
     r"\(tile.load_broadcast reads the 1-D window into \[1, 1\]\)"),
    # an output sized by a size no input has and the kernel does not take at launch (tile.launch_sizes)
    ("      %S: !tile.tile<2xf32, global>", '      %E: !tile.tile<?xf32, global> {tile.dims = #tile.dims<K>, tile.role = "out"},\n'
     "      %S: !tile.tile<2xf32, global>",
     r"moments.mlir:\d+:\d+: kernel @global_moments: out argument %E uses sizes no input defines: \['K'\]"),
])
def test_refused_by_name_where_written(old, new, message):
    """Ops outside their documented domain and a kernel that cannot be sized are refused at their line."""
    first = "    %m0 = arith.muli %b, %c64 : index\n"
    text = MOMENTS.replace(first, first + "    %cnt0 = tile.view %CNT[%c0] : !tile.tile<1xi32, global> -> "
                           "!tile.tile<1xi32, global>\n").replace(old, new)
    assert old in MOMENTS
    with pytest.raises(VerifyException, match=message):
        tessera.parse_module(text, "moments.mlir")
