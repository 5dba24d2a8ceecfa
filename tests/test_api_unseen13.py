"""The serving and training entry points given what a serving stack passes next (round 7 of the unseen cases):
`tessera.attention_with_kvcache` (paged and contiguous caches, pages out of order and shared, page sizes that
divide no sequence, tables longer than needed, cache_seqlens of 0 and 1, appends that fill the cache exactly,
split-KV with more splits than key blocks, GQA ratios 3 and 5), packed sequences of length 0 and 1,
seq_q != seq_k both ways under bottom-right causal masks, `tessera.attention_backward` and
`tessera.runtime.autograd.attention` at odd lengths with GQA, at Tile level against float64 NumPy, a slice in
the CTA simulator and the PTX executor (`-m slow`); what no kernel takes refused by name. About 6 s; the
target/PTX slice about 12 s under `-m slow`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.reference_attention import attention as reference_attention
from tessera.reference_attention import attention_lse, expand_heads
from tessera.reference_backward import attention_backward as reference_backward

BF16 = ml_dtypes.bfloat16
O_TOLERANCE = 2e-2
"""|o - float64| for bf16 outputs of unit-variance inputs (docs/serving.md's examples use the same bound)."""
LSE_TOLERANCE = 1e-4
GRAD_TOLERANCE = 2e-2
"""max |dx - float64| / max(1, max |float64|) for bf16 gradients summed by autograd (the backward's own rule,
`reference.check_attention_backward`, for one call's)."""


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


def reference_sequence(q, k, v, causal: bool):
    """float64 o [H, Sq, D] and lse [H, Sq] of one sequence, q [H, Sq, D], k and v [H_k, Sk, D] (GQA), causal
    bottom-right; a row that sees no key (no key at all, or Sq > Sk under the mask) has o 0 and lse -inf."""
    heads, seq_q, head_dim = q.shape
    if k.shape[1] == 0:
        return np.zeros((heads, seq_q, head_dim)), np.full((heads, seq_q), -np.inf)
    q, k, v = q[None], expand_heads(k[None], heads), expand_heads(v[None], heads)
    return reference_attention(q, k, v, causal=causal)[0], attention_lse(q, k, causal=causal)[0]


def check(o, lse, ro, rl):
    """o within O_TOLERANCE of the float64 ro; lse -inf exactly where rl is, else within LSE_TOLERANCE."""
    assert np.abs(np.asarray(o, np.float64) - ro).max(initial=0) < O_TOLERANCE
    finite = np.isfinite(rl)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.abs(lse[finite] - rl[finite]).max(initial=0) < LSE_TOLERANCE


# region attention_with_kvcache against float64

KVCACHE = {
    # name: (batch, seq_q, heads, heads_k, head_dim, cache_seqlens, page_size, num_pages, page_table, seq_new,
    #        causal, num_splits); page_table None: a contiguous cache of page_size rows a sequence
    "lengths_0_1_33": (3, 1, 4, 2, 64, [0, 1, 33], 16, 9, [[8, 1, 2], [3, 4, 5], [6, 0, 7]], 0, False, 1),
    "every_length_0": (2, 1, 2, 2, 64, [0, 0], 16, 4, [[0, 1], [2, 3]], 0, False, 1),
    "shared_pages_out_of_order_page_48": (2, 3, 3, 1, 64, [50, 70], 48, 4, [[3, 1, 0, 0], [3, 2, 0, 1]], 0, True, 1),
    "splits_past_the_key_blocks": (2, 1, 4, 4, 64, [20, 5], 16, 6, [[0, 1, 2], [3, 4, 5]], 0, False, 7),
    "gqa_3_causal_splits": (2, 2, 6, 2, 64, [30, 17], 16, 6, [[5, 1, 2], [3, 4, 0]], 0, True, 2),
    "mqa_5": (1, 1, 5, 1, 64, [100], 32, 5, [[4, 2, 3, 1, 0]], 0, False, 1),
    "append_fills_the_pages": (2, 2, 2, 1, 64, [30, 0], 16, 4, [[0, 1], [2, 3]], 2, True, 1),
    "contiguous_37_lengths_0_37": (2, 1, 2, 2, 64, [0, 37], 37, None, None, 0, False, 1),
    "contiguous_append_fills": (2, 4, 2, 2, 64, [33, 0], 37, None, None, 4, True, 1),
    "seq_q_past_the_keys_causal_splits": (2, 5, 2, 2, 64, [3, 1], 16, 2, [[0], [1]], 0, True, 3),
    "head_dim_128_tma_pages": (2, 1, 2, 1, 128, [130, 255], 128, 5, [[4, 0], [2, 1]], 0, False, 3),
    "page_size_1": (2, 1, 2, 1, 64, [5, 3], 1, 9, [[8, 7, 6, 5, 4, 0, 0, 0], [1, 2, 3, 0, 0, 0, 0, 0]], 0, False, 1),
    "page_size_3_append": (2, 2, 2, 1, 64, [5, 3], 3, 6, [[5, 4, 3], [0, 1, 2]], 1, True, 1),
    "table_longer_than_needed": (1, 1, 2, 1, 64, [10], 16, 3, [[2, 0, 1, 1, 1, 1, 1, 1]], 0, False, 1),
    "head_dim_256_page_48": (2, 1, 2, 1, 256, [50, 96], 48, 5, [[4, 3, 0], [1, 2, 0]], 0, True, 1),
}


def run_kvcache(rng, case, level="tile"):
    """Run one KVCACHE case; check o, lse and the appended cache rows against float64 on the tokens each
    sequence holds after the append."""
    batch, seq_q, heads, heads_k, d, lens, page_size, num_pages, table, seq_new, causal, splits = case
    q = bf16(rng, batch, seq_q, heads, d)
    cache_shape = (num_pages, page_size, heads_k, d) if table is not None else (batch, page_size, heads_k, d)
    k_cache, v_cache = bf16(rng, *cache_shape), bf16(rng, *cache_shape)
    tokens = {}  # sequence b's token t -> (page, row)
    for b in range(batch):
        for t in range(lens[b] + seq_new):
            tokens[b, t] = (table[b][t // page_size], t % page_size) if table is not None else (b, t)
    k_new, v_new = (bf16(rng, batch, seq_new, heads_k, d) for _ in range(2)) if seq_new else (None, None)
    page_table = np.array(table, np.int32) if table is not None else None
    before_k, before_v = k_cache.copy(), v_cache.copy()
    o, lse = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lens, np.int32),
                                            page_table=page_table, k_new=k_new, v_new=v_new, causal=causal,
                                            num_splits=splits, return_lse=True, level=level)
    assert o.shape == q.shape and lse.shape == (batch, heads, seq_q)
    for b in range(batch):
        n = lens[b] + seq_new
        rows = [tokens[b, t] for t in range(n)]
        k = np.array([before_k[r] if t < lens[b] else k_new[b, t - lens[b]] for t, r in enumerate(rows)], BF16)
        v = np.array([before_v[r] if t < lens[b] else v_new[b, t - lens[b]] for t, r in enumerate(rows)], BF16)
        k, v = (x.reshape(n, heads_k, d).transpose(1, 0, 2) for x in (k, v))
        for t in range(lens[b], n):  # appended in place through the table
            assert np.array_equal(k_cache[tokens[b, t]], k_new[b, t - lens[b]])
            assert np.array_equal(v_cache[tokens[b, t]], v_new[b, t - lens[b]])
        check(o[b].transpose(1, 0, 2), lse[b], *reference_sequence(q[b].transpose(1, 0, 2), k, v, causal))


@pytest.mark.parametrize("name", list(KVCACHE))
def test_kvcache_of_unseen_tables_and_lengths(name, rng):
    run_kvcache(rng, KVCACHE[name])


# endregion

# region packed sequences and dense attention, seq_q != seq_k both ways

VARLEN = {
    # name: (query lengths, key lengths, heads, heads_k, causal, num_splits, seqused_k)
    "lengths_0_and_1": ([0, 1, 7, 130], [5, 0, 1, 200], 4, 2, True, 1, None),
    "more_queries_than_keys_causal": ([9, 3], [4, 3], 3, 1, True, 1, None),
    "gqa_3_splits_past_the_key_blocks": ([1, 1, 2], [10, 0, 300], 6, 2, False, 9, None),
    "gqa_5_causal_splits": ([3, 2], [40, 2], 5, 1, True, 3, None),
    "seqused_k_0": ([3, 2], [40, 20], 2, 2, True, 1, [0, 7]),
}


def run_varlen(rng, case, level="tile"):
    """Run one VARLEN case (three packed rows past the last sequence) against float64 sequence by sequence."""
    lengths_q, lengths_k, heads, heads_k, causal, splits, used = case
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lengths_q, lengths_k))
    q = bf16(rng, int(cu_q[-1]) + 3, heads, 64)  # three rows no sequence covers
    k, v = bf16(rng, int(cu_k[-1]), heads_k, 64), bf16(rng, int(cu_k[-1]), heads_k, 64)
    extra = {} if used is None else {"seqused_k": np.array(used, np.int32)}
    o, lse = tessera.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lengths_q),
                               max_seqlen_k=max(lengths_k), causal=causal, num_splits=splits, return_lse=True,
                               level=level, **extra)
    for b in range(len(lengths_q)):
        keys = slice(cu_k[b], cu_k[b] + (lengths_k[b] if used is None else used[b]))
        rows = slice(cu_q[b], cu_q[b + 1])
        ro, rl = reference_sequence(q[rows].transpose(1, 0, 2), k[keys].transpose(1, 0, 2), v[keys].transpose(1, 0, 2), causal)
        check(o[rows].transpose(1, 0, 2), lse[:, rows], ro, rl)
    assert not o[cu_q[-1]:].astype(np.float32).any()


