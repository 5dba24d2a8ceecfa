"""`tessera.attention_backward` on round 23's unseen training cases, against a float64 closed-form backward written
here (not `tessera.reference`): causal with seq_q != seq_k both ways (rows that see no key get zero gradients),
lengths 1, 3, 65, 127, 257, GQA 4:1 and MQA (dK and dV summed over a group's query heads), head_dim 64/96/128/192
(256 and deterministic 192 refused by name), a scale of the caller's, dO with zeros (a loss over part of O) and
with an inf (no floating-point warning escapes from the interpreter, the gradients as the FlashAttention formula
gives them), a loss that reads the LSE (`dlse`; also with a score_mod and a mask_mod under GQA; a zero dLSE
changes no bit), and `deterministic=True` bit for bit over two runs and between target and PTX level. Tile level
for the grid (about 5 s); a slice at target and PTX level under `-m slow` (about a minute). The PyTorch side
(autograd, non-contiguous tensors, a toy model trained, gradcheck's refusal) is tests/test_unseen_backward_torch.py."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.ir.diagnostics import TesseraWarning
from tessera.runtime.attention_base import UnsupportedKernel

TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def backward64(q, k, v, do, causal=False, scale=None, dlse=None):
    """float64 (o, lse, dq, dk, dv) of softmax(q k^T * scale [bottom-right causal]) v for the loss whose gradient
    in O is `do` (and in LSE `dlse`): dS = P (dO V^T - rowsum(dO * O) + dLSE), dQ = scale dS K, dK = scale dS^T Q
    and dV = P^T dO, summed over the query heads of each K/V head (GQA). A row that sees no key: O = 0, LSE -inf,
    P = 0 and so every gradient from it 0."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    batch, heads, seq_q, head_dim = q.shape
    heads_k, seq_k = k.shape[1], k.shape[2]
    groups = heads // heads_k
    kk, vv = np.repeat(k, groups, 1), np.repeat(v, groups, 1)
    scale = head_dim ** -0.5 if scale is None else scale
    s = q @ np.swapaxes(kk, -1, -2) * scale
    if causal:
        s = np.where(np.arange(seq_k)[None] <= np.arange(seq_q)[:, None] + seq_k - seq_q, s, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = np.isfinite(m)
    e = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(seen, total, 1)
    o = p @ vv
    lse = np.where(seen, np.log(np.where(seen, total, 1)) + np.where(seen, m, 0), -np.inf)[..., 0]
    with np.errstate(invalid="ignore"):  # an inf in dO: inf - inf is NaN here as in the kernels
        ds = p * (do @ np.swapaxes(vv, -1, -2) - (do * o).sum(-1, keepdims=True)
                  + (0 if dlse is None else np.asarray(dlse, np.float64)[..., None]))
        dq = ds @ kk * scale
        dk = (np.swapaxes(ds, -1, -2) @ q * scale).reshape(batch, heads_k, groups, seq_k, head_dim).sum(2)
        dv = (np.swapaxes(p, -1, -2) @ do).reshape(batch, heads_k, groups, seq_k, head_dim).sum(2)
    return o, lse, dq, dk, dv


def assert_close(got, want, name, tol=0.03):
    """Within `tol` of the largest entry (bf16 inputs and outputs, f32 accumulation), no NaN."""
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, name
    assert not np.isnan(got).any(), f"{name}: NaN"
    error = np.abs(got - want).max(initial=0)
    assert error <= tol * max(np.abs(want).max(initial=0), 1e-3) + 1e-3, f"{name}: error {error}"


def problem(batch, heads, heads_k, seq_q, seq_k, head_dim, dtype="bf16", seed=0, causal=False, scale=None):
    """Rounded q, k, v, dO, and the forward's (o, lse) from `tessera.attention` at Tile level."""
    rng = np.random.default_rng(seed)
    t = TYPES[dtype]
    q, do = (rng.standard_normal((batch, heads, seq_q, head_dim)).astype(t) for _ in range(2))
    k, v = (rng.standard_normal((batch, heads_k, seq_k, head_dim)).astype(t) for _ in range(2))
    o, lse = tessera.attention(q, k, v, causal=causal, scale=scale, return_lse=True, level="tile")
    return q, k, v, o, lse, do


def check(case, level="tile", deterministic=False):
    batch, heads, heads_k, seq_q, seq_k, head_dim, causal, scale, dtype = case
    q, k, v, o, lse, do = problem(batch, heads, heads_k, seq_q, seq_k, head_dim, dtype, causal=causal, scale=scale)
    want_o, want_lse, *want = backward64(q, k, v, do, causal, scale)
    assert_close(o, want_o, "o")
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, level=level,
                                       deterministic=deterministic)
    for name, grad, expected, x in zip(("dq", "dk", "dv"), grads, want, (q, k, v)):
        assert grad.shape == x.shape and grad.dtype == x.dtype, name
        assert_close(grad, expected, name)
    return grads


