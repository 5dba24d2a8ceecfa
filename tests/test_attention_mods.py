"""FlexAttention-style score_mod / mask_mod (issue 29): tracing, refusals, the float64 reference, block masks,
and flash_attention(score_mod=, mask_mod=, block_sparse=) at Tile level against the reference over shapes
with seq_q != seq_k, lengths no multiple of a block, and grouped heads."""

from __future__ import annotations

import numpy as np
import pytest
from mods_checks import brute_block_kinds

import tessera
from tessera import reference, reference_attention
from tessera.variants import ModTraceError, trace_mod
from tessera.variants.block_mask import EMPTY, FULL, PARTIAL, VISIT_HEAD, create_block_mask
from tessera.kernels import flash_attention
from tessera.numerics import BF16, round_to

D, BM, BN = 64, 64, 32

# region The variants (module-level arrays are captured too: GLOBAL_SLOPES)
GLOBAL_SLOPES = np.array([0.5, 0.25, 0.125, 0.0625])


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 48)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 40) | (q_idx >= kv_idx)


def softcap(score, b, h, q_idx, kv_idx):
    return 2.0 * np.tanh(score / 2.0)


def alibi(score, b, h, q_idx, kv_idx):
    return score + GLOBAL_SLOPES[h] * (kv_idx - q_idx)


def relative_table(heads: int):
    table = np.random.default_rng(7).standard_normal((heads, 63))

    def relative(score, b, h, q_idx, kv_idx):
        return score + table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]
    return relative


