"""The head_dim 128 backward with score_mod / mask_mod below Tile level (issue 29): with the block lists and a
score_mod that do not fit one thread block per key block warp-specialized, the main kernel splits head_dim over
two thread blocks per key block (`attention_backward_config.MODS_HEAD_SPLIT`: each holds half of dK and dV, where the
whole needed 277 to 302 registers a thread), right against the float64 reference at target and PTX level, and ptxas clean without
spill (soft-cap + ALiBi + sliding window, document masking, chunked-local attention). At head_dim 64 a
modifier that does not fit without the split is rebuilt with it (`flex.HEAD_SPLIT_FALLBACK`), with a warning."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.kernels import attention_backward
from tessera.numerics import BF16, round_to

SLOPES = np.array([0.5, 0.25])
DOC = np.repeat([0, 1, 2], [40, 30, 100])  # document 1: 30 queries; keys 40..69


def softcap_alibi(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0) + SLOPES[h] * (kv_idx - q_idx)


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40)


def document(b, h, q_idx, kv_idx):
    return DOC[q_idx] == DOC[kv_idx]


def chunked_causal(b, h, q_idx, kv_idx):
    return (q_idx // 48 == kv_idx // 48) & (kv_idx <= q_idx)


def inputs(seq_q, seq_k, heads, heads_k, seed=0):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((1, heads, seq_q, 128)), BF16)
    k, v = (round_to(rng.standard_normal((1, heads_k, seq_k, 128)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


def _check(level, score_mod, mask_mod, seq_q, seq_k, heads, heads_k):
    q, k, v, do = inputs(seq_q, seq_k, heads, heads_k)
    o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level=level)
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def test_builder_splits_head_dim_with_a_modifier():
    kernels = attention_backward(128, score_mod=softcap_alibi, mask_mod=window, block_sparse=True)
    text = str(kernels.main)
    assert "attention_backward_d128_bf16_head_split2" in text
    assert "#tile.dims<2 * ceildiv(seq_k, 64), heads_k, batch>" in text
    assert "head_split" not in str(attention_backward(128).main)  # the dense backward is unchanged
    with pytest.raises(ValueError, match="head_split=2 is not supported with deterministic=True"):
        attention_backward(128, mask_mod=window, head_split=2, deterministic=True)
    with pytest.raises(ValueError, match="head_split"):
        attention_backward(64, mask_mod=window, head_split=3)


def test_softcap_alibi_window_at_target_level():
    """Queries 100 (two blocks, the second partial), keys 60: two thread blocks per key block."""
    _check("target", softcap_alibi, window, 100, 60, 1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("score_mod,mask_mod", [(softcap_alibi, window), (None, document),
                                                (softcap_alibi, chunked_causal)],
                         ids=["softcap-alibi-window", "document", "softcap-alibi-chunked"])
def test_slice_below_tile_level(level, score_mod, mask_mod):
    """GQA (2 query heads per key head), seq_q != seq_k, neither a multiple of 64."""
    _check(level, score_mod, mask_mod, 70, 170 if mask_mod is document else 90, 2, 1)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("score_mod,mask_mod", [(softcap_alibi, window), (None, document),
                                                (softcap_alibi, chunked_causal), (softcap_alibi, None)])
def test_ptxas_accepts_the_main_kernel_without_spills(score_mod, mask_mod):
    from tessera import passes

    kernels = attention_backward(128, score_mod=score_mod, mask_mod=mask_mod, block_sparse=mask_mod is not None)
    result = tessera.compile(kernels.main, target="cubin", pipeline=passes.PTX_PIPELINE)
    assert result.warnings == ()
    for entry in result.entries.values():
        assert not entry.spills, entry


TABLE = np.linspace(-1, 1, 126).reshape(2, 63)


def softcap_alibi_table(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0) + SLOPES[h] * (kv_idx - q_idx) + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def document_window(b, h, q_idx, kv_idx):
    return (DOC[q_idx] == DOC[kv_idx]) & (q_idx >= kv_idx) & (q_idx - kv_idx < 100)


BIAS = np.linspace(0, 1, 170)


def softcap_alibi_table_bias(score, b, h, q_idx, kv_idx):
    return softcap_alibi_table(score, b, h, q_idx, kv_idx) + BIAS[kv_idx]


TABLE2 = np.linspace(-0.5, 0.5, 2 * 63).reshape(2, 63)
TABLE3 = np.linspace(0.3, -0.7, 2 * 63).reshape(2, 63)


def three_tables(score, b, h, q_idx, kv_idx):
    """softcap_alibi_table_bias and two more tables, each a gathered [BM, BN] tile."""
    return (softcap_alibi_table_bias(score, b, h, q_idx, kv_idx) + TABLE2[h, np.clip(kv_idx - q_idx + 31, 0, 62)]
            + TABLE3[h, np.clip((q_idx + kv_idx) % 63, 0, 62)])


def three_tables_tanh(score, b, h, q_idx, kv_idx):
    """three_tables and a key-weighted tanh of the score (its value and derivative two more [BM, BN] tiles)."""
    return three_tables(score, b, h, q_idx, kv_idx) + BIAS[kv_idx] * np.tanh(score / 3.0)


@pytest.mark.slow
def test_head_dim_64_falls_back_to_the_head_split_with_a_warning():
    """Three tables, soft-cap, ALiBi, a key bias and a key-weighted tanh under a document window: over the
    budget without the split in every configuration (275 registers at 64 x 64; without the tanh term it fits
    one consumer warpgroup there, the tables' gathers on the thread's distinct offsets): rebuilt with
    head_split=2, the warning naming it."""
    rng = np.random.default_rng(2)
    q = round_to(rng.standard_normal((1, 2, 100, 64)), BF16)
    k, v = (round_to(rng.standard_normal((1, 2, 90, 64)), BF16) for _ in range(2))
    do = round_to(rng.standard_normal(q.shape), BF16)
    o, lse = tessera.attention(q, k, v, score_mod=three_tables_tanh, mask_mod=document_window, return_lse=True,
                               level="tile")
    with pytest.warns(UserWarning, match=r"does not fit the registers \(\d+ registers.*rebuilt with head_split=2"):
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=three_tables_tanh,
                                           mask_mod=document_window, level="target")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, three_tables_tanh,
                                                     document_window)
    assert all(c.ok for c in checks), [str(c) for c in checks]