@pytest.mark.parametrize("name", list(VARLEN))
def test_varlen_of_unseen_lengths(name, rng):
    run_varlen(rng, VARLEN[name])


DENSE = [  # (batch, heads, heads_k, seq_q, seq_k, head_dim, causal, num_splits)
    (1, 2, 2, 150, 20, 64, True, 1),   # 130 rows see no key
    (2, 6, 2, 3, 300, 64, True, 1),
    (1, 5, 1, 1, 77, 64, True, 5),
    (1, 3, 1, 130, 7, 64, True, 4),
    (1, 1, 1, 50, 49, 256, True, 1),
]


@pytest.mark.parametrize("batch,heads,heads_k,seq_q,seq_k,head_dim,causal,splits", DENSE)
def test_dense_bottom_right_causal_both_ways(batch, heads, heads_k, seq_q, seq_k, head_dim, causal, splits, rng):
    """docs/attention.md: causal masks are aligned bottom-right (query i sees keys up to i + seq_k - seq_q)."""
    q, k, v = bf16(rng, batch, heads, seq_q, head_dim), *(bf16(rng, batch, heads_k, seq_k, head_dim) for _ in "kv")
    o, lse = tessera.attention(q, k, v, causal=causal, num_splits=splits, return_lse=True, level="tile")
    for b in range(batch):
        check(o[b], lse[b], *reference_sequence(q[b], k[b], v[b], causal))


