"""The serving, training and GEMM entry points on round 22's unseen cases, against float64 NumPy written here:
split-KV (1, 3, "auto") with seq_k under splits x block and 1 to 7 decoding queries over 8 query heads on 1 or 2 K/V
heads; packed sequences whose keys are all empty; a paged cache of page_size 5 at head_dim 128 with pages out of
order, NaN in every row no sequence holds, and 7 causal queries over one cached key (rows that see no key); a
16-row page table appended through with GQA 8:1 and "auto" splits; `attention_backward` at head_dim 128 in f16 with
GQA 4:1 and seq_q != seq_k both ways; `tessera.gemm` in every layout at odd M, N, K in bf16 and f16. Tile level for
the grid (about 4 s); one case of each at target and PTX level under `-m slow` (about 20 s)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import tessera

TYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16)}


def attention64(q, k, v, causal: bool):
    """float64 (o, lse) of q [B, H, Sq, D] over k, v [B, H_k, Sk, D] (query head h reads K/V head h // (H / H_k)),
    bottom-right causal; a row that sees no key has o 0 and lse -inf."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, 1), np.repeat(v, groups, 1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    seq_q, seq_k = s.shape[-2:]
    if causal:
        s = np.where(np.arange(seq_k)[None] <= np.arange(seq_q)[:, None] + seq_k - seq_q, s, -np.inf)
    m = s.max(-1, keepdims=True, initial=-np.inf)
    seen = np.isfinite(m)
    e = np.where(seen, np.exp(s - np.where(seen, m, 0)), 0)
    total = e.sum(-1, keepdims=True)
    o = np.where(seen, e / np.where(seen, total, 1) @ v, 0)
    return o, np.where(seen, np.log(np.where(seen, total, 1)) + np.where(seen, m, 0), -np.inf)[..., 0]


def assert_close(o, lse, want_o, want_lse):
    assert np.abs(np.asarray(o, np.float64) - want_o).max(initial=0) < 2e-2
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    assert np.abs(lse[finite] - want_lse[finite]).max(initial=0) < 1e-4


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


SPLITS = [  # heads, heads_k, seq_q, seq_k, causal, num_splits, head_dim
    (2, 2, 1, 100, False, 3, 64), (2, 2, 5, 100, True, 3, 64), (8, 1, 1, 300, False, "auto", 64),
    (8, 2, 7, 300, True, 3, 64), (8, 2, 3, 129, False, 1, 128), (8, 1, 4, 50, True, "auto", 128),
    (2, 2, 7, 3, True, 3, 64),
]


@pytest.mark.parametrize("case", SPLITS)
def test_split_kv_decoding_with_gqa(case, level="tile"):
    heads, heads_k, seq_q, seq_k, causal, splits, d = case
    rng = np.random.default_rng(1)
    q, k, v = bf16(rng, 1, heads, seq_q, d), bf16(rng, 1, heads_k, seq_k, d), bf16(rng, 1, heads_k, seq_k, d)
    o, lse = tessera.attention(q, k, v, causal=causal, num_splits=splits, return_lse=True, level=level)
    assert_close(o, lse, *attention64(q, k, v, causal))


def test_packed_sequences_whose_keys_are_all_empty():
    rng = np.random.default_rng(2)
    q, k = bf16(rng, 7, 2, 64), bf16(rng, 0, 1, 64)
    o, lse = tessera.attention(q, k, k, cu_seqlens_q=np.array([0, 2, 7], np.int32),
                               cu_seqlens_k=np.array([0, 0, 0], np.int32), max_seqlen_q=5, max_seqlen_k=1,
                               return_lse=True, level="tile")
    assert np.array_equal(np.asarray(o, np.float64), np.zeros(q.shape)) and np.all(np.isneginf(lse))


PAGED = {  # page_size, pages, table, cache_seqlens, heads, heads_k, seq_q, seq_new, causal, num_splits, head_dim
    "page_5_d128_rows_see_no_key": (5, 12, [[11, 3, 7, 0, 9], [2, 10, 4, 6, 1]], [23, 1], 4, 2, 7, 0, True, 1, 128),
    "page_16_append_gqa_8_auto": (16, 9, [[7, 2, 5, 0], [8, 1, 3, 6]], [49, 17], 8, 1, 4, 2, True, "auto", 64),
}


def run_paged(name, level="tile"):
    """One PAGED case: every cache row no sequence holds (after the append) is NaN; o and lse against float64
    over each sequence's tokens gathered through the table."""
    page_size, pages, table, lens, heads, heads_k, seq_q, seq_new, causal, splits, d = PAGED[name]
    rng = np.random.default_rng(3)
    table, lens = np.array(table, np.int32), np.array(lens, np.int32)
    k_cache, v_cache = bf16(rng, pages, page_size, heads_k, d), bf16(rng, pages, page_size, heads_k, d)
    q = bf16(rng, len(lens), seq_q, heads, d)
    new = [bf16(rng, len(lens), seq_new, heads_k, d) for _ in range(2)] if seq_new else [None, None]
    held = {(b, t): (table[b, t // page_size], t % page_size)
            for b in range(len(lens)) for t in range(lens[b] + seq_new)}
    keys = [np.concatenate([k_cache[held[b, t]][None] for t in range(lens[b])] + ([new[0][b]] if seq_new else []))
            for b in range(len(lens))]
    values = [np.concatenate([v_cache[held[b, t]][None] for t in range(lens[b])] + ([new[1][b]] if seq_new else []))
              for b in range(len(lens))]
    unheld = np.ones((pages, page_size), bool)
    for row in held.values():
        unheld[row] = False
    k_cache[unheld], v_cache[unheld] = np.nan, np.nan
    o, lse = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=table, k_new=new[0],
                                            v_new=new[1], causal=causal, num_splits=splits, return_lse=True,
                                            level=level)
    for b in range(len(lens)):
        want = attention64(q[b].swapaxes(0, 1)[None], keys[b].swapaxes(0, 1)[None], values[b].swapaxes(0, 1)[None],
                           causal)
        assert_close(o[b].swapaxes(0, 1)[None], lse[b][None], *want)


@pytest.mark.parametrize("name", PAGED)
def test_paged_cache_out_of_order_with_nan_rows(name):
    run_paged(name)


def gradients64(q, k, v, do, causal: bool):
    """float64 (dq, dk, dv): dS = P (dO V^T - rowsum(dO O)) / sqrt(d), dK and dV summed over each K/V head's group."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    heads, heads_k, d = q.shape[1], k.shape[1], q.shape[-1]
    kk, vv = np.repeat(k, heads // heads_k, 1), np.repeat(v, heads // heads_k, 1)
    s = q @ np.swapaxes(kk, -1, -2) / np.sqrt(d)
    seq_q, seq_k = s.shape[-2:]
    if causal:
        s = np.where(np.arange(seq_k)[None] <= np.arange(seq_q)[:, None] + seq_k - seq_q, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.where(np.isfinite(m), np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    p /= np.where(p.sum(-1, keepdims=True) > 0, p.sum(-1, keepdims=True), 1)
    ds = p * (do @ np.swapaxes(vv, -1, -2) - (do * (p @ vv)).sum(-1, keepdims=True)) / np.sqrt(d)
    fold = (lambda x: x.reshape(x.shape[0], heads_k, -1, *x.shape[2:]).sum(2))
    return ds @ kk, fold(np.swapaxes(ds, -1, -2) @ q), fold(np.swapaxes(p, -1, -2) @ do)


BACKWARD = [  # dtype, heads, heads_k, seq_q, seq_k, causal, head_dim
    ("f16", 4, 1, 65, 129, True, 128), ("bf16", 2, 1, 130, 3, True, 128), ("f16", 2, 2, 1, 200, False, 128),
    ("bf16", 8, 2, 17, 17, True, 64), ("bf16", 2, 2, 101, 37, True, 64),
]


@pytest.mark.parametrize("case", BACKWARD)
def test_backward_at_head_dims_64_and_128(case, level="tile"):
    dtype, heads, heads_k, seq_q, seq_k, causal, d = case
    rng = np.random.default_rng(4)
    q, do = (rng.standard_normal((1, heads, seq_q, d)).astype(TYPES[dtype]) for _ in range(2))
    k, v = (rng.standard_normal((1, heads_k, seq_k, d)).astype(TYPES[dtype]) for _ in range(2))
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, level=level)
    for got, want in zip(tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level=level),
                         gradients64(q, k, v, do, causal)):
        assert got.dtype == TYPES[dtype] and got.shape == want.shape
        assert np.abs(got.astype(np.float64) - want).max() <= 2e-2 * max(1.0, np.abs(want).max())


GEMM = list(itertools.product([(1, 1, 1), (7, 9, 13), (129, 3, 65), (2, 17, 200)], [False, True], [False, True],
                              ["bf16", "f16"]))


@pytest.mark.parametrize("shape,transpose_a,transpose_b,dtype", GEMM)
def test_gemm_in_every_layout_at_odd_sizes(shape, transpose_a, transpose_b, dtype, level="tile"):
    m, n, k = shape
    rng = np.random.default_rng(5)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(TYPES[dtype])
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(TYPES[dtype])
    want = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    c = tessera.gemm(a, b, transpose_a=transpose_a, transpose_b=transpose_b, level=level)
    assert c.shape == (m, n) and c.dtype == np.float32
    assert np.abs(c - want).max() <= 1e-5 * np.sqrt(k) * (1 + np.abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_a_slice_below_tile_level(level):
    test_split_kv_decoding_with_gqa(SPLITS[3], level)
    run_paged("page_16_append_gqa_8_auto", level)
    test_backward_at_head_dims_64_and_128(BACKWARD[0], level)
    for transpose_a, transpose_b in itertools.product([False, True], repeat=2):
        test_gemm_in_every_layout_at_odd_sizes((7, 9, 13), transpose_a, transpose_b, "bf16", level)
