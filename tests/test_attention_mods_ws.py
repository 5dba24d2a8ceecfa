"""The warp-specialized backward with score_mod / mask_mod (issue 29): each main-kernel thread block walks its
work list (`BlockMask.backward_inputs`: its (head of the GQA group, query block) pairs, full then partial), so
the default pipeline gives it a producer warpgroup; right against the float64 reference at target and PTX
level, ptxas clean without spill, and its full-block loop costs in SASS what the dense kernel's loop costs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tessera
from tessera import passes, reference, toolchain
from tessera.sass import disassemble, sass_loops
from tessera.kernels import attention_backward, flash_attention
from tessera.numerics import BF16, round_to

SLOPES = np.array([0.5, 0.25, 0.125, 0.0625])
DOC = np.repeat([0, 1, 2], [40, 30, 100])  # document 1: queries 40..69 and keys 40..69; see `late_document`


def softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0)


def softcap_alibi(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0) + SLOPES[h] * (kv_idx - q_idx)


def alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def softcap_symmetric_alibi(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0) - SLOPES[h] * np.abs(q_idx - kv_idx)


TABLE = np.linspace(-1.0, 1.0, 4 * 63).reshape(4, 63)


def relative_table(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def softcap_alibi_table(score, b, h, q_idx, kv_idx):
    return softcap_alibi(score, b, h, q_idx, kv_idx) + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40)


def late_document(b, h, q_idx, kv_idx):
    """Document masking where document 1 has queries but its keys belong to no one (an empty document): its
    rows see no key (O = 0, LSE = -inf), and key blocks 40..69 see no query."""
    return (DOC[q_idx] == DOC[kv_idx]) & (DOC[kv_idx] != 1)


WIDTHS = np.array([8, 30, 60, 200])


def head_window(b, h, q_idx, kv_idx):
    """A window per head read from an array, reaching 20 keys past the diagonal."""
    return (kv_idx <= q_idx + 20) & (q_idx - kv_idx < WIDTHS[h])


def inputs(d, seq_q, seq_k, heads, heads_k, seed=0):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((1, heads, seq_q, d)), BF16)
    k, v = (round_to(rng.standard_normal((1, heads_k, seq_k, d)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


def _check(level, d, score_mod, mask_mod, seq_q, seq_k, heads, heads_k, warns=False):
    """The backward at `level` against the float64 reference; with no warning (no rung of a ladder taken) unless
    `warns`."""
    q, k, v, do = inputs(d, seq_q, seq_k, heads, heads_k)
    o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    with warnings.catch_warnings():
        warnings.simplefilter("default" if warns else "error")
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level=level)
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]
    return grads


def _ptx(module) -> str:
    """The main kernel through the default pipeline, which must not fall back (a fallback warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return tessera.compile(module, target="ptx", pipeline=passes.DEFAULT_PIPELINE)


def test_d128_window_gqa_ragged_at_target_level_takes_the_dense_kernels_blocks():
    """head_dim 128 with a sliding window fits warp-specialized on the dense kernel's keys-on-rows 64 x 128
    blocks (two consumer warpgroups, each 64 keys of the block): no head split, no warning; GQA, seq_q != seq_k,
    neither a multiple of 64."""
    from tessera.runtime import flex

    _check("target", 128, None, window, 70, 90, 2, 1)
    kernels, _ = flex.backward_kernels(None, score_mod=None, mask_mod=window, causal=False, scale=None,
                                       level="target", head_dim=128, dtype="bf16", blocks=(64, 128), head_split=1)
    assert kernels.config.key_rows and flex.warp_specialized_refusal(kernels.main) is None  # taken above


def test_d64_alibi_document_masking_at_target_level_takes_the_dense_kernels_blocks():
    """ALiBi with document masking at head_dim 64 fits the dense default's 128 x 128 blocks warp-specialized (two
    consumer warpgroups, 240 registers each: 224 counted): `kv_idx - q_idx` is lowered as the thread's 34
    distinct (column - row) offsets, `slopes[h]` as one load, and `compute-distinct-lanes` computes the product
    on those 34 registers; the documents are two gathers (a row vector of the queries' documents, a column vector
    of the keys', each column loaded once). No warning; GQA, seq_q != seq_k, neither a multiple of 128, an empty
    document. (A sliding window at 128 x 128: the slow PTX-level tests and the SASS test.)"""
    from tessera.runtime import flex

    _check("target", 64, alibi, late_document, 150, 170, 2, 1)
    kernels, _ = flex.backward_kernels(None, score_mod=alibi, mask_mod=late_document, causal=False, scale=None,
                                       level="target", head_dim=64, dtype="bf16", blocks=(128, 128))
    assert flex.warp_specialized_refusal(kernels.main) is None  # remembered from the run above


@pytest.mark.parametrize("score_mod", [softcap_alibi, pytest.param(softcap_symmetric_alibi, marks=pytest.mark.slow)])
def test_d64_softcap_alibi_takes_the_dense_kernels_blocks(score_mod):
    """A soft-cap with ALiBi at head_dim 64 fits 128 x 128 blocks warp-specialized (224 registers counted, 249
    before): ALiBi's bias is added to the soft-capped score 8 registers at a time, each register's distance
    rebuilt from the thread's scalar (`convert-tile-to-sm90`), so that no view of the 34 distinct distances is
    live beside tanh's value and the soft-cap's output. (ptxas 12.9, 13.0 and 13.5 assemble it without spilling
    at the consumers' 240: -m slow tests/test_regalloc_accuracy.py.) So does symmetric ALiBi,
    `score - slope * abs(q_idx - kv_idx)` (225 counted, 249 before), each register's |distance| rebuilt too."""
    from tessera.runtime import flex

    kernels, _ = flex.backward_kernels(None, score_mod=score_mod, mask_mod=None, causal=False, scale=None,
                                       level="target", head_dim=64, dtype="bf16", blocks=(128, 128))
    assert flex.warp_specialized_refusal(kernels.main) is None


@pytest.mark.slow
def test_d64_empty_document_with_alibi_at_target_level():
    """Query rows that see no key get dQ = 0; key blocks no query sees are in no list: dK = dV = 0 there (a
    soft-cap with ALiBi and a document mask read from an array: 280 registers at 128 x 128 blocks, so the
    backward says, by name, that it takes 64 x 64 blocks)."""
    from tessera.ir.diagnostics import TesseraWarning

    with pytest.warns(TesseraWarning, match=r"does not fit warp-specialized with 128 x 128 blocks .*built with 64 x 64"):
        _, dk, dv = _check("target", 64, softcap_alibi, late_document, 100, 150, 2, 2, warns=True)
    assert not np.asarray(dk, np.float32)[:, :, 40:64].any() and not np.asarray(dv, np.float32)[:, :, 40:64].any()


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("d,score_mod,mask_mod", [(64, softcap_alibi, window), (128, softcap, None),
                                                  (128, None, late_document), (64, None, late_document),
                                                  (64, None, head_window), (128, None, head_window),
                                                  (64, softcap, None), (128, alibi, window),
                                                  (64, softcap_symmetric_alibi, None)],
                         ids=["d64-softcap-alibi-window", "d128-softcap", "d128-document", "d64-document",
                              "d64-head-window", "d128-head-window", "d64-softcap", "d128-alibi-window",
                              "d64-softcap-symmetric-alibi"])
def test_slice_below_tile_level(level, d, score_mod, mask_mod):
    """GQA (4 query heads, 2 K/V heads), seq_q != seq_k, neither a multiple of 64; where a rung of a ladder is
    taken it warns. These take the dense kernel's blocks without one: the head windows, document masking (128 x
    128 at head_dim 64, the keys-on-rows 64 x 128 at 128) and a soft-cap at head_dim 64 (its tanh and
    1 - t^2 beside P)."""
    fits = mask_mod in (head_window, late_document) or (d, score_mod) in ((64, softcap), (128, alibi),
                                                                          (64, softcap_alibi),
                                                                          (64, softcap_symmetric_alibi))
    _check(level, d, score_mod, mask_mod, 70, 170, 4, 2, warns=not fits)


@pytest.mark.slow
def test_d64_softcap_window_gqa_at_ptx_level():
    """At 128 x 128 since the window's compares are one setp per register against an immediate (224 counted)."""
    _check("ptx", 64, softcap, window, 70, 90, 2, 1)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("score_mod,mask_mod", [(alibi, None), (relative_table, None), (alibi, window),
                                                (relative_table, late_document)],
                         ids=["alibi", "table", "alibi-window", "table-document"])
def test_d64_differences_of_coordinates_take_the_dense_kernels_blocks(level, score_mod, mask_mod):
    """ALiBi and a relative-position table, alone, with a window or with documents, at head_dim 64 on 128 x 128
    blocks without a warning; GQA (4 query heads, 2 K/V heads), seq_q != seq_k, neither a multiple of 128."""
    _check(level, 64, score_mod, mask_mod, 150, 170, 4, 2)


@pytest.mark.slow
def test_d64_window_gqa_at_ptx_level():
    _check("ptx", 64, None, window, 150, 200, 2, 1)


KEY_WEIGHTS = np.linspace(0.0, 1.0, 4096)


def softcap_alibi_table_tanh(score, b, h, q_idx, kv_idx):
    return softcap_alibi_table(score, b, h, q_idx, kv_idx) + KEY_WEIGHTS[kv_idx] * np.tanh(score / 3.0)


@pytest.mark.slow
def test_d128_falls_back_to_the_head_split_with_a_warning():
    """soft-cap + ALiBi + a relative-position table + a key-weighted tanh of the score under a window needs 296
    registers a thread in one thread block per key block at head_dim 128 (one consumer warpgroup has 256): the
    backward takes head_split=2, and says so. (Without the tanh term it fits one thread block per key block:
    253 at 64 x 128, under 256 at 64 x 64.)"""
    q, k, v, do = inputs(128, 64, 64, 1, 1)
    o, lse = tessera.attention(q, k, v, score_mod=softcap_alibi_table_tanh, mask_mod=window, return_lse=True,
                               level="tile")
    with pytest.warns(UserWarning, match=r"does not fit warp-specialized .*as one thread block per key block "
                                         r"\(the consumer warpgroups need \d+ registers.*head_split=2"):
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=softcap_alibi_table_tanh, mask_mod=window,
                                           level="target")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, softcap_alibi_table_tanh, window)
    assert all(c.ok for c in checks), [str(c) for c in checks]