# endregion

# region the backward and autograd


@pytest.mark.parametrize("heads,heads_k,seq_q,seq_k", [(3, 1, 37, 53), (2, 2, 53, 37), (5, 1, 1, 29), (4, 2, 130, 3)])
def test_backward_at_odd_lengths_causal_and_grouped(heads, heads_k, seq_q, seq_k, rng):
    q, do = bf16(rng, 1, heads, seq_q, 64), bf16(rng, 1, heads, seq_q, 64)
    k, v = bf16(rng, 1, heads_k, seq_k, 64), bf16(rng, 1, heads_k, seq_k, 64)
    o, lse = tessera.attention(q, k, v, causal=True, return_lse=True, level="tile")
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=True, level="tile")
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    for comparison in reference.check_attention_backward(grads, q, k, v, o, do, BF16, causal=True):
        assert comparison.ok, comparison


def test_autograd_of_self_attention_sums_the_three_gradients():
    """q = k = v one tensor: its grad is dq + dk + dv (each bf16, summed by autograd in bf16) against the float64
    sum; q k^T is nearly one-hot here, so the gradients are small and the bound is absolute."""
    torch = pytest.importorskip("torch")
    from tessera.runtime.autograd import attention

    x = torch.randn((1, 2, 9, 64), generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).requires_grad_(True)
    weights = torch.linspace(-1, 1, 64)
    (attention(x, x, x, causal=True, level="tile").float() * weights).sum().backward()
    xn, do = x.detach().float().numpy().astype(BF16), np.broadcast_to(weights.numpy(), x.shape).astype(BF16)
    want = sum(reference_backward(xn, xn, xn, do, causal=True))
    assert np.abs(x.grad.double().numpy() - want).max() <= GRAD_TOLERANCE * max(1.0, np.abs(want).max())


