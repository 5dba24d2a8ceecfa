"""Float64 references of the FP8 (e4m3) attention forward, with per-(batch, kv-head) descale factors, and its
straightforward computation in the FP8 kernel's precision (`tessera.reference.check_attention_fp8`'s rule).
"""

from __future__ import annotations

import numpy as np

from tessera.numerics import F32, round_to
from tessera.reference_attention import attention, attention_lse, causal_visible, expand_heads, softmax_rows


FP8_P_OFFSET = 2.0**8
"""The factor P is rounded to e4m3 at, in the FP8 kernel and in its same-precision computation
(`tessera.kernels.attention_fp8.P_OFFSET_LOG2`, FlashAttention-3's Max_offset)."""


def dequantize_fp8(x8, descale, heads: int | None = None) -> np.ndarray:
    """x8 [batch, heads_k, seq, d] times its descale [batch, heads_k] (None: 1) in float64, with the heads
    repeated to `heads` (GQA: query head h belongs to key head h // (heads / heads_k))."""
    x = np.asarray(x8).astype(np.float64)
    if descale is not None:
        x = x * np.asarray(descale, np.float64)[:, :, None, None]
    return x if heads is None else expand_heads(x, heads)


def fp8_descales(q8, k8, descale_q, descale_k, descale_v):
    """(descale_q, descale_k, descale_v) as float64 [batch, heads_k] arrays, 1 where None."""
    ones = np.ones(np.asarray(k8).shape[:2])
    return tuple(ones if d is None else np.asarray(d, np.float64) for d in (descale_q, descale_k, descale_v))


def attention_fp8(q8, k8, v8, descale_q=None, descale_k=None, descale_v=None, causal: bool = False,
                  scale: float | None = None) -> np.ndarray:
    """softmax(scale Q K^T [+ causal mask]) V in float64 on the dequantized inputs (q8 descale_q, ...; query
    head h takes the descale of its key head); k8 and v8 may have fewer heads (GQA)."""
    heads = np.asarray(q8).shape[1]
    dq, dk, dv = fp8_descales(q8, k8, descale_q, descale_k, descale_v)
    q = np.asarray(q8).astype(np.float64) * expand_heads(dq[:, :, None, None], heads)
    return attention(q, dequantize_fp8(k8, dk, heads), dequantize_fp8(v8, dv, heads), causal, scale)


def attention_fp8_same_precision(q8, k8, v8, descale_q=None, descale_k=None, descale_v=None,
                                 causal: bool = False, scale: float | None = None,
                                 normalized: bool = True) -> np.ndarray:
    """The straightforward computation in the FP8 kernel's precision: f32 scores from the e4m3 inputs,
    (q8 k8^T) f32(scale descale_q descale_k); the softmax in f32; P rounded to e4m3 (as 2^8 P, the kernel's
    offset, `FP8_P_OFFSET`); P v8 accumulated in f32, times descale_v, rounded to bf16. `normalized=False`
    rounds the unnormalized exp(s - rowmax) instead (as FlashAttention-3 and the kernel do) and divides the
    product by the f32 row sum of the unrounded terms: the two roundings land on different points of e4m3's
    grid (steps of 1/16 of 1 near a row's maximum), so either may be the exact one for a given row."""
    from tessera.numerics import BF16, F8E4M3

    q, k, v = (np.asarray(x).astype(F32) for x in (q8, k8, v8))
    heads = q.shape[1]
    dq, dk, dv = (expand_heads(d.astype(F32)[:, :, None, None], heads)
                  for d in fp8_descales(q8, k8, descale_q, descale_k, descale_v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    factor = (dq * dk * np.float32(scale)).astype(F32)
    scores = (np.matmul(q, np.swapaxes(expand_heads(k, heads), -1, -2)) * factor).astype(F32)
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    p = softmax_rows(scores, visible).astype(F32)
    row_sum = np.ones(p.shape[:-1] + (1,), F32)
    if not normalized:  # exp(s - m) = P l / max P, with l = sum exp(s - m), as the kernel holds it
        peak = p.max(axis=-1, keepdims=True)
        row_sum = np.where(peak > 0, np.float32(1) / np.where(peak > 0, peak, 1), 1).astype(F32)
        p = (p * row_sum).astype(F32)
    p = round_to(p * np.float32(FP8_P_OFFSET), F8E4M3).astype(F32) / np.float32(FP8_P_OFFSET)
    o = np.matmul(p, expand_heads(v, heads)) / row_sum * dv
    return round_to(o.astype(F32), BF16)


def attention_fp8_lse(q8, k8, descale_q=None, descale_k=None, causal: bool = False,
                      scale: float | None = None) -> np.ndarray:
    """The FP8 forward's log-sum-exp in float64 (`attention_lse` of the dequantized q and k)."""
    heads = np.asarray(q8).shape[1]
    dq, dk, _ = fp8_descales(q8, k8, descale_q, descale_k, None)
    q = np.asarray(q8).astype(np.float64) * expand_heads(dq[:, :, None, None], heads)
    return attention_lse(q, dequantize_fp8(k8, dk), causal, scale)
