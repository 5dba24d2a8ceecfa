"""Float64 references of the attention forward, and the straightforward computations in a kernel's precision
that `tessera.reference`'s tolerance rule compares with: scores, the bias as the kernels saturate it, the
bottom-right causal mask, softmax, O, the LSE, and FlexAttention-style modifiers (`mod_scores`).

Conventions (the kernels'): inputs are [batch, heads, seq, head_dim]; `scale` defaults to 1/sqrt(head_dim);
K and V may have fewer heads than Q (GQA: `expand_heads`); a query row that sees no key gives zeros (and an LSE
of -inf). The bias conventions are `tessera.reference`'s (module docstring).
"""

from __future__ import annotations

import numpy as np

from tessera.numerics import F32, bias_bound, round_to


def causal_visible(seq_q: int, seq_k: int) -> np.ndarray:
    """[seq_q, seq_k] mask of the keys each query sees under the bottom-right causal convention."""
    query = np.arange(seq_q)[:, None]
    key = np.arange(seq_k)[None, :]
    return key <= query + (seq_k - seq_q)


def scaled_scores(q: np.ndarray, k: np.ndarray, scale: float, dtype) -> np.ndarray:
    """scale * Q K^T in `dtype` through BLAS (np.einsum loops in C without BLAS: 7x slower at 1000 x 1000)."""
    return np.matmul(q.astype(dtype), np.swapaxes(k.astype(dtype), -1, -2)) * dtype(scale)


def add_bias(scores: np.ndarray, bias) -> np.ndarray:
    """scores + bias, the bias [batch, heads, seq_q, seq_k] or with 1 in the batch and/or heads dimension
    (broadcast, as PyTorch's SDPA broadcasts attn_mask); scores unchanged when bias is None."""
    return scores if bias is None else scores + np.asarray(bias).astype(scores.dtype)


def saturate_bias(bias, scale: float):
    """The bias as the attention kernels compute with it (module docstring): finite entries clipped to
    [-V scale, V scale] with V = `bias_bound(scale)`, +-inf and NaN unchanged; None stays None. float64."""
    if bias is None:
        return None
    bias = np.asarray(bias).astype(np.float64)
    limit = bias_bound(scale) * scale
    return np.where(np.isfinite(bias), np.clip(bias, -limit, limit), bias)


def softmax_rows(scores: np.ndarray, visible: np.ndarray | None) -> np.ndarray:
    """softmax over the last axis of `scores` where `visible`; a row that sees nothing (every score -inf) is
    zeros, a row with a NaN or +inf score is NaN (as the kernels give it: the reference module's conventions).
    One new array, worked on in place."""
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max[np.isneginf(row_max)] = 0
    with np.errstate(invalid="ignore"):  # +inf - +inf: NaN, the row's value
        weights = np.subtract(scores, row_max, out=scores if visible is not None else None)
    np.exp(weights, out=weights)
    total = weights.sum(axis=-1, keepdims=True)
    seen = total != 0  # True for NaN: a NaN row stays NaN
    np.divide(weights, total, out=weights, where=seen)
    weights[~seen[..., 0]] = 0
    return weights