@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("d,score_mod,mask_mod,options", [
    (64, softcap, None, dict(block_m=128, block_n=128)),
    pytest.param(64, softcap_alibi, window, {}, marks=pytest.mark.slow),
    pytest.param(64, alibi, late_document, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(64, relative_table, None, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(64, softcap, window, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(64, alibi, window, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(64, None, window, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(64, None, late_document, dict(block_m=128, block_n=128), marks=pytest.mark.slow),
    pytest.param(128, None, window, dict(block_m=64, block_n=128), marks=pytest.mark.slow),
    pytest.param(128, None, late_document, dict(block_m=64, block_n=128), marks=pytest.mark.slow),
    pytest.param(128, softcap_alibi, window, dict(head_split=2), marks=pytest.mark.slow),
    pytest.param(128, softcap, None, dict(head_split=1), marks=pytest.mark.slow),
    pytest.param(64, None, window, dict(block_m=128, block_n=128, deterministic=True), marks=pytest.mark.slow),
    pytest.param(128, alibi, late_document, dict(block_m=64, block_n=128, head_split=1), marks=pytest.mark.slow),
    pytest.param(128, softcap, None, dict(block_m=64, block_n=128, head_split=1), marks=pytest.mark.slow),
    pytest.param(128, softcap_alibi, window, dict(head_split=1), marks=pytest.mark.slow)])
def test_main_kernel_is_warp_specialized_and_ptxas_clean(d, score_mod, mask_mod, options):
    """A producer warpgroup (setmaxnreg.dec) and consumers (setmaxnreg.inc), without a fallback; no spill."""
    kernels = attention_backward(d, score_mod=score_mod, mask_mod=mask_mod, block_sparse=mask_mod is not None,
                                 **options)
    ptx = _ptx(kernels.main)
    assert "setmaxnreg.dec.sync.aligned.u32" in ptx and "setmaxnreg.inc.sync.aligned.u32" in ptx
    result = toolchain.compile_ptx(ptx)
    assert result.warnings == ()
    for entry in result.entries.values():
        assert not entry.spills, entry


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("score_mod,mask_mod", [(alibi, None), (alibi, late_document), (relative_table, None),
                                                (softcap, window), (softcap_symmetric_alibi, None)],
                         ids=["alibi", "alibi-document", "table", "softcap-window", "softcap-symmetric-alibi"])
def test_d64_128x128_modifiers_assemble_clean_under_every_ptxas(score_mod, mask_mod):
    """The modifiers that fit head_dim 64's 128 x 128 blocks since `compute-distinct-lanes` (counted 222, 224,
    222, 224) assemble without spilling under every ptxas found (12.9, 13.0, 13.5: they need 216, 216, 216 and
    224-240 at the consumers' 240); so does a soft-cap with symmetric ALiBi (225 counted)."""
    ptx = _ptx(attention_backward(64, score_mod=score_mod, mask_mod=mask_mod, block_sparse=mask_mod is not None,
                                  block_m=128, block_n=128).main)
    for ptxas in toolchain.find_all_ptxas():
        result = toolchain.compile_ptx(ptx, ptxas=ptxas.path)
        assert result.warnings == (), ptxas
        for entry in result.entries.values():
            assert not entry.spills, (ptxas, entry)


BLOCK_LIST_READ = 12
"""SASS instructions a trip of the full-block loop may add to the dense loop's: reading the next pair of the
work list (one load, its address arithmetic and the unpacking)."""


@pytest.mark.slow  # bench/attention_variants.py --backward prints the same figures
@pytest.mark.usefixtures("nvdisasm")
def test_full_block_loop_costs_what_the_dense_loop_costs():
    """The consumer's loop over full blocks runs no mask (mask_mod only: no score_mod either): its SASS is the
    dense default kernel's main loop (head_dim 64, 128 x 128, warp-specialized) plus at most the work list's
    read (ptxas 13.0: 842 against 867: the dense loop masks the bounds); the partial loop is the one that masks."""
    def hgmma_loops(module):
        text = disassemble(toolchain.compile_ptx(_ptx(module)).cubin)
        return sorted(len(loop.instructions) for loop in sass_loops(text) if loop.opcode_counts["HGMMA"])

    dense = hgmma_loops(attention_backward(64).main)
    sparse = hgmma_loops(attention_backward(64, block_m=128, block_n=128, mask_mod=window, block_sparse=True).main)
    assert len(sparse) == 2, (dense, sparse)  # full blocks, then partial ones
    # the dense kernel's main loop is its smallest (its last trip, which masks the bounds, is peeled off)
    assert sparse[0] <= dense[0] + BLOCK_LIST_READ, (sparse, dense)
    assert sparse[1] > sparse[0] + 100, (sparse, dense)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_d64_t5_buckets_take_the_dense_kernels_blocks(level):
    """T5's buckets at head_dim 64 fit the dense kernel's 128 x 128 blocks warp-specialized (223 registers
    counted, 253 before): the i32 abs is one `abs.s32`, and the distance's magnitude n, which
    `np.where(n < 8, n, ...)` reads after the logarithm's conversion to an integer, is re-created there
    (`rematerialize-constants`) instead of held beside that conversion. No warning; GQA, seq_q != seq_k."""
    from test_attention_mods_users import t5_relative_bias

    _check(level, 64, t5_relative_bias, None, 70, 170, 4, 2)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
def test_t5_buckets_assemble_clean_under_every_ptxas():
    """T5's backward at head_dim 64 on 128 x 128 blocks and at 128 on 64 x 128, warp-specialized, and its
    forward at BN 128 (225 registers counted, 259 before) assemble without spilling under every ptxas found
    (12.9, 13.0, 13.5)."""
    from test_attention_mods_users import t5_relative_bias

    kernels = [attention_backward(64, score_mod=t5_relative_bias, block_m=128, block_n=128).main,
               attention_backward(128, score_mod=t5_relative_bias, block_m=64, block_n=128, head_split=1).main,
               flash_attention(64, block_n=128, score_mod=t5_relative_bias)]
    for ptx in map(_ptx, kernels):
        assert "setmaxnreg.inc.sync.aligned.u32" in ptx
        for ptxas in toolchain.find_all_ptxas():
            result = toolchain.compile_ptx(ptx, ptxas=ptxas.path)
            assert result.warnings == (), ptxas
            for entry in result.entries.values():
                assert not entry.spills, (ptxas, entry)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_d128_t5_buckets_take_the_dense_kernels_blocks(level):
    """T5's buckets at head_dim 128 fit the keys-on-rows 64 x 128 blocks warp-specialized (219 registers
    counted since their distance's magnitude is re-created at its late readers, 235 before, 243 before that):
    `kv_idx - q_idx > 0`, which picks the bucket's half, is computed on the thread's 34 distinct offsets like the
    rest of the bucket, so the table's gather loads 34 registers, not 64 (ptxas 12.9, 13.0 and 13.5 assemble it
    without spilling). No warning; GQA, seq_q != seq_k."""
    from test_attention_mods_users import t5_relative_bias

    _check(level, 128, t5_relative_bias, None, 70, 170, 4, 2)
