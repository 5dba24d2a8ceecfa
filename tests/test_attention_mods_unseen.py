"""Attention variants written as FlexAttention users write them, none of which the kernels were built
around (issue 29): attention sinks, a banded diagonal, a dilated (strided) mask, a soft-cap around ALiBi,
prefix-LM inside packed documents. Each runs forward and backward through `tessera.attention` /
`tessera.attention_backward` at Tile level (block lists included) against the float64 reference, with
seq_q != seq_k, lengths that are no multiple of a block, and GQA."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import BF16, round_to
from tessera.variants import create_block_mask

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


def inputs(seed):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((1, 4, SEQ_Q, 64)), BF16)
    k, v = (round_to(rng.standard_normal((1, 2, SEQ_K, 64)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_unseen_variant_forward_and_backward(name):
    score_mod, mask_mod = VARIANTS[name]
    q, k, v, do = inputs(sorted(VARIANTS).index(name))
    o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
    assert check.ok, check
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level="tile")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]


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
    import warnings

    score_mod, mask_mod = VARIANTS[name]
    q, k, v, do = inputs(sorted(VARIANTS).index(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level=level)
    check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
    assert check.ok, check
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level=level)
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]
