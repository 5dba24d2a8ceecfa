"""A float64 reference for attention with score_mod / mask_mod, written apart from `tessera.reference` (the
unseen variants of round 22 check against it): O and LSE from the modified scores, dQ, dK, dV from a score_mod's
derivative given by hand, the gradients of captured tables summed by `np.add.at`; and `check`, which runs a
variant forward and backward through `tessera.attention` / `tessera.attention_backward` at a level against it."""

from __future__ import annotations

import warnings

import numpy as np

import tessera
from tessera.numerics import BF16, round_to


def grids(batch, heads, seq_q, seq_k):
    return (np.arange(batch)[:, None, None, None], np.arange(heads)[None, :, None, None],
            np.arange(seq_q)[None, None, :, None], np.arange(seq_k)[None, None, None, :])


def reference(q, k, v, do, score_mod, mask_mod, d_score_mod=None, captured=None, held_o=None):
    """(O, LSE, dQ, dK, dV, {table: gradient}) in float64. `d_score_mod(s, b, h, q_idx, kv_idx)` is
    d score_mod / d score (1 without); `captured[name] = (shape, reads)`, `reads(s, b, h, q_idx, kv_idx)` the
    (index grids, d score_mod / d value) of each read of the table. `held_o`: the O the backward reads in
    dPsum = rowsum(dO * O) (the kernels' O, rounded to the inputs' type), for the error that rounding alone
    makes; the exact O without."""
    q, k, v, do = (np.asarray(t, np.float64) for t in (q, k, v, do))
    batch, heads, seq_q, dim = q.shape
    heads_k, seq_k = k.shape[1], k.shape[2]
    ke, ve = (np.repeat(t, heads // heads_k, axis=1) for t in (k, v))
    s = q @ ke.transpose(0, 1, 3, 2) / np.sqrt(dim)
    grid = grids(batch, heads, seq_q, seq_k)
    modified = s if score_mod is None else np.broadcast_to(score_mod(s, *grid), s.shape).astype(np.float64)
    visible = np.ones(s.shape, bool) if mask_mod is None else np.broadcast_to(mask_mod(*grid), s.shape)
    modified = np.where(visible, modified, -np.inf)
    top = modified.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(modified - top)
    total = e.sum(-1, keepdims=True)
    seen = total > 0
    p = np.where(seen, e / np.where(seen, total, 1.0), 0.0)
    lse = np.where(seen[..., 0], top[..., 0] + np.log(np.where(seen, total, 1.0))[..., 0], -np.inf)
    o = p @ ve
    o_read = o if held_o is None else np.asarray(held_o, np.float64)
    ds_mod = p * (do @ ve.transpose(0, 1, 3, 2) - (do * o_read).sum(-1, keepdims=True))
    ds = ds_mod if d_score_mod is None else ds_mod * np.broadcast_to(d_score_mod(s, *grid), s.shape)
    ds = np.where(p > 0, ds, 0.0)
    group = (batch, heads_k, heads // heads_k, seq_k, dim)
    dq = ds @ ke / np.sqrt(dim)
    dk = (ds.transpose(0, 1, 3, 2) @ q / np.sqrt(dim)).reshape(group).sum(2)
    dv = (p.transpose(0, 1, 3, 2) @ do).reshape(group).sum(2)
    grads = {}
    for name, (shape, reads) in (captured or {}).items():
        grads[name] = np.zeros(shape)
        for index, d in reads(s, *grid):
            np.add.at(grads[name], tuple(np.broadcast_to(i, s.shape) for i in index),
                      np.where(p > 0, ds_mod * np.broadcast_to(d, s.shape), 0.0))
    return o, lse, dq, dk, dv, grads


def assert_close(name, got, want, relative=2e-2, absolute=2e-3):
    """Within `relative` of the largest finite entry plus `absolute`; the same entries infinite (LSE's -inf)."""
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=name)
    error = np.abs(got[finite] - want[finite]).max(initial=0.0)
    tolerance = relative * np.abs(want[finite]).max(initial=0.0) + absolute
    assert error <= tolerance, f"{name}: error {error:.3g} over {tolerance:.3g}"


def inputs(shape, seed=1, head_dim=64, dtype=BF16):
    """q, k, v, dO of (batch, heads, heads_k, seq_q, seq_k) rounded to `dtype` (bf16 or f16)."""
    batch, heads, heads_k, seq_q, seq_k = shape
    rng = np.random.default_rng(seed)
    q, do = (round_to(rng.standard_normal((batch, heads, seq_q, head_dim)), dtype) for _ in range(2))
    k, v = (round_to(rng.standard_normal((batch, heads_k, seq_k, head_dim)), dtype) for _ in range(2))
    return q, k, v, do


def bottom_right_causal(mask_mod, seq_q, seq_k):
    """`mask_mod` and `causal=True`'s mask (query i sees key j <= i + seq_k - seq_q): what the reference
    applies for a call with both."""
    def mask(b, h, q_idx, kv_idx):
        visible = q_idx + (seq_k - seq_q) >= kv_idx
        return visible if mask_mod is None else visible & mask_mod(b, h, q_idx, kv_idx)
    return mask


def check(shape, level, score_mod, mask_mod, d_score_mod=None, captured=None, reference_mods=None, *, head_dim=64,
          dtype=BF16, causal=False, block_mask=None):
    """Forward and backward at `level` against `reference` (of `reference_mods` where the hooks are torch), on
    `inputs(shape, 1, head_dim, dtype)`, with `causal=` and `block_mask=` (for mask_mod: `mask_mod` is then
    the reference's alone) as given. The gradients of captured tables are compared with the reference's for
    the O the kernels hold (`held_o`): summed over every score, theirs carry O's rounding to bf16 in dPsum,
    far past 2e-2 of the largest for ALiBi's slopes (the distances' weights cancel)."""
    q, k, v, do = inputs(shape, 1, head_dim, dtype)
    hooks = {"score_mod": score_mod, "causal": causal,
             **({"block_mask": block_mask} if block_mask is not None else {"mask_mod": mask_mod})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rung taken below Tile level
        o, lse = tessera.attention(q, k, v, return_lse=True, level=level, **hooks)
        grads = tessera.attention_backward(q, k, v, o, lse, do, level=level, captured_grads=bool(captured), **hooks)
    ref_score, ref_mask = reference_mods or (score_mod, mask_mod)
    if causal:
        ref_mask = bottom_right_causal(ref_mask, shape[3], shape[4])
    want = reference(q, k, v, do, ref_score, ref_mask, d_score_mod, captured)
    for name, got, expected in zip(("O", "dQ", "dK", "dV"), (o, *grads[:3]), (want[0], *want[2:5])):
        assert_close(name, got, expected)
    assert_close("LSE", lse, want[1], 1e-3, 1e-2)
    if captured:
        held = reference(q, k, v, do, ref_score, ref_mask, d_score_mod, captured, held_o=o)[5]
        for name in captured:
            assert_close(f"d {name}", grads[3][name], held[name])
