"""Float64 gradients of attention (dQ, dK, dV; with FlexAttention-style modifiers too) and the straightforward
computations in a kernel's precision that `tessera.reference`'s backward rule compares with.

The straightforward computation is what an eager framework in the kernel's precision does with the same kernel
inputs: f32 scores and softmax, dPsum = rowsum(dO * O) in f32 from the forward's rounded O, P rounded to
bf16/f16 for P^T dO, dS = P * (dP - dPsum) in f32 rounded to bf16/f16 for dS K and dS^T Q (where the kernel
rounds them), products accumulated in f32, each gradient rounded to bf16/f16.
"""

from __future__ import annotations

import numpy as np

from tessera.numerics import F32, round_to
from tessera.reference_attention import causal_visible, expand_heads, mod_scores, scaled_scores, softmax_rows


def sum_groups(dx: np.ndarray, heads_k: int) -> np.ndarray:
    """The gradient of each K/V head: the sum over the query heads of its group."""
    b, h, s, d = dx.shape
    return dx.reshape(b, heads_k, h // heads_k, s, d).sum(axis=2)


def backward_gradients(q, k, v, o, do, causal, scale, dtype, round_p):
    """Shared body of the float64 gradient (dtype float64, no rounding) and the same-precision one."""
    heads_k = k.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    p = softmax_rows(scaled_scores(q, k, scale, dtype), visible).astype(dtype)
    t = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    if o is None:
        o = np.matmul(p, v)
    dpsum = np.sum(do * o, axis=-1, dtype=dtype)[..., None]
    dv = np.matmul(t(round_p(p)), do)
    ds = round_p(p * (np.matmul(do, t(v)) - dpsum))
    dq = np.matmul(ds, k) * dtype(scale)
    dk = np.matmul(t(ds), q) * dtype(scale)
    return dq, sum_groups(dk, heads_k), sum_groups(dv, heads_k)


def attention_backward(q, k, v, do, causal: bool = False, scale: float | None = None):
    """The float64 analytic gradient (dq, dk, dv) of attention at the given (already rounded) q, k, v, dO, with
    O recomputed in float64. k and v may have fewer heads than q (GQA: dk, dv sum over each group). A query row
    that sees no key has P = 0, so its dq is 0 and it adds nothing to dk and dv."""
    q, k, v, do = (np.asarray(x).astype(np.float64) for x in (q, k, v, do))
    return backward_gradients(q, k, v, None, do, causal, scale, np.float64, lambda x: x)


def attention_backward_same_precision(q, k, v, o, do, dtype, causal: bool = False, scale: float | None = None):
    """The straightforward computation in the kernel's precision that the rule compares with (see above):
    f32 throughout, P and dS rounded to `dtype` where they enter the tensor-core products, dPsum from the
    given (rounded) o, and each gradient rounded to `dtype`."""
    q, k, v, o, do = (np.asarray(x).astype(F32) for x in (q, k, v, o, do))
    rounded = lambda x: round_to(x, dtype).astype(F32)  # noqa: E731
    return tuple(round_to(g, dtype) for g in backward_gradients(q, k, v, o, do, causal, scale, np.float32, rounded))


def score_mod_slope(q, k, scale, score_mod) -> np.ndarray | None:
    """d score_mod / d score at scale Q K^T, float64, by central differences (step 2^-20 |s|, at least 2^-20):
    an estimate independent of the kernel's traced derivative; None without a score_mod. Where a step of the
    function (np.floor, `//`, np.round of the score) lies within the differences, the forward and the
    backward difference disagree, and the one of smaller magnitude is taken: a step function's derivative
    is 0 almost everywhere, as the traced one is."""
    if score_mod is None:
        return None
    from tessera.variants.bounds_checks import bounds_checked

    fn = bounds_checked(score_mod, "score_mod")
    raw = scaled_scores(q, expand_heads(k, q.shape[1]), 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale,
                  np.float64)
    grids = (np.arange(raw.shape[0]).reshape(-1, 1, 1, 1), np.arange(raw.shape[1]).reshape(1, -1, 1, 1),
             np.arange(raw.shape[2]).reshape(1, 1, -1, 1), np.arange(raw.shape[3]).reshape(1, 1, 1, -1))
    step = np.maximum(np.abs(raw), 1.0) * 2.0**-20
    up, mid, down = (np.broadcast_to(np.asarray(fn(raw + d, *grids), np.float64), raw.shape)
                     for d in (step, 0.0, -step))
    with np.errstate(invalid="ignore"):
        forward, backward = (up - mid) / step, (mid - down) / step
        jump = np.abs(forward - backward) > 2.0**-6 * (1.0 + np.abs(forward) + np.abs(backward))
    one_sided = np.where(np.abs(forward) < np.abs(backward), forward, backward)
    return np.where(jump, one_sided, (up - down) / (2 * step))


def mods_backward_gradients(q, k, v, o, do, score_mod, mask_mod, scale, dtype, round_p, slope):
    heads_k = k.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    p = softmax_rows(mod_scores(q, k, scale, score_mod, mask_mod, dtype), None).astype(dtype)
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    t = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    if o is None:
        o = np.matmul(p, v)
    dpsum = np.sum(do * o, axis=-1, dtype=dtype)[..., None]
    dv = np.matmul(t(round_p(p)), do)
    ds = p * (np.matmul(do, t(v)) - dpsum)
    if slope is not None:
        ds = np.where(p > 0, ds * slope.astype(dtype), 0).astype(dtype)
    ds = round_p(ds)
    dq = np.matmul(ds, k) * dtype(scale)
    dk = np.matmul(t(ds), q) * dtype(scale)
    return dq, sum_groups(dk, heads_k), sum_groups(dv, heads_k)


def attention_mods_backward(q, k, v, do, score_mod=None, mask_mod=None, scale: float | None = None):
    """The float64 gradient (dq, dk, dv) of `attention_mods` (O recomputed in float64); dS is multiplied by
    d score_mod / d score estimated by central differences of the user's function (`score_mod_slope`)."""
    q, k, v, do = (np.asarray(x).astype(np.float64) for x in (q, k, v, do))
    slope = score_mod_slope(q, k, scale, score_mod)
    return mods_backward_gradients(q, k, v, None, do, score_mod, mask_mod, scale, np.float64, lambda x: x, slope)
