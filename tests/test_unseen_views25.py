"""NumPy views a serving or training loop passes without copying, round 25 of the unseen cases: the attention
forward and backward, the KV cache and packed sequences given a transposed view (BSHD as BHSD), K broadcast over
the heads with stride 0 (read-only), V with a negative stride, dO in Fortran order, k_new and v_new appended from
views, packed q sliced out of a larger array with a strided head_dim beside it; causal with seq_q > seq_k (rows that
see no key), GQA, an empty cache and empty packed sequences. Each against a float64 reference written here; Tile
level, and the backward once at PTX level. About 4 s."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from test_unseen_backward import assert_close, backward64

BF16 = ml_dtypes.bfloat16


def _views(rng, seq_q: int, seq_k: int):
    """q [1, 4, seq_q, 64] a transposed view, k [1, 2, seq_k, 64] broadcast over the heads (stride 0, read-only),
    v a negative-stride view, dO Fortran-ordered."""
    q = rng.standard_normal((1, seq_q, 4, 64)).astype(BF16).swapaxes(1, 2)
    k = np.broadcast_to(rng.standard_normal((1, 1, seq_k, 64)).astype(BF16), (1, 2, seq_k, 64))
    v = rng.standard_normal((1, 2, 2 * seq_k, 64)).astype(BF16)[:, :, ::-2]
    do = np.asfortranarray(rng.standard_normal((1, 4, seq_q, 64)).astype(BF16))
    return q, k, v, do


@pytest.mark.parametrize("causal, level, seq_q, seq_k", [(True, "tile", 90, 33), (False, "tile", 90, 33),
                                                         (True, "ptx", 40, 17)])
def test_forward_and_backward_of_views(causal, level, seq_q, seq_k):
    q, k, v, do = _views(np.random.default_rng(25), seq_q, seq_k)
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, level=level)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level=level)
    want_o, _, *want = backward64(q, k, v, do, causal)
    assert_close(o, want_o, "o")
    for name, got, expected, x in zip(("dq", "dk", "dv"), grads, want, (q, k, v)):
        assert got.shape == x.shape, name
        assert_close(got, expected, name)


def _softmax_attention(q, k, v, causal):
    """float64 softmax(q k^T / 8 [bottom-right causal]) v of one sequence [seq, heads, 64], GQA by h // group; 0
    where a row sees no key."""
    q, k, v = (np.asarray(x, np.float64).swapaxes(0, 1) for x in (q, k, v))
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, 0), np.repeat(v, group, 0)
    s = q @ k.swapaxes(-1, -2) / 8.0
    sq, sk = s.shape[-2:]
    if causal:
        s = np.where(np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    m = s.max(-1, keepdims=True, initial=-np.inf)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    total = p.sum(-1, keepdims=True)
    return (p / np.where(total > 0, total, 1) @ v).swapaxes(0, 1)


def test_kv_cache_appending_views():
    """k_new a transposed view, v_new a strided one, appended to sequence 0 (50 cached) and to an empty sequence 1;
    three draft tokens, causal, GQA 2:1."""
    rng = np.random.default_rng(25)
    k_cache, v_cache = (rng.standard_normal((2, 100, 2, 64)).astype(BF16) for _ in range(2))
    q = rng.standard_normal((2, 4, 3, 64)).astype(BF16).swapaxes(1, 2)
    k_new = rng.standard_normal((2, 2, 3, 64)).astype(BF16).swapaxes(1, 2)
    v_new = rng.standard_normal((2, 3, 2, 128)).astype(BF16)[..., ::2]
    lengths = np.array([50, 0], np.int32)
    o = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, k_new=k_new, v_new=v_new,
                                       causal=True, level="tile")
    for b, n in enumerate(lengths + 3):
        assert np.array_equal(k_cache[b, n - 3:n], k_new[b]) and np.array_equal(v_cache[b, n - 3:n], v_new[b])
        assert_close(o[b], _softmax_attention(q[b], k_cache[b, :n], v_cache[b, :n], True), f"sequence {b}")


@pytest.mark.parametrize("causal", [False, True])
def test_packed_sequences_of_views(causal):
    """q sliced out of a larger array, k with a strided head_dim, v Fortran-ordered; an empty sequence and one with
    no key among them."""
    rng = np.random.default_rng(25)
    cu_q, cu_k = np.array([0, 5, 5, 70, 71], np.int32), np.array([0, 40, 41, 141, 141], np.int32)
    q = rng.standard_normal((2, 71, 4, 64)).astype(BF16)[1]
    k = rng.standard_normal((141, 2, 128)).astype(BF16)[:, :, ::2]
    v = np.asfortranarray(rng.standard_normal((141, 2, 64)).astype(BF16))
    o = tessera.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=65, max_seqlen_k=100,
                          causal=causal, level="tile")
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        assert_close(o[rows], _softmax_attention(q[rows], k[keys], v[keys], causal), f"sequence {b}")
