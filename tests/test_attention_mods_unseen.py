"""Attention variants written as FlexAttention users write them, none of which the kernels were built
around (issue 29): attention sinks, a banded diagonal, a dilated (strided) mask, a soft-cap around ALiBi,
prefix-LM inside packed documents; then (`MORE`) query and key padding from per-batch lengths, a block-causal
mask of 3-token blocks, Longformer's global tokens, a per-head temperature inside a soft-cap, a log1p distance
penalty, one captured array read by both hooks, a causal mask with an offset closure (negative: empty rows),
nested helper functions, and a parity mask of `==` and `^` of booleans. Each runs forward and backward through
`tessera.attention` / `tessera.attention_backward` at Tile level (block lists included) against the float64
reference, with seq_q != seq_k, lengths that are no multiple of a block, and GQA; rows that see no key give
O = 0, LSE = -inf and dQ = 0. `-m slow` runs `MORE` over more shapes and at target and PTX level."""

from __future__ import annotations

import numpy as np
import pytest
from mods_checks import check_named_variant

from tessera.variants import create_block_mask, trace_mod

SEQ_Q, SEQ_K = 90, 150
SLOPES = np.array([0.5, 0.25, 0.125, 0.0625])
PHASE = np.arange(SEQ_K) % 3                           # a dilation of 3: keys of the query's residue
DOC = np.repeat([0, 1, 2, 3], [50, 1, 60, 39])         # packed documents; document 1 is a single token
DOC_START = np.concatenate([[0] * 50, [50], [51] * 60, [111] * 39])


def sinks_and_window(b, h, q_idx, kv_idx):
    """StreamingLLM: the first four keys are always seen, beside a causal window of 32."""
    return (kv_idx < 4) | ((q_idx >= kv_idx) & (q_idx - kv_idx < 32))


def band(b, h, q_idx, kv_idx):
    return np.abs(q_idx - kv_idx) <= 16


def dilated(b, h, q_idx, kv_idx):
    return (PHASE[q_idx] == PHASE[kv_idx]) & (q_idx >= kv_idx)


def softcap_of_alibi(score, b, h, q_idx, kv_idx):
    return 30.0 * np.tanh((score + SLOPES[h] * (kv_idx - q_idx)) / 30.0)


def prefix_lm_documents(b, h, q_idx, kv_idx):
    """Each document's first 8 tokens are a bidirectional prefix; the rest is causal; no attention across
    documents."""
    same = DOC[q_idx] == DOC[kv_idx]
    return same & ((kv_idx - DOC_START[kv_idx] < 8) | (q_idx >= kv_idx))


def sink_bias(score, b, h, q_idx, kv_idx):
    """A learned-sink flavour: keys 0..3 get a bonus, everything else a clipped distance penalty."""
    return np.where(kv_idx < 4, score + 1.0, score - 0.01 * np.minimum(np.abs(q_idx - kv_idx), 64))


VARIANTS = {
    "sinks+window": (None, sinks_and_window),
    "band": (None, band),
    "dilated": (None, dilated),
    "softcap(alibi)+band": (softcap_of_alibi, band),
    "prefix-lm-documents": (None, prefix_lm_documents),
    "sink-bias+dilated": (sink_bias, dilated),
}


SHAPE = (1, 4, 2, SEQ_Q, SEQ_K)  # (batch, heads, heads_k, seq_q, seq_k)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_unseen_variant_forward_and_backward(name):
    check_named_variant(VARIANTS, name, SHAPE, "tile")


def test_unseen_masks_skip_blocks():
    """The band and the dilated causal mask leave empty blocks to skip at 64 x 64 (and document 1's single
    token sees only itself)."""
    for mask in (band, prefix_lm_documents):
        assert create_block_mask(mask, 1, 1, SEQ_Q, SEQ_K, 64, 64).skipped_fraction > 0
    visible = prefix_lm_documents(0, 0, np.arange(SEQ_Q)[:, None], np.arange(SEQ_K)[None, :])
    assert visible[50].tolist() == [k == 50 for k in range(SEQ_K)]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_unseen_variant_below_tile_level(name, level):
    """The same variants in the CTA simulator and the PTX executor, forward and backward (the default
    pipeline; a forward that fits no configuration at BN 128 is rebuilt at BN 64)."""
    check_named_variant(VARIANTS, name, SHAPE, level)


# region more unseen variants (MORE)

