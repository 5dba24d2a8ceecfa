"""The kernel gallery (`examples/kernels/`, docs/gallery.md): each kernel is run at every level (the Tile
interpreter, the CTA simulator, the PTX executor) through `tessera.launch` on small shapes with a partial last
block, and compared with its NumPy reference below (float64; each states its tolerance and why). Each kernel
also assembles with ptxas (no warning, no spill), and `tessera-run FILE --level ptx --check` passes on it."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.sm90 import approx

KERNELS = Path(__file__).resolve().parent.parent / "examples" / "kernels"
LEVELS = ("tile", "target", "ptx")
F32_ULP = 2.0**-23
BF16 = ml_dtypes.bfloat16
TANH = approx.approx_relative_error("tanh")
RSQRT = approx.approx_relative_error("rsqrt")


def _kernel(name: str):
    return tessera.parse_module((KERNELS / f"{name}.mlir").read_text())


def _launch(name, *inputs, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        return tessera.launch(_kernel(name), *inputs, level=level).astype(np.float64)


def _close(got, expected, rtol, atol=0.0):
    """Equal -inf entries, and the finite ones within atol + rtol |expected| (atol may be an array)."""
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))
    finite = np.isfinite(expected)
    atol = np.broadcast_to(atol, expected.shape)[finite]
    err = np.abs(got[finite] - expected[finite])
    bound = atol + rtol * np.abs(expected[finite])
    assert np.all(err <= bound), f"max error {err.max():.3g}, worst excess {(err - bound).max():.3g}"


def _f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


# region references (float64)


def softmax_ref(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def online_softmax_ref(x):
    m = x.max(1, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(1, keepdims=True)
    return e / s, (m + np.log(s))[:, 0]


def rmsnorm_ref(x, w):
    return x / np.sqrt((x**2).mean(1, keepdims=True) + 1e-5) * w


def layernorm_ref(x, gamma, beta):
    xc = x - x.mean(1, keepdims=True)
    return xc / np.sqrt((xc**2).mean(1, keepdims=True) + 1e-5) * gamma + beta


def silu(x):
    return x / (1 + np.exp(-x))


def gemm_softcap_ref(a, b):
    capped = 16 * np.tanh(a @ b / 16)
    i, j = np.indices(capped.shape)
    return np.where(j > i, -np.inf, silu(capped))


def gemm_bias_gelu_ref(a, b, bias):
    x = a @ b + bias
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def swiglu_ref(a, bg, bu):
    return silu(a @ bg) * (a @ bu)


def b2b_gemm_ref(a, b0, b1):
    h = (a @ b0).astype(BF16).astype(np.float64)  # the intermediate is bf16 between the two mmas
    return h @ b1


def alibi_ref(x, heads):
    slope = 2.0 ** (-8 * (np.arange(heads) + 1) / heads)
    d = np.abs(np.arange(x.shape[0])[:, None] - np.arange(64)[None, :])
    return np.concatenate([np.where(d > 8, -np.inf, x[:, 64 * h: 64 * h + 64] - s * d)
                           for h, s in enumerate(slope)], axis=1)


def cross_entropy_ref(x, labels):
    top = x.max(axis=1)
    lse = top + np.log(np.exp(x - top[:, None]).sum(axis=1))
    return np.where(labels < 0, 0.0, lse - x[np.arange(len(x)), np.maximum(labels, 0)])


def rope_ref(x, f):
    """RoPE of the kernel's theta: the f32 product of the position and the frequency (exact position, one
    rounding), then cos and sin in float64."""
    theta = (np.arange(len(x), dtype=np.float32)[:, None] * f.astype(np.float32)).astype(np.float64)
    x1, x2 = x[:, :32], x[:, 32:]
    return np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta), x2 * np.cos(theta) + x1 * np.sin(theta)], axis=1), \
        theta


def bias_grad_ref(dy):
    return dy.sum(axis=0)


def attention_ref(q, k, v, scores):
    """softmax(scores(q k^T)) v with -inf scores hidden."""
    s = scores(q @ k.T)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


def softcap_attention_ref(q, k, v):
    return attention_ref(q, k, v, lambda s: 20 * np.tanh(s / 8 / 20))


def sliding_window_attention_ref(q, k, v, window=32):
    def scores(s):
        d = np.arange(s.shape[0])[:, None] - np.arange(s.shape[1])[None, :]
        return np.where((d < 0) | (d >= window), -np.inf, s / 8)
    return attention_ref(q, k, v, scores)


# endregion
# region every kernel at every level


@pytest.mark.parametrize("level", LEVELS)
def test_softmax(level):
    x = (np.random.default_rng(0).standard_normal((100, 64)) * 4).astype(np.float32)
    x[3] = -np.inf  # a row with all -inf but one finite entry
    x[3, 7] = 1.0
    # ex2.approx per term and f32 sums: a few times the ex2 bound, relative to the row's largest value
    _close(_launch("softmax", x, level=level), softmax_ref(*_f64(x)), rtol=0, atol=2.0**-19)


@pytest.mark.parametrize("level", LEVELS)
def test_online_softmax(level):
    x = (np.random.default_rng(11).standard_normal((70, 200)) * 3).astype(np.float32)  # 4 column blocks, the last partial
    x[5, 150:] = 40.0  # the row's max in the last blocks: the running sum is rescaled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, lse = tessera.launch(_kernel("online_softmax"), x, level=level)
    y_ref, lse_ref = online_softmax_ref(*_f64(x))
    # ex2.approx per term (2 ulp) and f32 sums of 200 terms, relative to the row's largest value (1 after the
    # division); the LSE adds lg2.approx's bound on log(l) and the f32 add of m
    _close(y.astype(np.float64), y_ref, rtol=0, atol=2.0**-19)
    _close(lse.astype(np.float64), lse_ref, rtol=2.0**-21, atol=2.0**-19)


@pytest.mark.parametrize("level", LEVELS)
def test_rmsnorm(level):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((70, 64)) * 3).astype(np.float32)
    x[5] = 0.0  # a zero row: rsqrt(eps) times zeros
    w = rng.standard_normal(64).astype(np.float32)
    # rsqrt.approx, and the f32 row sum
    _close(_launch("rmsnorm", x, w, level=level), rmsnorm_ref(*_f64(x, w)), rtol=RSQRT + 64 * F32_ULP, atol=1e-6)


@pytest.mark.parametrize("level", LEVELS)
def test_layernorm(level):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((70, 64)) * 3 + 5).astype(np.float32)  # a mean far from 0: the centring matters
    x[4] = 2.5  # a constant row: var = 0, y = beta
    gamma, beta = rng.standard_normal((2, 64)).astype(np.float32)
    expected = layernorm_ref(*_f64(x, gamma, beta))
    # rsqrt.approx and the f32 row sums; the centred values carry the mean's rounding (|x| 2^-24 x 64 terms),
    # which the scale 1/std (at most 1/sqrt(eps) only for the constant row, where xc is exact) multiplies
    atol = 64 * F32_ULP * 8 * np.abs(gamma) + 1e-6
    _close(_launch("layernorm", x, gamma, beta, level=level), expected, rtol=RSQRT + 128 * F32_ULP, atol=atol)


@pytest.mark.parametrize("level", LEVELS)
def test_gemm_softcap(level):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((100, 128)).astype(BF16)
    b = rng.standard_normal((128, 72)).astype(BF16)
    # tanh.approx's relative error, carried through a SiLU whose slope is at most 1.1, on values up to 16
    _close(_launch("gemm_softcap", a, b, level=level), gemm_softcap_ref(*_f64(a, b)), rtol=2e-6,
           atol=1.1 * 16 * TANH)


@pytest.mark.parametrize("level", LEVELS)
def test_gemm_bias_gelu(level):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((70, 136)).astype(BF16)  # K = 136: a partial last K step
    b = (rng.standard_normal((136, 40)) / 4).astype(BF16)
    bias = rng.standard_normal(40).astype(np.float32)
    expected = gemm_bias_gelu_ref(*_f64(a, b, bias))
    # the bf16 output rounding (half an ulp: 2^-8 relative, 8 significant bits), and tanh.approx's relative error times 0.5 |x|
    x = np.abs(a.astype(np.float64) @ b.astype(np.float64) + bias)
    _close(_launch("gemm_bias_gelu", a, b, bias, level=level), expected, rtol=2.0**-8 + 1e-6,
           atol=0.5 * x * TANH * 1.01 + 1e-6)


@pytest.mark.parametrize("level", LEVELS)
def test_swiglu(level):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((70, 72)).astype(BF16)
    bg, bu = (rng.standard_normal((2, 72, 40)) / 4).astype(BF16)
    expected = swiglu_ref(*_f64(a, bg, bu))
    # f32 accumulation (K = 72 terms): each accumulator within 72 ulp of its magnitudes s_g, s_u; silu's slope is
    # at most 1.1, so the product moves by 1.1 err_g |u| + |g| err_u; and sigmoid's ex2 + rcp bounds (2^-19)
    s_g, s_u = (np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)) for w in (bg, bu))
    _close(_launch("swiglu", a, bg, bu, level=level), expected, rtol=2.0**-19,
           atol=2.1 * 72 * F32_ULP * s_g * s_u)


@pytest.mark.parametrize("level", LEVELS)
def test_b2b_gemm(level):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((70, 72)).astype(BF16)
    b0 = (rng.standard_normal((72, 64)) / 8).astype(BF16)
    b1 = rng.standard_normal((64, 40)).astype(BF16)
    a64, b064, b164 = _f64(a, b0, b1)
    expected = b2b_gemm_ref(a64, b064, b164)
    # H is summed in f32 in another order than NumPy's: an entry near a bf16 rounding boundary may round the
    # other way (one bf16 ulp, 2^-8 relative); the second GEMM's f32 sum adds 64 ulp of its magnitudes
    h = np.abs(a64 @ b064)
    atol = (2.0**-8 * h + 72 * F32_ULP * (np.abs(a64) @ np.abs(b064))) @ np.abs(b164) + 64 * F32_ULP * (h @ np.abs(b164))
    _close(_launch("b2b_gemm", a, b0, b1, level=level), expected, rtol=0, atol=atol)


@pytest.mark.parametrize("level", LEVELS)
def test_alibi(level):
    x = np.random.default_rng(7).standard_normal((80, 64 * 3)).astype(np.float32)
    _close(_launch("alibi", x, level=level), alibi_ref(x.astype(np.float64), 3), rtol=0, atol=1e-5)


@pytest.mark.parametrize("level", LEVELS)
def test_cross_entropy(level):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((70, 200)) * 3).astype(np.float32)  # 4 column blocks, the last partial
    x[3, 190] = 50.0  # the row's max in the last block, and its label: loss ~0
    labels = rng.integers(0, 200, 70).astype(np.int32)
    labels[3], labels[::9] = 190, -100
    labels[4], labels[5] = 0, 199  # the first and the last column
    loss = _launch("cross_entropy", x, labels, level=level)
    # as online_softmax's LSE (ex2.approx per term, f32 sums, lg2.approx, the f32 add of the max), then the f32
    # subtraction of the picked logit (exact: the sum of one value and zeros)
    _close(loss, cross_entropy_ref(x.astype(np.float64), labels), rtol=2.0**-21, atol=2.0**-19 * (1 + np.abs(x).max(1)))


@pytest.mark.parametrize("level", LEVELS)
def test_rope(level):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((130, 64)).astype(np.float32)
    f = (10000.0 ** (-np.arange(32) / 32)).astype(np.float32)
    expected, theta = rope_ref(*_f64(x, f))
    # each half: two products of |x| <= |x1| + |x2| with cos/sin, each within sin_cos_error_bound(theta), and
    # the three f32 roundings of the products and the sum
    bound = np.tile(approx.sin_cos_error_bound(theta), 2)
    halves = np.abs(x[:, :32]).astype(np.float64) + np.abs(x[:, 32:])
    atol = np.tile(halves, 2) * bound + 3 * F32_ULP * np.tile(halves, 2)
    _close(_launch("rope", x, f, level=level), expected, rtol=0, atol=atol)


@pytest.mark.parametrize("level", LEVELS)
def test_bias_grad(level):
    rng = np.random.default_rng(13)
    dy = (rng.standard_normal((130, 100)) * 3).astype(np.float32)  # 3 row blocks (the last partial), 2 column blocks
    dy[:, 7] = 1e6 * np.where(np.arange(130) % 2, 1, -1)  # a column that cancels to 0: its bound is its terms'
    # f32 sums of 130 terms in any order: 130 2^-24 sum |dy| per column
    atol = 130 * 2.0**-24 * np.abs(dy.astype(np.float64)).sum(axis=0)
    _close(_launch("bias_grad", dy, level=level), bias_grad_ref(dy.astype(np.float64)), rtol=0, atol=atol)


def _attention_inputs(seed, lq, lk):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((lq, 64)).astype(BF16), *rng.standard_normal((2, lk, 64)).astype(BF16)


# The probabilities P are rounded to bf16 for the second mma (2^-8 relative each); the output is a weighted mean
# of V's rows whose weights sum to 1, so that moves it by at most 2^-8 max|V|, and as much again for the sum l
# being formed from the unrounded P (ex2.approx and tanh.approx are far smaller).
ATTENTION_ATOL = 2 * 2.0**-8


@pytest.mark.parametrize("level", LEVELS)
def test_softcap_attention(level):
    q, k, v = _attention_inputs(8, 70, 90)  # 90 keys: a partial last key block, hidden by tile.mask_bounds
    q = (q.astype(np.float32) * 4).astype(BF16)  # scores up to ~60: the cap at 20 bites
    expected = softcap_attention_ref(*_f64(q, k, v))
    got = _launch("softcap_attention", q, k, v, level=level)
    _close(got, expected, rtol=0, atol=ATTENTION_ATOL * np.abs(v.astype(np.float64)).max())


@pytest.mark.parametrize("level", LEVELS)
def test_sliding_window_attention(level):
    q, k, v = _attention_inputs(9, 130, 130)  # three query blocks, the last partial
    expected = sliding_window_attention_ref(*_f64(q, k, v))
    got = _launch("sliding_window_attention", q, k, v, level=level)
    _close(got, expected, rtol=0, atol=ATTENTION_ATOL * np.abs(v.astype(np.float64)).max())


# endregion
# region ptxas and tessera-run --check

SIZES = {
    "softmax": ["M=70"],
    "online_softmax": ["M=70", "N=200"],
    "rmsnorm": ["M=70"],
    "layernorm": ["M=70"],
    "gemm_softcap": ["M=70", "K=72", "N=40"],
    "gemm_bias_gelu": ["M=70", "K=72", "N=40"],
    "swiglu": ["M=70", "K=72", "N=40"],
    "b2b_gemm": ["M=70", "K=72", "N=40"],
    "alibi": ["L=70", "HC=128"],
    "rope": ["M=130"],
    "bias_grad": ["M=130", "N=100"],
    "cross_entropy": ["M=70", "V=200"],
    "softcap_attention": ["Lq=70", "Lk=90"],
    "sliding_window_attention": ["L=130"],
}


def test_every_kernel_is_tested():
    assert sorted(p.stem for p in KERNELS.glob("*.mlir")) == sorted(SIZES)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_target_ir_verifies(name):
    """The Target IR of each kernel verifies after the full pipeline."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tessera.ir.verify(tessera.compile(_kernel(name), target="target"))


@pytest.mark.parametrize("name", sorted(SIZES))
def test_assembles(name, ptxas):
    from tessera.toolchain import compile_ptx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ptx = tessera.compile(_kernel(name), target="ptx")
    result = compile_ptx(ptx, source_name=name, ptxas=ptxas)
    assert result.warnings == (), "\n".join(map(str, result.warnings))
    for entry in result.entries.values():
        assert not entry.spills, f"{entry.name} spills: {entry}"


@pytest.mark.parametrize("name", sorted(SIZES))
def test_tessera_run_check(name):
    sizes = [arg for size in SIZES[name] for arg in ("-d", size)]
    # in this process, as `python -m tessera.tools.tessera_run` runs (tests/inprocess.py): no Python start-up each
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(KERNELS / f"{name}.mlir"),
                            "--level", "ptx", "--check", *sizes])
    assert result.returncode == 0, result.stdout + result.stderr

# endregion