def test_autograd_through_two_calls_sharing_k_and_v():
    torch = pytest.importorskip("torch")
    from tessera.runtime.autograd import attention

    gen = torch.Generator().manual_seed(0)
    leaves = [torch.randn(shape, generator=gen).to(torch.bfloat16).requires_grad_(True)
              for shape in ((1, 6, 33, 64), (1, 2, 45, 64), (1, 2, 45, 64), (1, 6, 7, 64))]
    q, k, v, q2 = leaves
    loss = attention(q, k, v, causal=True, level="tile").float().sum() + \
        (attention(q2, k, v, level="tile").float() ** 2).sum()
    loss.backward()

    exact = [x.detach().double().requires_grad_(True) for x in leaves]

    def sdpa(q, k, v, causal):
        k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))
        s = q @ k.transpose(-1, -2) / 8
        if causal:
            seq_q, seq_k = s.shape[-2:]
            s = s.masked_fill(torch.arange(seq_k)[None] > torch.arange(seq_q)[:, None] + seq_k - seq_q, -torch.inf)
        return torch.softmax(s, -1) @ v

    (sdpa(*exact[:3], True).sum() + (sdpa(exact[3], *exact[1:3], False) ** 2).sum()).backward()
    for got, want in zip(leaves, exact):
        assert ((got.grad.double() - want.grad).abs().max() <= GRAD_TOLERANCE * max(1.0, want.grad.abs().max())).item()


# endregion

# region PyTorch views