CASES = [  # batch, heads, heads_k, seq_q, seq_k, head_dim, causal, scale, dtype
    (1, 2, 2, 65, 3, 64, True, None, "bf16"),  # rows 0 .. 61 see no key
    (1, 2, 2, 3, 65, 64, True, None, "bf16"),
    (1, 1, 1, 1, 1, 64, True, None, "bf16"),
    (1, 2, 1, 127, 257, 64, True, None, "f16"),
    (1, 4, 1, 257, 127, 64, False, None, "bf16"),  # MQA
    (2, 8, 2, 65, 127, 64, True, None, "bf16"),  # GQA 4:1
    (1, 2, 1, 65, 127, 96, True, None, "bf16"),
    (1, 2, 2, 127, 65, 128, True, 0.3, "f16"),
    (1, 4, 1, 3, 257, 192, False, None, "bf16"),
    (1, 2, 2, 65, 65, 192, True, 0.05, "bf16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradients_against_float64(case):
    check(case)


def test_rows_that_see_no_key_get_zero_gradients():
    q, k, v, o, lse, do = problem(1, 4, 1, 65, 3, 64, causal=True)
    dq, dk, dv = tessera.attention_backward(q, k, v, o, lse, do, causal=True, level="tile")
    assert np.isneginf(lse[:, :, :62]).all() and np.isfinite(lse[:, :, 62:]).all()
    assert not np.asarray(dq[:, :, :62], np.float32).any()
    assert np.isfinite(np.asarray(dk, np.float32)).all() and np.isfinite(np.asarray(dv, np.float32)).all()


def test_a_loss_over_part_of_the_output():
    q, k, v, o, lse, _ = problem(1, 2, 2, 40, 40, 64, causal=True)
    do = np.zeros(q.shape, q.dtype)
    do[:, :, 10:20, :5] = 1  # d/dO of o[:, :, 10:20, :5].sum()
    _, _, *want = backward64(q, k, v, do, True)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=True, level="tile")
    for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
        assert_close(grad, expected, name)
    assert not np.asarray(grads[0][:, :, :10], np.float32).any() and not np.asarray(grads[0][:, :, 20:],
                                                                                     np.float32).any()


@pytest.mark.parametrize("level", ["tile", pytest.param("target", marks=pytest.mark.slow)])
def test_an_inf_in_do_gives_the_formulas_non_finite_gradients_and_no_warning(level):
    """The Tile IR interpreter's arithmetic on inf (inf - inf in dS) raised RuntimeWarning from inside it under -W
    error, at Tile level only (`tessera.launch` turns NumPy's warnings off; the backward called the interpreter
    directly). Now none escapes, and dQ, dK and dV are the FlashAttention formula's in float64: NaN and inf in the
    same places, the finite entries within the tolerance."""
    q, k, v, o, lse, do = problem(1, 1, 1, 8, 8, 64)
    do[0, 0, 3, 7] = np.inf
    _, _, *want = backward64(q, k, v, do)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads = tessera.attention_backward(q, k, v, o, lse, do, level=level)
    for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
        grad = np.asarray(grad, np.float64)
        assert np.array_equal(np.isnan(grad), np.isnan(expected)), name
        assert np.array_equal(np.isposinf(grad), np.isposinf(expected)), name
        assert np.array_equal(np.isneginf(grad), np.isneginf(expected)), name
        finite = np.isfinite(expected)
        assert_close(np.where(finite, grad, 0), np.where(finite, expected, 0), name)


@pytest.mark.parametrize("head_dim, deterministic, message", [
    (256, False, "head_dim 256 is not supported by the backward kernels"),
    (192, True, "head_dim 192 is not supported by the attention backward with deterministic=True"),
])
def test_head_dims_without_a_backward_are_refused_by_name(head_dim, deterministic, message):
    q, k, v, o, lse, do = problem(1, 1, 1, 5, 5, head_dim)
    with pytest.raises((UnsupportedKernel, ValueError), match=message):
        tessera.attention_backward(q, k, v, o, lse, do, deterministic=deterministic, level="tile")


def test_deterministic_gradients_repeat_bit_for_bit():
    case = (1, 4, 1, 130, 300, 64, True, None, "bf16")
    runs = [check(case, deterministic=True) for _ in range(2)]
    for a, b in zip(*runs):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("causal, heads_k", [(True, 1), (False, 2)])
def test_a_loss_that_reads_the_lse(causal, heads_k):
    """`dlse`: the loss's gradient in the forward's LSE joins dO's (dS += P dLSE); rows that see no key (seq_q >
    seq_k, causal) still get zero gradients."""
    q, k, v, o, lse, do = problem(1, 4, heads_k, 70, 33, 64, causal=causal)
    dlse = np.random.default_rng(1).standard_normal(lse.shape).astype(np.float32)
    _, _, *want = backward64(q, k, v, do, causal, dlse=dlse)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level="tile", dlse=dlse)
    for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
        assert_close(grad, expected, name)
    if causal:
        assert not np.asarray(grads[0][:, :, :37], np.float32).any()
    plain = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level="tile")
    zero = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level="tile", dlse=np.zeros_like(lse))
    for a, b in zip(plain, zero):  # a zero dLSE changes no bit
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("level", ["tile", pytest.param("target", marks=pytest.mark.slow)])
def test_a_loss_that_reads_the_lse_of_a_score_mod(level):
    """With a score_mod (a bias table) and a mask_mod (causal), GQA 2:1: dLSE is in the modified scores' LSE."""
    q, k, v, _, _, do = problem(1, 2, 1, 40, 40, 64)
    bias = np.random.default_rng(2).standard_normal((40, 40)).astype(np.float32)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[q_idx, kv_idx]

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    mods = dict(score_mod=score_mod, mask_mod=mask_mod)
    o, lse = tessera.attention(q, k, v, return_lse=True, level="tile", **mods)
    dlse = np.random.default_rng(3).standard_normal(lse.shape).astype(np.float32)
    q64, do64 = q.astype(np.float64), do.astype(np.float64)
    k64, v64 = (np.repeat(x.astype(np.float64), 2, 1) for x in (k, v))
    s = np.where(np.tri(40, dtype=bool), q64 @ np.swapaxes(k64, -1, -2) / 8 + bias, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ds = p * (do64 @ np.swapaxes(v64, -1, -2) - (do64 * (p @ v64)).sum(-1, keepdims=True) + dlse[..., None])
    want = (ds @ k64 / 8, (np.swapaxes(ds, -1, -2) @ q64 / 8).sum(1, keepdims=True),
            (np.swapaxes(p, -1, -2) @ do64).sum(1, keepdims=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)  # below Tile level: the rung the backward takes
        grads = tessera.attention_backward(q, k, v, o, lse, do, level=level, dlse=dlse, **mods)
    for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
        assert_close(grad, expected, name)


@pytest.mark.parametrize("dlse, error, message", [
    (np.zeros((1, 2, 7), np.float32), ValueError, r"dlse must have lse's shape \(1, 2, 8\)"),
    (np.zeros((1, 2, 8), np.int32), TypeError, "dlse must hold floating-point numbers"),
    ("dlse", TypeError, "dlse must be a NumPy array or a PyTorch tensor"),
])
def test_dlse_is_checked_by_name(dlse, error, message):
    q, k, v, o, lse, do = problem(1, 2, 2, 8, 8, 64)
    with pytest.raises(error, match=message):
        tessera.attention_backward(q, k, v, o, lse, do, level="tile", dlse=dlse)


SLICE = [  # below Tile level: small shapes, the PTX executor costs seconds a launch
    ((1, 2, 2, 65, 3, 64, True, None, "bf16"), "target"),
    ((1, 4, 1, 3, 65, 64, True, None, "bf16"), "ptx"),
    ((1, 2, 1, 65, 33, 96, True, None, "bf16"), "target"),
    ((1, 2, 2, 33, 65, 128, True, 0.3, "f16"), "ptx"),
    ((1, 2, 2, 17, 17, 192, False, None, "bf16"), "target"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, level", SLICE, ids=lambda c: "-".join(map(str, c)) if isinstance(c, tuple) else c)
def test_gradients_below_tile_level(case, level):
    check(case, level)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_a_loss_that_reads_the_lse_below_tile_level(level):
    q, k, v, o, lse, do = problem(1, 4, 1, 70, 33, 64, causal=True)
    dlse = np.random.default_rng(1).standard_normal(lse.shape).astype(np.float32)
    _, _, *want = backward64(q, k, v, do, True, dlse=dlse)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=True, level=level, dlse=dlse)
    for name, grad, expected in zip(("dq", "dk", "dv"), grads, want):
        assert_close(grad, expected, name)


@pytest.mark.slow
def test_deterministic_gradients_are_one_bit_pattern_at_target_and_ptx_level():
    case = (1, 4, 1, 130, 70, 64, True, None, "bf16")
    target, ptx = (check(case, level, deterministic=True) for level in ("target", "ptx"))
    for a, b in zip(target, ptx):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
