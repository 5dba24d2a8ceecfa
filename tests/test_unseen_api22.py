"""`tessera.attention` and `tessera.launch` given what a newcomer passes next (round 22 of the unseen cases), each
held to a float64 reference written here, not `tessera.reference`'s (FP8 takes only its tolerance from
`check_attention_fp8`, the rule docs/attention.md gives): arrays that are views (strided head_dim, Fortran
order, transposed V), one query row against many keys, GQA with a single key, scales of 1e-30 and 50, FP8 with
no descales and seq_q > seq_k or odd lengths; and the refusals of wrong arguments, each by name with a
documented exception type. The grid at Tile level, a slice at "target" and "ptx". About 6 s."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
import tessera.kernels
from tessera import reference as R
from tessera.runtime.attention_base import UnsupportedKernel

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


def softmax_attention(q, k, v, causal, scale=None, descales=(None, None, None)):
    """softmax(scale q k^T [+ bottom-right causal mask]) v in float64 on dequantized inputs, GQA by repetition;
    a row that sees no key is 0."""
    heads, heads_k = q.shape[1], k.shape[1]
    q, k, v = (x.astype(np.float64) * (1.0 if d is None else np.asarray(d, np.float64)[:, :, None, None])
               for x, d in zip((q, k, v), descales))
    q = q.reshape(q.shape[0], heads_k, heads // heads_k, *q.shape[2:])  # query head h reads key head h // group
    s = np.einsum("bkgqd,bksd->bkgqs", q, k) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1 + s.shape[-1] - s.shape[-2])
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bkgqs,bksd->bkgqd", p / np.where(l > 0, l, 1), v)
    return o.reshape(o.shape[0], heads, *o.shape[3:])


def _bf16_tolerance(o, q, k, v, causal, scale):
    return R.check_attention(o, q, k, v, o.dtype, causal=causal, scale=scale).tolerance


VIEWS = {  # name: (q, k, v) made from a generator, causal, scale
    "strided head_dim, Fortran K, transposed V": (
        lambda g: (g.standard_normal((1, 2, 40, 128)).astype(BF16)[..., ::2],
                   np.asfortranarray(g.standard_normal((1, 2, 33, 64)).astype(BF16)),
                   g.standard_normal((1, 2, 64, 33)).astype(BF16).swapaxes(-1, -2)), True, None),
    "one query row, head_dim 256": (
        lambda g: tuple(g.standard_normal((1, 1, n, 256)).astype(BF16) for n in (1, 70, 70)), True, None),
    "GQA 4:1 against one key": (
        lambda g: (g.standard_normal((1, 4, 9, 128)).astype(BF16),
                   *(g.standard_normal((1, 1, 1, 128)).astype(BF16) for _ in range(2))), False, None),
    "f16, causal seq_q > seq_k": (
        lambda g: (g.standard_normal((1, 2, 50, 64)).astype(np.float16),
                   *(g.standard_normal((1, 2, 7, 64)).astype(np.float16) for _ in range(2))), True, None),
    "scale 1e-30 (uniform weights)": (
        lambda g: tuple(g.standard_normal((1, 1, 30, 64)).astype(BF16) for _ in range(3)), True, 1e-30),
    "scale 50 (near one-hot)": (
        lambda g: tuple(g.standard_normal((1, 1, 30, 64)).astype(BF16) for _ in range(3)), False, 50.0),
}
LOWERED = "strided head_dim, Fortran K, transposed V"


def _views(name, level):
    make, causal, scale = VIEWS[name]
    q, k, v = make(np.random.default_rng(len(name)))
    o = tessera.attention(q, k, v, causal=causal, scale=scale, level=level)
    assert o.dtype == q.dtype and o.shape == q.shape
    error = np.abs(o.astype(np.float64) - softmax_attention(q, k, v, causal, scale)).max()
    assert error <= _bf16_tolerance(o, q, k, v, causal, scale), f"{name} at {level}: {error}"


@pytest.mark.parametrize("name", VIEWS)
def test_views_and_edge_shapes_at_tile_level(name):
    _views(name, "tile")


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_views_lowered(level):
    _views(LOWERED, level)


FP8 = {  # name: (batch, heads, heads_k, seq_q, seq_k, head_dim, causal, descales drawn, scale)
    "no descales, causal seq_q > seq_k, d64": (1, 1, 1, 91, 37, 64, True, False, None),
    "GQA 2:1, causal 37 x 91, d64": (1, 2, 1, 37, 91, 64, True, True, None),
    "batch 2, causal 13 x 129, d128": (2, 2, 2, 13, 129, 128, True, True, None),
    "45 x 45, d128, scale 0.05": (1, 1, 1, 45, 45, 128, False, True, 0.05),
}


def _fp8(name, level):
    batch, heads, heads_k, seq_q, seq_k, d, causal, drawn, scale = FP8[name]
    g = np.random.default_rng(seq_q * seq_k)
    q = (g.standard_normal((batch, heads, seq_q, d)) * 3).astype(E4M3)
    k, v = ((g.standard_normal((batch, heads_k, seq_k, d)) * 3).astype(E4M3) for _ in range(2))
    descales = tuple((g.random((batch, heads_k)) * 2).astype(np.float32) if drawn else None for _ in range(3))
    o = tessera.attention(q, k, v, causal=causal, scale=scale, level=level,
                          **{f"descale_{x}": d for x, d in zip("qkv", descales) if d is not None})
    assert o.dtype == BF16 and o.shape == q.shape
    error = np.abs(o.astype(np.float64) - softmax_attention(q, k, v, causal, scale, descales)).max()
    tolerance = R.check_attention_fp8(o, q, k, v, *descales, causal=causal, scale=scale).tolerance
    assert error <= tolerance, f"{name} at {level}: {error} > {tolerance}"


@pytest.mark.parametrize("name", FP8)
def test_fp8_at_tile_level(name):
    _fp8(name, "tile")


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_fp8_lowered(level):
    _fp8("no descales, causal seq_q > seq_k, d64", level)


def _bf16(*shape):
    return np.zeros(shape, BF16)


REFUSALS = [  # (call, exception type, message)
    (lambda: tessera.attention(_bf16(1, 1, 16, 64), _bf16(1, 1, 16, 128), _bf16(1, 1, 16, 128), level="tile"),
     ValueError, "attention: q, k and v must have the same head_dim, got 64, 128, 128"),
    (lambda: tessera.attention(*(np.ones((1, 1, 16, 64), np.int32),) * 3, level="tile"),
     UnsupportedKernel, "attention: element type int32 is not supported"),
    (lambda: tessera.attention(_bf16(1, 16, 64), _bf16(1, 16, 64), _bf16(1, 16, 64), level="tile"),
     ValueError, "attention: q must be 4-D [batch, heads, seq, head_dim], got shape (1, 16, 64)"),
    (lambda: tessera.attention(_bf16(1, 1, 16, 80), _bf16(1, 1, 16, 80), _bf16(1, 1, 16, 80), level="tile"),
     UnsupportedKernel, "head_dim 80 is not supported by Tessera's attention kernels (supported: 64, 96, 128, 192, 256)"),
    (lambda: tessera.attention(_bf16(1, 1, 16, 64), _bf16(1, 1, 16, 64), _bf16(1, 1, 16, 64), scale=-0.3,
                               level="tile"),
     ValueError, "scale must be a positive finite number"),
    (lambda: tessera.attention(*(np.zeros((1, 2, 16, 96), E4M3),) * 3, level="tile"),
     UnsupportedKernel, "head_dim 96 is not supported"),
    (lambda: tessera.attention(*(np.zeros((1, 2, 16, 64), E4M3),) * 3, descale_q=np.ones(2, np.float32),
                               level="tile"),
     ValueError, "attention: descale_q must have shape [batch, heads_k] = (1, 2), got (2,)"),
    (lambda: tessera.kernels.flash_attention(head_dim=160), ValueError,
     "head_dim must be one of 64, 96, 128, 192, 256; got 160"),
    (lambda: tessera.kernels.flash_attention(head_dim=64, block_n=100), ValueError,
     "block_n must be a positive multiple of 16; got 100"),
    (lambda: tessera.launch(tessera.kernels.flash_attention(head_dim=64), _bf16(1, 1, 70, 64), _bf16(1, 1, 70, 128),
                            _bf16(1, 1, 70, 64), level="tile"),
     ValueError, "tessera.launch: input K of @flash_attention_d64_bf16, dimension 3 (64): the kernel is compiled for "
                 "64, got 128"),
    (lambda: tessera.launch(tessera.kernels.flash_attention(head_dim=64), *(_bf16(1, 1, 70, 64),) * 3, level="tile",
                            seq_q=71),
     ValueError, "tessera.launch: size seq_q=71 contradicts the inputs, which give seq_q=70"),
]


@pytest.mark.parametrize("call, error, message", REFUSALS)
def test_wrong_arguments_are_refused_by_name(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_flexattention_enable_gqa_ports_unchanged():
    """flex_attention(..., enable_gqa=True) is how FlexAttention users write GQA: accepted, the same numbers as
    without it; enable_gqa=False with fewer K/V heads is refused by name, as flex_attention refuses it (a plain
    TypeError before: no such argument)."""
    rng = np.random.default_rng(22)
    q = rng.standard_normal((1, 4, 40, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((1, 2, 40, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    mod = lambda score, b, h, q_idx, kv_idx: score * 0.5  # noqa: E731
    with_flag = tessera.attention(q, k, v, score_mod=mod, level="tile", enable_gqa=True)
    without = tessera.attention(q, k, v, score_mod=mod, level="tile")
    assert np.array_equal(np.asarray(with_flag, np.float32), np.asarray(without, np.float32))
    with pytest.raises(ValueError, match=r"attention: enable_gqa=False, but q has 4 heads and k 2"):
        tessera.attention(q, k, v, level="tile", enable_gqa=False)
    with pytest.raises(TypeError, match="enable_gqa is True, False or None"):
        tessera.attention(q, k, v, level="tile", enable_gqa="yes")
    tessera.attention(q, q, q, level="tile", enable_gqa=False)
