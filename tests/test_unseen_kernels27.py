"""Kernels a user writes next, round 27 (`tests/user_kernels/*.mlir`, not earlier rounds'): SwiGLU's backward
(`swiglu_bwd.mlir`), log-softmax's backward over a vocabulary (`logsoftmax_bwd.mlir`), a squared-ReLU GEMM in f16
with a bf16 output and fused row sums added across column blocks (`gemm_relu2_rowsum.mlir`), greedy decoding's
token, log-sum-exp and log-probability under Gemma 2's soft-cap in one online pass (`greedy_softcap.mlir`),
LayerNorm over rows of any length in f16 with bf16 parameters (`layernorm_any_f16.mlir`), RMSNorm's backward with
dW by `tile.col_sum` and atomics (`rmsnorm_bwd_colsum.mlir`), masked mean pooling with an i32 token count
(`masked_mean_pool.mlir`), a mean and variance finished by the grid's last block (`global_moments.mlir`), the
embedding table's gradient by `tile.scatter_add` (`embedding_bwd.mlir`) and cross-entropy's loss and bf16 logit
gradient in one kernel (`xent_fused_bf16.mlir`) and a linear layer with a rank-16 LoRA adapter fused in
(`lora_gemm.mlir`), a GEMM that skips the K blocks a mask empties (`block_sparse_gemm.mlir`), each on sizes of 1, 7, 33, 100 and 257 against a float64 NumPy
reference of its own.

The default run takes each kernel at Tile level and a small shape at PTX level; `-m slow` runs every level on
every shape, every ptxas found (no warning, no spill) and `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from unseen_rounds import Case, f64, round_tests

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


def _lora_inputs(shape, rng):
    m, n, k = shape
    x = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(BF16)
    la = (rng.standard_normal((k, 16)) / np.sqrt(k)).astype(BF16)
    return [x, w, la, (rng.standard_normal((16, n)) / 4).astype(BF16)], {}


def _lora_ref(x, w, la, lb):
    """X LA rounded to f32 then to bf16, as the kernel rounds its accumulator (a different f32 sum may round it to
    the neighbouring bf16: a few 2^-8 |X LA| |LB| at most, inside the bound's absolute term)."""
    x, w, la, lb = f64(x, w, la, lb)
    xa = (x @ la).astype(np.float32).astype(BF16).astype(np.float64)
    return (x @ w + 2 * xa @ lb,)


def _sparse_inputs(shape, rng):
    """A mask of K blocks per row block, about half kept (nonzero: 1 or -3)."""
    m, n, k = shape
    blocks = (-(-m // 64), -(-k // 64))
    mask = rng.integers(0, 2, blocks) * rng.choice(np.array([1, -3]), blocks)
    return [rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16),
            mask.astype(np.int32)], {}


def _sparse_ref(a, b, mask):
    m, k = a.shape
    kept = np.repeat(np.repeat(mask != 0, 64, 0), 64, 1)[:m, :k]
    return (np.where(kept, a.astype(np.float64), 0) @ b.astype(np.float64),)


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
    # bf16 products exact, f32 sums over K; Y rounded once to bf16
    "lora_gemm": Case("lora_gemm", _lora_inputs, _lora_ref, 1.05 * BF16_HALF_ULP, 1e-2,
                      ((100, 70, 33), (1, 1, 1), (70, 64, 128), (33, 257, 72))),
    # bf16 products exact, f32 sums over at most K terms of size ~1
    "block_sparse_gemm": Case("block_sparse_gemm", _sparse_inputs, _sparse_ref, 1e-5, 1e-4,
                              ((100, 70, 200), (1, 1, 1), (130, 64, 64), (64, 33, 257), (200, 136, 512))),
    "xent_fused_bf16": Case("xent_fused_bf16", _xent_inputs, _xent_ref, (1e-6, BF16_HALF_ULP), (1e-5, 1e-6),
                            ((100, 257), (1, 1), (7, 1000), (65, 33))),
}

FAST = {"swiglu_bwd": ("tile", "ptx"), "logsoftmax_bwd": ("tile", "ptx"), "gemm_relu2_rowsum": ("tile",),
        "greedy_softcap": ("tile", "ptx"), "layernorm_any_f16": ("tile",), "rmsnorm_bwd_colsum": ("tile",),
        "masked_mean_pool": ("tile",), "global_moments": ("tile", "target", "ptx"), "embedding_bwd": ("tile", "ptx"),
        "xent_fused_bf16": ("tile",), "lora_gemm": ("tile",),
        "block_sparse_gemm": ("tile", "ptx")}

TOOL_SIZES = {"swiglu_bwd": ["M=70", "N=33"], "logsoftmax_bwd": ["M=65", "N=100"],
              "gemm_relu2_rowsum": ["M=70", "N=33", "K=20"], "greedy_softcap": ["M=7", "V=257"],
              "layernorm_any_f16": ["M=65", "N=100"], "rmsnorm_bwd_colsum": ["M=70", "N=100"],
              "masked_mean_pool": ["B=3", "S=70", "D=33"], "global_moments": ["M=200", "N=33"],
              "embedding_bwd": ["M=130", "V=7", "D=33"], "xent_fused_bf16": ["M=65", "V=300"],
              "lora_gemm": ["M=70", "N=72", "K=136"], "block_sparse_gemm": ["M=130", "N=33", "K=200"]}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)
