"""`tessera.attention` on FP8 inputs: q, k, v as `ml_dtypes.float8_e4m3fn` arrays with optional f32 descale
factors of shape [batch, heads_k] (FlashAttention-3's `q_descale`, `k_descale`, `v_descale`; None is 1).

    o = softmax((q descale_q)(k descale_k)^T * scale [+ causal mask]) (v descale_v)    o: bf16

The kernel is `tessera.kernels.flash_attention(dtype="e4m3")` (`tessera.kernels.attention_fp8`). At
`level="tile"` it runs in the Tile IR interpreter. At "target" (CTA simulator) and "ptx" (PTX executor) the
kernel is `v_transposed="p8"`, lowered by the default pipeline (`passes.DEFAULT_PIPELINE`: warp-specialized,
two stages; the single-stage `PTX_PIPELINE` lowers it too): the host transposes V to V^T with its keys in P8
key order (`tessera.sm90.fp8`), the order the e4m3 P.V wgmma reads P's registers in. Those levels take seq_k
a multiple of 16 (`tessera.sm90.fp8.P8_KEY_GROUP`); other key lengths there, the GPU (`level=None`), the
options the FP8 kernel does not combine with (bias, score_mod/mask_mod, packed sequences, split-KV,
clusters), e5m2 inputs, and q, k, v of mixed FP8 and 16-bit types are refused by name (`UnsupportedKernel`). k and v may
have fewer heads than q (GQA/MQA); query head h takes the descales of key head h // (heads // heads_k).
"""

from __future__ import annotations

import numpy as np

from tessera.runtime.attention_base import LAYOUT, UnsupportedKernel, check_tensor
from tessera.runtime.launch import dtype_name

FP8_INPUT = "float8_e4m3fn"
"""The element type name of FP8 q, k, v (ml_dtypes.float8_e4m3fn)."""

FP8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3", "float8_e4m3b11fnuz")
"""Element type names that make a call an FP8 one (all but FP8_INPUT are refused by name)."""

FP8_LEVELS = ("tile", "target", "ptx")
"""The levels the FP8 kernel runs at."""

LOWERED_LEVELS = ("target", "ptx")
"""The levels that run the FP8 kernel lowered to sm_90a (V^T in P8 key order, the default pipeline)."""




def is_fp8_call(q, k, v, descales) -> bool:
    """Whether any of q, k, v is an 8-bit float array, or any descale is given: the call takes the FP8 path."""
    return any(dtype_name(x) in FP8_NAMES for x in (q, k, v) if hasattr(x, "dtype")) or \
        any(d is not None for d in descales)


def check_fp8_arguments(q, k, v) -> int:
    """The head_dim of well-formed FP8 q, k, v (all float8_e4m3fn NumPy arrays, [batch, heads, seq, head_dim]
    with k and v sharing heads_k, a divisor of heads); TypeError/ValueError/UnsupportedKernel naming the rule."""
    names = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = check_tensor("attention", name, x)
        if len(shape) != 4 or any(int(d) <= 0 for d in shape):
            raise ValueError(f"attention: {name} must be a non-empty 4-D {LAYOUT} array, got shape {tuple(shape)}")
        if not isinstance(x, np.ndarray):
            raise UnsupportedKernel(f"attention: FP8 {name} must be a NumPy array (ml_dtypes.float8_e4m3fn); FP8 "
                                    f"PyTorch tensors need the GPU path, which is not built yet")
        names.append(dtype_name(x))
    if len(set(names)) != 1:
        raise ValueError(f"attention: q, k and v must all be {FP8_INPUT} for FP8 attention; mixed FP8 and "
                         f"other inputs are not supported, got {', '.join(names)}")
    if names[0] not in FP8_NAMES:
        raise ValueError(f"attention: descale_q, descale_k and descale_v apply to FP8 attention ({FP8_INPUT} q, k "
                         f"and v); got {names[0]} inputs")
    if names[0] != FP8_INPUT:
        raise UnsupportedKernel(f"attention: element type {names[0]} is not supported; FP8 attention takes "
                                f"{FP8_INPUT} (e4m3) q, k and v, as FlashAttention-3 does")
    (batch, heads, _, d), (kb, heads_k, seq_k, kd), vs = q.shape, k.shape, v.shape
    if not (batch == kb and k.shape[:2] == vs[:2] and heads % heads_k == 0 and seq_k == vs[2] and d == kd == vs[3]):
        raise ValueError(f"attention: q, k and v must have the same batch and head_dim, k and v the same heads (a "
                         f"divisor of q's) and sequence length {LAYOUT}, got shapes {q.shape}, {k.shape}, {v.shape}")
    return int(d)