def test_non_contiguous_torch_views():
    """A transposed q, a cache sliced along head_dim and a transposed v_cache give the contiguous copies'
    results bit for bit, and k_new lands in the sliced cache's own storage."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(shape, generator=gen).to(torch.bfloat16)

    q = randn(2, 4, 1, 64).transpose(1, 2)
    k_whole = randn(5, 16, 2, 128)
    k_cache, v_cache = k_whole[..., 64:], randn(5, 2, 16, 64).transpose(1, 2)
    table, lens = torch.tensor([[4, 0], [2, 1]], dtype=torch.int32), torch.tensor([20, 3], dtype=torch.int32)
    k_new, v_new = randn(2, 1, 2, 64), randn(2, 1, 2, 64)
    k_copy, v_copy = k_cache.clone(), v_cache.clone()
    o = tessera.attention_with_kvcache(q, k_cache, v_cache, lens, table, k_new, v_new, level="tile")
    want = tessera.attention_with_kvcache(q.contiguous(), k_copy, v_copy, lens, table, k_new, v_new, level="tile")
    assert torch.equal(o, want) and torch.equal(k_cache, k_copy) and torch.equal(v_cache, v_copy)
    assert torch.equal(k_whole[0, 4, :, 64:], k_new[0, 0])  # token 20 of sequence 0: page table[0, 1] = 0, row 4

    q, k = randn(1, 40, 4, 64).transpose(1, 2), randn(1, 2, 90, 128)[..., :64]
    v = randn(1, 90, 2, 64).transpose(1, 2)
    o = tessera.attention(q, k, v, causal=True, level="tile")
    assert torch.equal(o, tessera.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, level="tile"))


# endregion

# region refused by name


def kvcache_arguments(**changes):
    arguments = dict(q=np.ones((2, 1, 2, 64), BF16), k_cache=np.ones((4, 16, 1, 64), BF16),
                     v_cache=np.ones((4, 16, 1, 64), BF16), cache_seqlens=np.array([3, 4], np.int32),
                     page_table=np.array([[0, 1], [2, 3]], np.int32), level="tile")
    arguments.update(changes)
    return arguments


REFUSED = {
    "head_dim_80": (dict(q=np.ones((1, 1, 2, 80), BF16), k_cache=np.ones((1, 16, 1, 80), BF16),
                         v_cache=np.ones((1, 16, 1, 80), BF16), cache_seqlens=np.array([3], np.int32),
                         page_table=np.array([[0]], np.int32)), "head_dim 80 is not supported"),
    "q_f16_cache_bf16": (dict(q=np.ones((2, 1, 2, 64), np.float16)), "must have one element type"),
    "q_f32": (dict(q=np.ones((2, 1, 2, 64), np.float32)), "must have one element type"),
    "k_new_f16": (dict(k_new=np.ones((2, 1, 1, 64), np.float16), v_new=np.ones((2, 1, 1, 64), np.float16)),
                  "must have one element type"),
    "append_overflows": (dict(cache_seqlens=np.array([30, 4], np.int32), k_new=np.ones((2, 3, 1, 64), BF16),
                              v_new=np.ones((2, 3, 1, 64), BF16)), r"cache_seqlens\[0\] = 30 \(\+ seq_new = 3\) must lie in"),
    # Regressions: a batch of 0, a page table without a column and a cache of 0 pages reached tessera.launch,
    # which refused the kernel's "dimension 1 (total_q): sizes must be positive", naming none of the arguments
    "batch_0": (dict(q=np.ones((0, 1, 2, 64), BF16), cache_seqlens=np.zeros(0, np.int32),
                     page_table=np.zeros((0, 2), np.int32)), "q has an empty dimension"),
    "table_without_a_column": (dict(page_table=np.zeros((2, 0), np.int32), cache_seqlens=np.zeros(2, np.int32)),
                               "page_table has no column"),
    "no_page": (dict(k_cache=np.ones((0, 16, 1, 64), BF16), v_cache=np.ones((0, 16, 1, 64), BF16)),
                "k_cache has an empty dimension"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_kvcache_refuses_by_name_and_appends_nothing(name):
    changes, message = REFUSED[name]
    arguments = kvcache_arguments(**changes)
    before = arguments["k_cache"].copy()
    with pytest.raises(ValueError, match=message):
        tessera.attention_with_kvcache(**arguments)
    assert np.array_equal(arguments["k_cache"], before)


def test_a_cache_too_large_for_the_gather_appends_nothing():
    """Regression: the gather's 32-bit chunk numbering was checked after k_new and v_new had been written, so the
    refused call left the caches changed (docs/serving.md: a refused append writes nothing). The cache is
    2^24 + 1 pages of one page's storage (stride 0: writable, 2^31 + 128 chunks, 2 KiB of memory)."""
    k_page, v_page = np.zeros((1, 16, 1, 64), BF16), np.zeros((1, 16, 1, 64), BF16)
    k_cache, v_cache = (np.lib.stride_tricks.as_strided(page, shape=(2**24 + 1, 16, 1, 64),
                                                        strides=(0, *page.strides[1:]), writeable=True)
                        for page in (k_page, v_page))
    new = np.ones((1, 1, 1, 64), BF16)
    with pytest.raises(ValueError, match="16-byte chunks"):
        tessera.attention_with_kvcache(np.ones((1, 1, 1, 64), BF16), k_cache, v_cache, np.array([3], np.int32),
                                       np.array([[0]], np.int32), new, new, level="tile")
    assert not k_page.any() and not v_page.any()