def attention(q, k, v, causal: bool = False, scale: float | None = None, bias=None) -> np.ndarray:
    """softmax(Q K^T * scale [+ bias] [+ causal mask]) V in float64 on the given (already rounded) inputs; `bias`
    is [batch, heads, seq_q, seq_k] or broadcast over batch and/or heads (size 1 there), and saturated as the
    kernels saturate it (`saturate_bias`; a row that sees no key gives zeros). k and v may have fewer heads
    (GQA/MQA: heads_k a divisor of q's heads, `expand_heads`)."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    scores = add_bias(scaled_scores(q, k, scale, np.float64), saturate_bias(bias, scale))
    return np.matmul(softmax_rows(scores, visible), v)


def attention_same_precision(q, k, v, dtype, causal: bool = False, scale: float | None = None,
                             bias=None) -> np.ndarray:
    """The straightforward computation in the kernel's precision: scores rounded to `dtype` (and again after
    adding the bias), softmax in f32 rounded to `dtype`, P V accumulated in f32 and rounded to `dtype` (what
    PyTorch's eager attention does); k and v may have fewer heads (GQA/MQA)."""
    q, k, v = (np.asarray(x).astype(F32) for x in (q, k, v))
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    scores = round_to(scaled_scores(q, k, scale, np.float32), dtype).astype(F32)
    if bias is not None:
        scores = round_to(add_bias(scores, bias), dtype).astype(F32)
    p = round_to(softmax_rows(scores, visible).astype(F32), dtype).astype(F32)
    return round_to(np.matmul(p, v), dtype)


def expand_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """K or V with heads_k heads repeated to `heads` (GQA: query head h reads K/V head h // (heads / heads_k));
    ValueError naming both counts where heads_k does not divide heads."""
    if heads % x.shape[1]:
        raise ValueError(f"the reference groups query heads: heads must be a multiple of heads_k; got heads = "
                         f"{heads}, heads_k = {x.shape[1]}")
    return np.repeat(x, heads // x.shape[1], axis=1)


def attention_lse(q, k, causal: bool = False, scale: float | None = None, bias=None) -> np.ndarray:
    """The forward's log-sum-exp in float64: LSE[b, h, i] = log sum_j exp(scale q_i . k_j [+ bias_ij]) over the
    keys row i sees, -inf for a row that sees none (or whose every bias is -inf); the bias saturated as the
    kernels saturate it (`saturate_bias`). k may have fewer heads (GQA)."""
    q = np.asarray(q).astype(np.float64)
    k = expand_heads(np.asarray(k).astype(np.float64), q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = add_bias(scaled_scores(q, k, scale, np.float64), saturate_bias(bias, scale))
    if causal:
        scores = np.where(causal_visible(q.shape[2], k.shape[2]), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    safe = np.where(np.isneginf(row_max), 0, row_max)
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf: no key; +inf - +inf: a NaN row
        return (np.log(np.exp(scores - safe).sum(axis=-1, keepdims=True)) + safe)[..., 0]


def mod_scores(q, k, scale: float | None, score_mod=None, mask_mod=None, dtype=np.float64) -> np.ndarray:
    """mask_mod(score_mod(scale Q K^T)) in `dtype`: the user's functions run unchanged on NumPy index grids
    (b [B,1,1,1], h [1,H,1,1], q_idx [1,1,Sq,1], kv_idx [1,1,1,Sk], int64), through
    `attention_mods.bounds_checked` (an index outside a captured array is an error, not NumPy's wrap-around);
    hidden scores are -inf. K may have fewer heads than Q (GQA: repeated)."""
    from tessera.variants.bounds_checks import bounds_checked

    q, k = np.asarray(q), np.asarray(k)
    k = expand_heads(k, q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = scaled_scores(q, k, scale, dtype)
    batch, heads, seq_q, seq_k = scores.shape
    grids = (np.arange(batch).reshape(-1, 1, 1, 1), np.arange(heads).reshape(1, -1, 1, 1),
             np.arange(seq_q).reshape(1, 1, -1, 1), np.arange(seq_k).reshape(1, 1, 1, -1))
    if score_mod is not None:
        scores = np.broadcast_to(np.asarray(bounds_checked(score_mod, "score_mod")(scores, *grids), dtype),
                                 scores.shape)
    if mask_mod is not None:
        visible = np.broadcast_to(np.asarray(bounds_checked(mask_mod, "mask_mod")(*grids), bool), scores.shape)
        scores = np.where(visible, scores, -np.inf)
    return scores


def attention_mods(q, k, v, score_mod=None, mask_mod=None, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, LSE) of softmax(mask_mod(score_mod(scale Q K^T))) V in float64 (`mod_scores`); a row that sees no
    key gives O = 0 and LSE = -inf."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    scores = mod_scores(q, k, scale, score_mod, mask_mod)
    out = np.matmul(softmax_rows(scores, None), expand_heads(v, q.shape[1]))
    top = scores.max(axis=-1)
    safe = np.where(np.isneginf(top), 0, top)
    with np.errstate(divide="ignore"):
        lse = safe + np.log(np.exp(scores - safe[..., None]).sum(axis=-1))
    return out, np.where(np.isneginf(top), -np.inf, lse)


def attention_operands(rng: np.random.Generator, seq_q: int, seq_k: int, head_dim: int, batch: int = 1,
                       heads: int = 1, heads_k: int | None = None) -> list[np.ndarray]:
    """Standard-normal float64 q [batch, heads, seq_q, head_dim], k and v [batch, heads_k, seq_k, head_dim]
    (heads_k: `heads` unless given, GQA), drawn in that order from `rng`: an attention kernel's inputs before
    they are rounded to its element type."""
    kv_heads = heads if heads_k is None else heads_k
    shapes = ((heads, seq_q), (kv_heads, seq_k), (kv_heads, seq_k))
    return [rng.standard_normal((batch, h, s, head_dim)) for h, s in shapes]