def documents(seq_q: int, seq_k: int):
    """Three documents; the middle one has queries but no keys (its rows see nothing: O = 0, LSE = -inf)."""
    q_doc = np.repeat([0, 1, 2], [seq_q // 3, seq_q // 3, seq_q - 2 * (seq_q // 3)])
    k_doc = np.repeat([0, 2], [seq_k // 2, seq_k - seq_k // 2])

    def document(b, h, q_idx, kv_idx):
        return q_doc[q_idx] == k_doc[kv_idx]
    return document


def both(*masks):
    def composed(b, h, q_idx, kv_idx):
        out = masks[0](b, h, q_idx, kv_idx)
        for m in masks[1:]:
            out = out & m(b, h, q_idx, kv_idx)
        return out
    return composed


def run(q, k, v, score_mod=None, mask_mod=None, block_sparse=False, grouped=False, **kwargs):
    """(O, LSE) of the Tile IR kernel; the block lists from create_block_mask with block_sparse."""
    module = flash_attention(D, block_m=BM, block_n=BN, return_lse=True, grouped=grouped, score_mod=score_mod,
                             mask_mod=mask_mod, block_sparse=block_sparse, **kwargs)
    extra = {}
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        for captured in trace_mod(fn, kind).arrays if fn is not None else ():
            extra.setdefault(captured.name, captured.array)
    extra = list(extra.values())
    if block_sparse:
        batch, heads, seq_q, _ = q.shape
        extra += create_block_mask(mask_mod, batch, heads, seq_q, k.shape[2], BM, BN).inputs()
    return tessera.interpret(module, q, k, v, *extra)


def inputs(seq_q, seq_k, heads=2, heads_k=None, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    return reference_attention.attention_operands(rng, seq_q, seq_k, D, batch, heads, heads_k or heads)


VARIANTS = {
    "causal": (None, lambda sq, sk, h: causal),
    "sliding_window": (None, lambda sq, sk, h: sliding_window),
    "prefix_lm": (None, lambda sq, sk, h: prefix_lm),
    "document": (None, lambda sq, sk, h: documents(sq, sk)),
    "softcap": (lambda h: softcap, None),
    "alibi": (lambda h: alibi, None),
    "relative_table": (relative_table, None),
    "softcap_sliding": (lambda h: softcap, lambda sq, sk, h: sliding_window),
    "alibi_document_causal": (lambda h: alibi, lambda sq, sk, h: both(documents(sq, sk), causal)),
}
SHAPES = [(100, 150, 2, 2), (77, 45, 4, 2), (130, 130, 4, 1)]  # seq_q, seq_k, heads, heads_k


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_float64(variant, shape):
    seq_q, seq_k, heads, heads_k = shape
    make_score, make_mask = VARIANTS[variant]
    score_mod = make_score(heads) if make_score else None
    mask_mod = make_mask(seq_q, seq_k, heads) if make_mask else None
    q, k, v = inputs(seq_q, seq_k, heads, heads_k)
    sparse = mask_mod is not None
    o, lse = run(q, k, v, score_mod, mask_mod, block_sparse=sparse, grouped=heads_k != heads)
    check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
    assert check.ok, check


KEY_PADDING = np.random.default_rng(2).random((2, 45)) > 0.3  # a boolean array, per batch entry and key

EDGE_CASES = {
    "always": (None, lambda b, h, q, k: True),
    "never": (None, lambda b, h, q, k: q < 0),
    "boolean_array_by_batch": (None, lambda b, h, q, k: KEY_PADDING[b, k]),
    "where_of_booleans_by_head": (None, lambda b, h, q, k: np.where(h == 0, q >= k, k >= q)),
    "not_of_or": (None, lambda b, h, q, k: ~((q < 10) | (k > 30))),
    "constant_score": (lambda s, b, h, q, k: 1.0, None),
    "log_exp_sqrt": (lambda s, b, h, q, k: np.log(np.exp(s) + 1.0) - np.sqrt(np.abs(s) + 1.0), None),
    "divide_by_index": (lambda s, b, h, q, k: s / (q + 1), lambda b, h, q, k: (q - k) * (q - k) < 400),
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_cases_with_two_batch_entries(case):
    score_mod, mask_mod = EDGE_CASES[case]
    q, k, v = inputs(70, 45, batch=2)
    o, lse = run(q, k, v, score_mod, mask_mod, block_sparse=mask_mod is not None)
    check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
    assert check.ok, check


def test_empty_document_rows_are_zero_with_lse_minus_inf():
    q, k, v = inputs(90, 60)
    mask = documents(90, 60)
    o, lse = run(q, k, v, mask_mod=mask, block_sparse=True)
    rows = slice(30, 60)  # document 1 has no keys
    assert np.all(np.asarray(o, np.float64)[:, :, rows] == 0)
    assert np.all(np.isneginf(lse[:, :, rows]))
    assert np.all(np.isfinite(lse[:, :, :30]))


@pytest.mark.parametrize("seq_q,seq_k", [(96, 96), (70, 100), (128, 75)])
def test_builtin_causal_and_mask_mod_agree_bitwise(seq_q, seq_k):
    q, k, v = inputs(seq_q, seq_k)
    shift = seq_k - seq_q

    def bottom_right(b, h, q_idx, kv_idx):  # the built-in causal=True convention
        return kv_idx <= q_idx + shift

    builtin = tessera.interpret(flash_attention(D, causal=True, block_m=BM, block_n=BN, return_lse=True), q, k, v)
    for sparse in (False, True):
        mine = run(q, k, v, mask_mod=bottom_right, block_sparse=sparse)
        for a, b in zip(builtin, mine):
            assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), sparse


def test_block_sparse_equals_dense_mask_mod():
    q, k, v = inputs(100, 150)
    dense = run(q, k, v, alibi, sliding_window)
    sparse = run(q, k, v, alibi, sliding_window, block_sparse=True)
    assert np.allclose(np.asarray(dense[0], np.float64), np.asarray(sparse[0], np.float64), atol=1e-2)
    assert np.allclose(dense[1], sparse[1], atol=1e-5)


def test_reference_matches_builtin_reference():
    q, k, v = (round_to(x, BF16) for x in inputs(50, 70))
    ref, _ = reference_attention.attention_mods(q, k, v, mask_mod=lambda b, h, qi, ki: ki <= qi + 20)
    assert np.allclose(ref, reference_attention.attention(q, k, v, causal=True), atol=1e-12)


# endregion
# region Block masks


def test_block_mask_kinds_for_causal():
    bm = create_block_mask(causal, 1, 1, 128, 100, 64, 32)
    kinds = bm.kinds[0, 0]
    assert kinds.shape == (2, 4)
    # Query block 0 (rows 0..63): key block 0 partial (row 0 sees key 0 only), 1 partial, 2 and 3 empty.
    assert list(kinds[0]) == [PARTIAL, PARTIAL, EMPTY, EMPTY]
    # Query block 1 (rows 64..127): keys 0..63 full, key block 2 (64..95) partial, 3 (96..99, past seq_k padded)
    # partial: row 64 does not see key 96.
    assert list(kinds[1]) == [FULL, FULL, PARTIAL, PARTIAL]
    full_n, full_i, part_n, part_i = bm.inputs()
    assert full_n[0, 0].tolist() == [0, 2] and full_i[0, 0, 1, :2].tolist() == [0, 1]
    assert part_n[0, 0].tolist() == [2, 2] and part_i[0, 0, 1, :2].tolist() == [2, 3]


def test_block_mask_block_past_seq_k_is_partial():
    """A full block gets no mask at all, not even the bounds mask: one reaching past seq_k is partial; query
    rows past seq_q do not count."""
    bm = create_block_mask(lambda b, h, q, k: q >= 0, 1, 1, 10, 40, 64, 32)
    assert bm.kinds[0, 0].tolist() == [[FULL, PARTIAL]]
    bm = create_block_mask(lambda b, h, q, k: q >= 0, 1, 1, 10, 64, 64, 32)
    assert bm.kinds[0, 0].tolist() == [[FULL, FULL]]


def test_sliding_window_skips_most_blocks():
    seq = 2048
    window = 256

    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    sw = create_block_mask(sliding, 1, 1, seq, seq, 128, 128).visited_fraction()
    full_causal = create_block_mask(causal, 1, 1, seq, seq, 128, 128).visited_fraction()
    assert sw < 0.2 * full_causal * 2  # 3 of 16 blocks per row vs about half the grid


def test_block_mask_reports_an_index_outside_a_captured_array():
    doc = np.zeros(10, int)

    def bad(b, h, q_idx, kv_idx):
        return doc[q_idx - 1] == doc[kv_idx]
    with pytest.raises(ModTraceError, match=r"mask_mod 'test_block_mask_reports.*bad' at .*: reads "
                                            r"doc\[q_idx - 1\], which reaches \[-1, 8\]"):
        create_block_mask(bad, 1, 1, 10, 10, 64, 64)


# endregion
# region Tracing and its refusals


def test_trace_captures_closure_and_global_arrays():
    local = np.arange(4, dtype=np.int32)

    def mod(score, b, h, q_idx, kv_idx):
        return score * GLOBAL_SLOPES[h] + local[h]
    trace = trace_mod(mod, "score_mod")
    assert [a.name for a in trace.arrays] == ["score_mod_GLOBAL_SLOPES", "score_mod_local"]
    assert [a.dtype for a in trace.arrays] == ["f32", "i32"]


def _refusal(fn, kind="mask_mod"):
    with pytest.raises(ModTraceError) as info:
        trace_mod(fn, kind)
    return str(info.value)


def test_refuses_python_branch_on_traced_value_naming_line():
    def branchy(b, h, q_idx, kv_idx):
        if q_idx > kv_idx:  # the refused line
            return True
        return False
    message = _refusal(branchy)
    line = branchy.__code__.co_firstlineno + 1
    name = "test_refuses_python_branch_on_traced_value_naming_line.<locals>.branchy"
    assert f"mask_mod '{name}' at {__file__}:{line}" in message
    assert "Python control flow" in message


@pytest.mark.parametrize("fn,construct", [
    (lambda b, h, q, k: (q ** k) == k, "'**' of a traced integer base by a traced integer exponent"),
    (lambda b, h, q, k: np.sin(q) > 0, "np.sin"),
    (lambda b, h, q, k: np.cumsum(q) > 0, "np.cumsum"),
    (lambda b, h, q, k: (q > k) - (k > 0) > 0, "'sub' of a boolean"),
    (lambda b, h, q, k: (q > k) and (k > 0), "Python control flow"),
    (lambda b, h, q, k: q + k, "returns a i32 value"),
])
def test_refusals_name_the_construct(fn, construct):
    assert construct in _refusal(fn)


def test_refuses_a_slice_and_an_uncaptured_array():
    arr, grid = np.arange(8), np.zeros((4, 8))
    assert "a slice of the captured array grid" in _refusal(lambda b, h, q, k: grid[:, q] > 0)
    assert "an operand of type ndarray" in _refusal(lambda b, h, q, k: arr[:] > q)
    assert trace_mod(lambda b, h, q, k: q > arr[3], "mask_mod").arrays == []  # a constant read is a number

    def indirect(b, h, q, k):
        return helper_array()[q] > 0
    assert "not a captured NumPy array" in _refusal(indirect)


def helper_array():
    return np.arange(8)


def test_builder_refuses_block_sparse_without_mask_and_split():
    with pytest.raises(ValueError, match="block_sparse=True needs a mask_mod"):
        flash_attention(D, block_sparse=True)
    with pytest.raises(ValueError, match="num_splits > 1"):
        flash_attention(D, mask_mod=causal, num_splits=2)


# endregion


# region The backward


def _backward(q, k, v, do, score_mod, mask_mod, grouped, block_sparse=False):
    from tessera.kernels import attention_backward

    arrays = []
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            arrays += [a.array for a in trace_mod(fn, kind).arrays]
    arrays = list({id(a): a for a in arrays}.values())
    forward = flash_attention(D, block_m=BM, block_n=BN, return_lse=True, grouped=grouped, score_mod=score_mod,
                              mask_mod=mask_mod)
    o, lse = tessera.interpret(forward, q, k, v, *arrays)
    kernels = attention_backward(D, block_m=BM, block_n=BN, score_mod=score_mod, mask_mod=mask_mod,
                                 block_sparse=block_sparse)
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse[..., 0])
    lists = []
    if block_sparse:
        mask = create_block_mask(mask_mod, q.shape[0], q.shape[1], q.shape[2], k.shape[2], BM, BN)
        lists = mask.backward_inputs(k.shape[1])
    dq_accum, dk, dv = tessera.interpret(kernels.main, q, k, v, do, lse2, dpsum, *arrays, *lists)
    return o, (tessera.interpret(kernels.postprocess, dq_accum, seq_q=q.shape[2]), dk, dv)


def doubled_softcap(score, b, h, q_idx, kv_idx):
    return 2.0 * (3.0 * np.tanh(score / 3.0)) + np.minimum(score, 0.5) * np.abs(score) / 4.0


BACKWARD_VARIANTS = {
    "softcap_alibi_window": (lambda score, b, h, q_idx, kv_idx: softcap(score, b, h, q_idx, kv_idx)
                             + GLOBAL_SLOPES[h] * (kv_idx - q_idx), sliding_window),
    "doubled_softcap_min_abs": (doubled_softcap, None),
    "relative_table_documents": (relative_table(4), documents(77, 45)),
    "prefix_lm": (None, prefix_lm),
}


BACKWARD_CASES = [(name, sparse) for name, (_, mask) in sorted(BACKWARD_VARIANTS.items())
                  for sparse in (False, True) if mask is not None or not sparse]


@pytest.mark.parametrize("variant,sparse", BACKWARD_CASES)
def test_backward_matches_float64(variant, sparse):
    """Dense, and with the transposed block lists wherever there is a mask_mod."""
    score_mod, mask_mod = BACKWARD_VARIANTS[variant]
    q, k, v = inputs(77, 45, heads=4, heads_k=2)
    do = np.random.default_rng(5).standard_normal(q.shape)
    o, grads = _backward(q, k, v, do, score_mod, mask_mod, grouped=True, block_sparse=sparse)
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def test_transposed_block_lists():
    bm = create_block_mask(causal, 1, 1, 128, 100, 64, 32)
    full_n, full_i, part_n, part_i = bm.transposed_inputs()
    assert full_n.shape == (1, 1, 4) and full_i.shape == (1, 1, 4, 2)
    assert full_n[0, 0].tolist() == [1, 1, 0, 0] and full_i[0, 0, :2, 0].tolist() == [1, 1]
    assert part_n[0, 0].tolist() == [1, 1, 1, 1] and part_i[0, 0, :, 0].tolist() == [0, 0, 1, 1]


def test_backward_work_lists_cover_each_visited_pair_once():
    """Per (batch, K/V head, key block): every (head of the GQA group, query block) pair that is full, then every
    partial one, each once, head-major and ascending, packed h * VISIT_HEAD + m (h = 2 hk + g); the ranks are
    `transposed_ranks`' for the same pairs."""
    docs = np.repeat([0, 1, 2], [40, 0, 60])  # document 1 is empty

    def doc_window(b, h, q_idx, kv_idx):
        return (docs[q_idx] == docs[np.minimum(kv_idx, 99)]) & (q_idx - kv_idx < 24 + 8 * h)
    bm = create_block_mask(doc_window, 2, 4, 100, 70, 16, 16)
    counts, visits, ranks = bm.backward_inputs(2, ranks=True)
    assert counts.shape == (2, 2, 5, 2) and visits.shape == ranks.shape == (2, 2, 5, 2 * 7)
    t_ranks = dict(zip((FULL, PARTIAL), bm.transposed_ranks()))
    t_lists = dict(zip((FULL, PARTIAL), (bm.transposed_inputs()[i] for i in (1, 3))))
    for b in range(2):
        for hk in range(2):
            for n in range(5):
                full, partial = counts[b, hk, n]
                start = 0
                for kind, c in ((FULL, full), (PARTIAL, partial)):
                    packed = visits[b, hk, n, start:start + c]
                    pairs = list(zip((packed // VISIT_HEAD - 2 * hk).tolist(), (packed % VISIT_HEAD).tolist()))
                    expected = [(g, m) for g in range(2) for m in range(7) if bm.kinds[b, 2 * hk + g, m, n] == kind]
                    assert pairs == expected
                    for (g, m), r in zip(pairs, ranks[b, hk, n, start:start + c]):
                        where = t_lists[kind][b, 2 * hk + g, n].tolist().index(m)
                        assert r == t_ranks[kind][b, 2 * hk + g, n, where]
                    start += c
                assert not visits[b, hk, n, start:].any() and not ranks[b, hk, n, start:].any()
    with pytest.raises(ValueError, match="do not pack into one i32"):
        create_block_mask(doc_window, 1, 40000, 16, 16, 16, 16).backward_inputs(1)
    with pytest.raises(ValueError, match="heads_k must divide"):
        bm.backward_inputs(3)


def test_transposed_ranks_count_the_earlier_visitors():
    """Query block m is visited by the key blocks of its lists in ascending order; each key block's rank for m
    is how many visitors come before it (the deterministic backward's semaphore count)."""
    def band(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx < 64) & (kv_idx - q_idx < 64)
    bm = create_block_mask(band, 1, 1, 128, 128, 32, 32)
    full_n, full_i, part_n, part_i = bm.transposed_inputs()
    full_r, part_r = bm.transposed_ranks()
    visitors = {m: sorted(n for n in range(4) if bm.kinds[0, 0, m, n]) for m in range(4)}
    for n in range(4):
        for counts, indices, ranks in ((full_n, full_i, full_r), (part_n, part_i, part_r)):
            for t in range(counts[0, 0, n]):
                m = indices[0, 0, n, t]
                assert ranks[0, 0, n, t] == visitors[m].index(n)
            assert not ranks[0, 0, n, counts[0, 0, n]:].any()


def test_backward_refuses_an_underivable_score_mod_by_name():
    from tessera.variants.derivative import score_derivative
    from tessera.variants.nodes import Node
    from tessera.variants.trace import Trace

    trace = trace_mod(softcap, "score_mod")
    odd = Trace(softcap, Node("sigmoid", (trace.result,), "f32"))
    with pytest.raises(ModTraceError, match="score_mod 'softcap': cannot trace the derivative of 'sigmoid'"):
        score_derivative(odd)


# endregion


# region The public API


def test_tessera_attention_and_backward_with_modifiers():
    q, k, v = (round_to(x, BF16) for x in inputs(70, 90, heads=2, heads_k=1))
    do = round_to(np.random.default_rng(9).standard_normal(q.shape), BF16)
    o, lse = tessera.attention(q, k, v, score_mod=alibi, mask_mod=prefix_lm, return_lse=True, level="tile")
    assert lse.shape == (1, 2, 70)
    check = reference.check_attention_mods(o, q, k, v, BF16, alibi, prefix_lm, lse=lse)
    assert check.ok, check
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi, mask_mod=prefix_lm, level="tile")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, alibi, prefix_lm)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def test_tessera_attention_refuses_modifiers_with_bias():
    """(The GPU path, level=None: tests/test_attention_mods_gpu.py.)"""
    q, k, v = (round_to(x, BF16) for x in inputs(64, 64))
    with pytest.raises(ValueError, match="not supported with bias"):
        tessera.attention(q, k, v, mask_mod=causal, bias=np.zeros((1, 2, 64, 64), BF16), level="tile")


# endregion


_PER_HEAD_WINDOW = np.array([3, 40, 200], np.int32)
_PER_BATCH_PREFIX = np.array([5, 90], np.int32)


@pytest.mark.parametrize("mask_mod", [
    lambda b, h, q_idx, kv_idx: q_idx >= kv_idx,                                          # reads neither b nor h
    lambda b, h, q_idx, kv_idx: np.abs(q_idx - kv_idx) <= _PER_HEAD_WINDOW[h],             # reads h
    lambda b, h, q_idx, kv_idx: (kv_idx < _PER_BATCH_PREFIX[b]) | (q_idx >= kv_idx),       # reads b
    lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & ((h + b) % 2 == 0),                   # reads both
], ids=["neither", "heads", "batch", "both"])
def test_block_classes_broadcast_only_over_what_the_mask_does_not_read(mask_mod):
    """create_block_mask classifies a mask that reads neither b nor h once and broadcasts it; one that reads
    either is classified per entry: each against a brute-force evaluation at batch 2, heads 3."""
    got = create_block_mask(mask_mod, 2, 3, 300, 260, 64, 128).kinds
    np.testing.assert_array_equal(got, brute_block_kinds(mask_mod, 2, 3, 300, 260, 64, 128))