def check_descale(name: str, descale, batch: int, heads_k: int) -> np.ndarray:
    """The f32 [batch, heads_k] descale array (ones for None); TypeError/ValueError naming `name` otherwise."""
    if descale is None:
        return np.ones((batch, heads_k), np.float32)
    shape = check_tensor("attention", name, descale)
    real = isinstance(descale, np.ndarray) and (descale.dtype.kind in "fiu" or dtype_name(descale) == "bfloat16")
    if not real:
        raise TypeError(f"attention: {name} must be a NumPy array of real numbers, got {dtype_name(descale)}")
    if tuple(int(s) for s in shape) != (batch, heads_k):
        raise ValueError(f"attention: {name} must have shape [batch, heads_k] = ({batch}, {heads_k}), got "
                         f"{tuple(shape)}")
    values = np.asarray(descale, np.float32)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"attention: {name} must be finite")
    return np.ascontiguousarray(values)


def check_lowered(seq_k: int, level: str) -> None:
    """UnsupportedKernel naming the rule where the lowered FP8 kernel (levels "target", "ptx") does not take
    this key length."""
    from tessera.sm90.fp8 import P8_KEY_GROUP

    if seq_k % P8_KEY_GROUP:
        raise UnsupportedKernel(f"attention: FP8 attention at level={level!r} needs seq_k a multiple of "
                                f"{P8_KEY_GROUP} (V^T in P8 key order by groups of {P8_KEY_GROUP}, rows on 16 "
                                f"bytes for TMA), got seq_k={seq_k}; use level='tile'")


def attention_fp8(q, k, v, *, causal, scale, return_lse, level, descale_q=None, descale_k=None, descale_v=None):
    """The FP8 forward (module docstring) on checked options; returns o (bf16) or (o, lse f32 [batch, heads,
    seq_q])."""
    from tessera.kernels import flash_attention
    from tessera.runtime import entry
    from tessera.runtime.attention_plan import check_level

    head_dim = check_fp8_arguments(q, k, v)
    if head_dim not in (64, 128, 256):
        raise UnsupportedKernel(f"head_dim {head_dim} is not supported by Tessera's attention kernels "
                                "(supported: 64, 128, 256)")
    batch, heads_k = k.shape[:2]
    descales = [check_descale(n, d, batch, heads_k) for n, d in
                (("descale_q", descale_q), ("descale_k", descale_k), ("descale_v", descale_v))]
    check_level(level)
    if level not in FP8_LEVELS:
        where = "the GPU (level=None)" if level is None else f"level={level!r}"
        raise UnsupportedKernel(f"attention: FP8 attention is not supported on {where} yet: the lowered FP8 "
                                "kernel runs in the interpreters only; use level='tile', 'target' or 'ptx'")
    lowered = level in LOWERED_LEVELS
    if lowered:
        check_lowered(k.shape[2], level)
    if not isinstance(return_lse, bool):
        raise ValueError(f"attention: return_lse must be True or False; got {return_lse!r}")
    if isinstance(scale, np.floating | np.integer):
        scale = float(scale)
    module = flash_attention(head_dim=head_dim, causal=causal, dtype="e4m3", scale=scale,
                             grouped=heads_k != q.shape[1], return_lse=return_lse,
                             v_transposed="p8" if lowered else False)
    if lowered:
        from tessera.sm90.fp8 import p8_key_positions

        vt = np.ascontiguousarray(np.swapaxes(v, 2, 3)[..., p8_key_positions(v.shape[2])])
        outputs = entry.launch(module, q, k, vt, *descales, level=level)
    else:
        outputs = entry.launch(module, q, k, v, *descales, level=level)
    if not return_lse:
        return outputs
    o, lse = outputs
    return o, lse.reshape(lse.shape[:-1])