Q_LENS = np.array([61, 0])  # per-batch real queries: batch 1 has none (every row empty)
KV_LENS = np.array([45, 30])
IS_GLOBAL = np.zeros(256, bool)
IS_GLOBAL[[0, 17, 64]] = True
TEMPS = np.array([0.5, 1.0, 2.0, 4.0])
SEG = np.repeat(np.arange(6), [10, 25, 1, 40, 30, 150])


def padding(b, h, q_idx, kv_idx):
    """Query and key padding from per-batch lengths."""
    return (q_idx < Q_LENS[b]) & (kv_idx < KV_LENS[b])


def block_causal_3(b, h, q_idx, kv_idx):
    return q_idx // 3 >= kv_idx // 3


def global_tokens(b, h, q_idx, kv_idx):
    """Longformer: global tokens see and are seen by every token; the rest a band of 4."""
    return IS_GLOBAL[kv_idx] | IS_GLOBAL[q_idx] | (np.abs(q_idx - kv_idx) <= 4)


def temperature_softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * np.tanh(score / TEMPS[h] / 30.0)


def log_distance(score, b, h, q_idx, kv_idx):
    return score - np.log1p(np.abs(q_idx - kv_idx))


def same_segment_bonus(score, b, h, q_idx, kv_idx):
    return score + np.where(SEG[q_idx] == SEG[kv_idx], 0.5, 0.0)


def segment_causal(b, h, q_idx, kv_idx):
    return SEG[kv_idx] <= SEG[q_idx]


def offset_causal(offset):
    def causal(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx
    return causal


def _distance_penalty(d, limit=16):
    return -0.1 * np.minimum(np.abs(d), limit)


def nested_helpers(score, b, h, q_idx, kv_idx):
    def bonus(x):
        return np.where(x == 0, 1.0, 0.0)
    d = q_idx - kv_idx
    return score + _distance_penalty(d) + bonus(d)


def parity_xor(b, h, q_idx, kv_idx):
    """`==` and `^` of booleans (NumPy's logic on bool arrays)."""
    return ((q_idx % 2 == 0) == (kv_idx % 2 == 0)) ^ (q_idx < kv_idx)


MORE = {
    "padding(empty rows)": (None, padding),
    "block-causal-3": (None, block_causal_3),
    "global-tokens": (None, global_tokens),
    "temperature-softcap+global": (temperature_softcap, global_tokens),
    "log1p-distance+block-causal-3": (log_distance, block_causal_3),
    "shared-array": (same_segment_bonus, segment_causal),
    "offset-causal(-5)(empty rows)": (None, offset_causal(-5)),
    "nested-helpers+offset-causal(7)": (nested_helpers, offset_causal(7)),
    "parity-xor": (None, parity_xor),
}
MORE_FAST = ["padding(empty rows)", "parity-xor"]
MORE_SHAPES = [(2, 2, 1, 70, 45), (2, 4, 2, 77, 133), (2, 4, 4, 150, 61)]  # (batch, heads, heads_k, seq_q, seq_k)


def check_more(name, shape, level):
    empty = check_named_variant(MORE, name, shape, level)
    assert ("empty rows" in name) == bool(empty.any())


@pytest.mark.parametrize("name", MORE_FAST)
def test_more_unseen_variants_at_tile_level(name):
    check_more(name, MORE_SHAPES[0], "tile")


@pytest.mark.slow
@pytest.mark.parametrize("shape", MORE_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(MORE))
def test_more_unseen_variants_over_shapes(name, shape):
    check_more(name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(MORE))
def test_more_unseen_variants_below_tile_level(name, level):
    check_more(name, MORE_SHAPES[0], level)


def test_boolean_equality_and_xor_are_logic():
    """`a == b`, `a != b` and `a ^ b` of two booleans trace as and/or/not (they were refused as arithmetic on
    booleans); `^` of two traced integers stays refused by name (of an integer and a constant it is traced:
    test_attention_mods_unseen4.py)."""
    from tessera.variants import ModTraceError

    trace = trace_mod(parity_xor, "mask_mod")
    assert trace.uses("not") and trace.uses("or") and not trace.uses("xor")
    with pytest.raises(ModTraceError, match="'\\^' of two traced integers"):
        trace_mod(lambda b, h, q, k: (q ^ k) == 0, "mask_mod")
    grid = np.arange(8)
    assert np.array_equal(parity_xor(0, 0, grid[:, None], grid[None, :]),
                          ((grid[:, None] % 2 == 0) == (grid[None, :] % 2 == 0)) ^ (grid[:, None] < grid[None, :]))

# endregion