def test_tables_of_the_other_kind_are_refused_by_name():
    """Regression: an int32 torch tensor of cache_seqlens beside NumPy q and caches raised PyTorch's "transpose()
    takes 2 positional arguments but 5 were given"; torch cu_seqlens beside NumPy q, k, v returned a torch
    tensor for NumPy inputs."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="cache_seqlens a PyTorch tensor"):
        tessera.attention_with_kvcache(**kvcache_arguments(cache_seqlens=torch.tensor([3, 4], dtype=torch.int32)))
    q, k = np.ones((5, 2, 64), BF16), np.ones((7, 2, 64), BF16)
    with pytest.raises(ValueError, match="cu_seqlens_q a PyTorch tensor"):
        tessera.attention(q, k, k, cu_seqlens_q=torch.tensor([0, 2, 5], dtype=torch.int32),
                          cu_seqlens_k=np.array([0, 3, 7], np.int32), max_seqlen_q=3, max_seqlen_k=4, level="tile")


@pytest.mark.parametrize("name", ["window_size", "dropout_p", "softcap"])
def test_options_no_kernel_takes_are_refused_by_name(name):
    with pytest.raises(TypeError, match=name):
        tessera.attention_with_kvcache(**kvcache_arguments(**{name: 0.1}))


# endregion

# region values past a sequence's keys


def nan_past(rows: int, length: int, shape):
    """`shape` ones whose rows (axis 1) from `length` on are NaN: an uninitialised (torch.empty) cache."""
    return np.where(np.arange(rows)[None, :, None, None] >= length, np.nan, 1).astype(BF16) * np.ones(shape, BF16)


def test_the_gather_reads_nothing_past_cache_seqlens():
    """The cp.async gather lands rows past cache_seqlens as zeros without a read: NaN there changes nothing."""
    poisoned = nan_past(16, 5, (4, 16, 1, 64))
    o = tessera.attention_with_kvcache(**kvcache_arguments(k_cache=poisoned, v_cache=poisoned.copy(), num_splits=3))
    assert np.array_equal(o, tessera.attention_with_kvcache(**kvcache_arguments(num_splits=3)))


def test_a_tma_page_with_nan_past_cache_seqlens():
    """A TMA key block reads V rows past cache_seqlens; tile.clear_rows zeroes them before P.V (P = 0 times NaN
    would be NaN), as FlashAttention-2 does: a torch.empty cache gives a finite O."""
    poisoned = nan_past(128, 5, (2, 128, 1, 64))
    o = tessera.attention_with_kvcache(np.ones((2, 1, 2, 64), BF16), np.ones((2, 128, 1, 64), BF16), poisoned,
                                       cache_seqlens=np.array([3, 4], np.int32), level="tile")
    assert np.isfinite(o.astype(np.float32)).all()


def test_a_nan_in_one_packed_sequence_stays_in_it():
    """Sequence 0's last key block reads sequence 1's V rows; they are zeroed before its P.V, so a NaN in sequence
    1 never reaches sequence 0's O."""
    v = np.ones((7, 2, 64), BF16)
    v[3:] = np.nan
    o = tessera.attention(np.ones((5, 2, 64), BF16), np.ones((7, 2, 64), BF16), v,
                          cu_seqlens_q=np.array([0, 2, 5], np.int32), cu_seqlens_k=np.array([0, 3, 7], np.int32),
                          max_seqlen_q=3, max_seqlen_k=4, level="tile")
    assert np.isfinite(o[:2].astype(np.float32)).all()


# endregion

# region the CTA simulator and the PTX executor


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_kvcache_and_varlen_slice_at_target_and_ptx(level, rng):
    run_kvcache(rng, (1, 2, 3, 1, 64, [7], 5, 3, [[2, 0, 1]], 1, True, 1), level)
    run_kvcache(rng, (2, 1, 2, 2, 64, [0, 4], 16, 2, [[1], [0]], 0, False, 2), level)
    run_varlen(rng, ([0, 1, 3], [5, 0, 130], 4, 2, True, 2, None), level)
    run_varlen(rng, ([9, 3], [4, 0], 3, 1, True, 1, None), level)


# endregion
