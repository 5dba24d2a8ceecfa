"""Attention variants as a demanding FlexAttention user writes them next (issue 29, round 3), none of which the
earlier rounds (`test_attention_mods_unseen.py`, `test_attention_mods_users.py`) have: non-causal chunks of 50
(block-diagonal), prefix-LM with a per-batch prefix, sinks and per-batch key padding in one mask (three masks
or-ed and and-ed), per-batch documents with gaps in the ids (empty documents) and padding keys marked -1, a
per-head per-key bias table `bias[h, kv_idx]`, scores clipped by `np.where` on the score itself and by
`np.clip` (their derivative 0 where clipped), `np.minimum`/`np.maximum` of the score, an additive -inf key mask
read from a per-batch table, a data-dependent threshold that hides low scores, a score_mod that ignores the
score, bottom-right causal alignment written by the user (`q_idx + (S_k - S_q) >= kv_idx`), a GQA mask_mod
reading the query head `h`, and a bf16 bias table. Each runs forward and backward through `tessera.attention`
/ `tessera.attention_backward` at Tile level against the float64 reference, over seq_q != seq_k both ways,
lengths 1, 17, 129, GQA, batch 2; rows that see no key give O = 0, LSE = -inf and dQ = 0.

The default run takes a slice (`FAST`, about 2 s); `-m slow` runs every variant over the shapes at Tile level
and at one shape in the CTA simulator and the PTX executor (a slice at head_dim 128 too), and ptxas on each
variant's forward and backward kernels (no spill). Then `create_block_mask`'s classes and lists
against a brute-force evaluation, and bad input through the public calls (each a named refusal or a right
answer)."""

from __future__ import annotations

import numpy as np
import pytest
from mods_checks import (assert_variant_kernels_assemble, brute_block_kinds, check_named_variant,
                         check_variant_forward_and_backward, variant_inputs)

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.variants import ModTraceError, create_block_mask, trace_mod
from tessera.variants.block_mask import FULL, PARTIAL, VISIT_HEAD

H = 4
PREFIX = np.array([9, 30])                                   # per batch entry
KV_LEN = np.array([1000, 23])                                # batch 1 has 23 real keys
DOCS = np.full((2, 1000), -1)                                # per batch entry; -1: padding
DOCS[0] = np.repeat([0, 2, 4], [20, 1, 979])                 # ids 1 and 3 have no token
DOCS[1, :40] = np.repeat([0, 5], [12, 28])                   # 40 real tokens, the rest padding
KEY_BIAS = np.random.default_rng(3).standard_normal((H, 1000)).astype(np.float32)
KEY_BIAS_BF16 = KEY_BIAS.astype(BF16)
ADDITIVE = np.where(np.arange(1000)[None, :] < np.array([1000, 30])[:, None], 0.0, -np.inf).astype(np.float32)


# region masks

def chunks_of_50(b, h, q_idx, kv_idx):
    """Block-diagonal: bidirectional inside chunks of 50 positions."""
    return q_idx // 50 == kv_idx // 50


def prefix_sinks_padding(b, h, q_idx, kv_idx):
    """Prefix-LM with a per-batch prefix, two sink keys, and per-batch key padding: three masks or-ed, and-ed
    with a fourth."""
    return ((kv_idx < PREFIX[b]) | (q_idx >= kv_idx) | (kv_idx < 2)) & (kv_idx < KV_LEN[b])


def padded_documents(b, h, q_idx, kv_idx):
    return (DOCS[b, q_idx] == DOCS[b, kv_idx]) & (DOCS[b, kv_idx] >= 0)


def window_or_strided(b, h, q_idx, kv_idx):
    """A causal window of 16 or, for odd queries, every seventh key (sparse-transformer flavour)."""
    return ((q_idx >= kv_idx) & (q_idx - kv_idx < 16)) | ((kv_idx % 7 == 0) & (q_idx % 2 == 1))


def bottom_right(seq_q, seq_k):
    """Causal aligned to the bottom-right corner, as a user writes it for fixed lengths."""
    offset = seq_k - seq_q

    def causal_bottom_right(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx
    return causal_bottom_right


def per_head(b, h, q_idx, kv_idx):
    """GQA, the query head chooses: even heads see everything, odd ones are causal lagging by h keys."""
    return (h % 2 == 0) | (q_idx >= kv_idx + h)


def sees_nothing(b, h, q_idx, kv_idx):
    return q_idx < 0


# endregion
# region score mods

def key_bias(score, b, h, q_idx, kv_idx):
    return score + KEY_BIAS[h, kv_idx]


def key_bias_bf16(score, b, h, q_idx, kv_idx):
    """The same table stored in bf16, as a learned bias often is."""
    return score + KEY_BIAS_BF16[h, kv_idx]


def soft_clip_where(score, b, h, q_idx, kv_idx):
    """Scores above 1 grow ten times slower (np.where on the score itself)."""
    return np.where(score > 1.0, 1.0 + 0.1 * (score - 1.0), score)


def hard_clip(score, b, h, q_idx, kv_idx):
    return np.clip(score, -1.5, 1.5)


def min_max(score, b, h, q_idx, kv_idx):
    return np.minimum(score, 0.5) + np.maximum(score, -0.5) * 0.5


def additive_key_mask(score, b, h, q_idx, kv_idx):
    """The SDPA habit: an additive 0 / -inf key mask, here per batch entry."""
    return score + ADDITIVE[b, kv_idx]


def threshold(score, b, h, q_idx, kv_idx):
    """Data-dependent sparsity: scores below -0.5 are hidden (some rows see no key)."""
    return np.where(score < -0.5, -np.inf, score)


def ignores_score(score, b, h, q_idx, kv_idx):
    return score * 0.0 + 0.01 * kv_idx


# endregion

VARIANTS = {
    "chunks-of-50": (None, chunks_of_50),
    "prefix+sinks+padding": (None, prefix_sinks_padding),
    "padded-documents": (None, padded_documents),
    "window-or-strided": (None, window_or_strided),
    "bottom-right": (None, "bottom_right"),
    "per-head-gqa": (None, per_head),
    "key-bias+per-head": (key_bias, per_head),
    "key-bias-bf16": (key_bias_bf16, None),
    "soft-clip-where+three-or": (soft_clip_where, prefix_sinks_padding),
    "hard-clip": (hard_clip, None),
    "min-max": (min_max, chunks_of_50),
    "additive-key-mask": (additive_key_mask, None),
    "threshold": (threshold, None),
    "ignores-score+documents": (ignores_score, padded_documents),
    "sees-nothing": (soft_clip_where, sees_nothing),
}
SHAPES = [  # (batch, heads, heads_k, seq_q, seq_k)
    (2, H, 2, 70, 45),
    (1, H, 4, 1, 1),
    (1, H, 1, 17, 129),
    (2, H, 4, 129, 17),
    (1, 2, 2, 1, 200),
]
FAST = ["padded-documents", "soft-clip-where+three-or", "sees-nothing"]


def _mods(name, seq_q, seq_k):
    score_mod, mask_mod = VARIANTS[name]
    return score_mod, bottom_right(seq_q, seq_k) if mask_mod == "bottom_right" else mask_mod


def check_variant(name, shape, level, head_dim=64):
    """Forward and backward at `level` against the float64 reference (`mods_checks`); returns the empty rows."""
    return check_named_variant(VARIANTS, name, shape, level, head_dim, mods=_mods(name, shape[3], shape[4]))


@pytest.mark.parametrize("name", FAST)
def test_variant_at_tile_level(name):
    empty = check_variant(name, SHAPES[0], "tile")
    if name in ("padded-documents", "sees-nothing"):  # padding queries (batch 1 past 40) see no key
        assert empty.any()
    assert empty.all() == (name == "sees-nothing")


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_over_shapes_at_tile_level(name, shape):
    check_variant(name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_below_tile_level(name, level):
    check_variant(name, SHAPES[0], level)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["padded-documents", "threshold", "key-bias+per-head", "soft-clip-where+three-or",
                                  "sees-nothing"])
def test_variant_at_head_dim_128_in_the_cta_simulator(name):
    """head_dim 128: the backward's keys-on-rows blocks evaluate the modifiers on S^T."""
    check_variant(name, SHAPES[0], "target", head_dim=128)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_kernels_assemble_without_spills(name):
    assert_variant_kernels_assemble(*_mods(name, 70, 45))


# region create_block_mask against a brute-force evaluation

@pytest.mark.parametrize("name", ["chunks-of-50", "prefix+sinks+padding", "padded-documents", "window-or-strided",
                                  "per-head-gqa", "sees-nothing"])
def test_block_classes_and_lists_match_a_brute_force_evaluation(name):
    batch, heads, seq_q, seq_k, bm, bn = 2, H, 130, 77, 32, 16
    mask_mod = VARIANTS[name][1]
    mask = create_block_mask(mask_mod, batch, heads, seq_q, seq_k, bm, bn)
    kinds = brute_block_kinds(mask_mod, batch, heads, seq_q, seq_k, bm, bn)
    np.testing.assert_array_equal(mask.kinds, kinds)
    full_n, full_i, part_n, part_i = mask.inputs()
    for counts, indices, kind in ((full_n, full_i, FULL), (part_n, part_i, PARTIAL)):
        for b, h, i in np.ndindex(counts.shape):
            expected = np.flatnonzero(kinds[b, h, i] == kind)
            assert indices[b, h, i, :counts[b, h, i]].tolist() == expected.tolist()
            assert not indices[b, h, i, counts[b, h, i]:].any()
    counts, visits = mask.backward_inputs(2)  # GQA: two query heads per K/V head
    for b, hk, j in np.ndindex(counts.shape[:3]):
        pairs = [divmod(int(x), VISIT_HEAD) for x in visits[b, hk, j, :counts[b, hk, j].sum()]]
        group = [(h, i) for h in (2 * hk, 2 * hk + 1) for i in range(kinds.shape[2])]
        assert pairs == ([p for p in group if kinds[b, p[0], p[1], j] == FULL]
                         + [p for p in group if kinds[b, p[0], p[1], j] == PARTIAL])


# endregion
# region bad input through the public calls

def _inputs(head_dim=64, heads=2, heads_k=2, dtype=BF16):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, heads, 33, head_dim)).astype(dtype),
            *(rng.standard_normal((1, heads_k, 40, head_dim)).astype(dtype) for _ in range(2)))


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def test_unsupported_head_dim_with_mods_is_refused_by_name():
    """head_dim 48 with a mask_mod was a KeyError from the block-size table; now the dense path's refusal."""
    from tessera.runtime.attention_base import UnsupportedKernel

    with pytest.raises(UnsupportedKernel, match="head_dim 48 is not supported .*supported: 64, 96, 128, 192, 256"):
        tessera.attention(*_inputs(head_dim=48), mask_mod=_causal, level="tile")


@pytest.mark.parametrize("scale", [np.float32(0.1), np.float64(0.1), np.int64(1)])
def test_numpy_scalar_scale_with_mods(scale):
    """A NumPy scalar scale (`1 / np.sqrt(np.float32(d))`) was refused with mods ("got np.float32(0.1)");
    it is the number it holds, forward and backward."""
    q, k, v = _inputs()
    o, lse = tessera.attention(q, k, v, mask_mod=_causal, scale=scale, return_lse=True, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, None, _causal, scale=float(scale), lse=lse).ok
    grads = tessera.attention_backward(q, k, v, o, lse, q, mask_mod=_causal, scale=scale, level="tile")
    assert all(c.ok for c in reference.check_attention_mods_backward(grads, q, k, v, o, q, BF16, None, _causal,
                                                                     scale=float(scale)))


@pytest.mark.parametrize("scale", [-0.125, 0.0, float("nan"), np.bool_(True), "0.1"])
def test_bad_scale_is_refused_by_name(scale):
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        tessera.attention(*_inputs(), mask_mod=_causal, scale=scale, level="tile")


ZERO_D = np.array(0.25)
TABLE = np.arange(40.0)
SHORT = np.ones(5)


@pytest.mark.parametrize("fn,kind,message", [
    (lambda s, b, h, q, k: s > 0, "score_mod", "returns a boolean; a score_mod returns the new score"),
    (lambda s, b, h, q, k: (s, s), "score_mod", "cannot trace an operand of type tuple"),
    (lambda b, h, q, k: (q - k) * 0.5, "mask_mod", "returns a f32 value; a mask_mod returns a boolean"),
    (lambda b, h, q, k: SHORT[k] > 0, "mask_mod", "reads SHORT[kv_idx], which reaches [0, 39] for the launch"),
    (lambda s, b, h, q, k: s + TABLE, "score_mod",
     "the captured array TABLE of shape (40,) used as a whole (index it with one value per dimension, such as "
     "TABLE[kv_idx]; an array computed from it, outside the modifier)"),
    (lambda s, b, h, q, k: s + TABLE[q * 0.5], "score_mod", "TABLE[...] with a f32 index (indices are integers)"),
])
def test_bad_modifiers_are_refused_by_name(fn, kind, message):
    mods = {kind: fn}
    with pytest.raises(ModTraceError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")) as caught:
        tessera.attention(*_inputs(), **mods, level="tile")
    assert f"{kind} '<lambda>'" in str(caught.value)


def test_a_zero_dimensional_captured_array_is_its_number():
    """`score + ZERO_D` (a 0-d array, as NumPy reads it) was refused as "an operand of type _ArrayProxy"."""
    def shifted(score, b, h, q_idx, kv_idx):
        return ZERO_D * score + ZERO_D

    assert trace_mod(shifted, "score_mod").arrays == []
    q, k, v = _inputs()
    o = tessera.attention(q, k, v, score_mod=shifted, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, shifted).ok


def test_a_bf16_table_is_read_as_f32():
    """A bf16 captured table was refused ("its dtype bfloat16 is not a number"); it is widened to f32 exactly."""
    trace = trace_mod(key_bias_bf16, "score_mod")
    assert trace.arrays[0].array.dtype == np.float32
    np.testing.assert_array_equal(trace.arrays[0].array, KEY_BIAS_BF16.astype(np.float32))


@pytest.mark.parametrize("shapes,message", [
    (((1, 3, 33, 64), (1, 2, 40, 64), (1, 2, 40, 64)), "a divisor of q's"),
    (((1, 2, 0, 64), (1, 2, 40, 64), (1, 2, 40, 64)), "q has an empty dimension"),
    (((1, 2, 33, 64), (1, 2, 40, 64), (1, 2, 41, 64)), "k and v must have the same sequence length"),
])
def test_bad_shapes_with_mods_are_refused_by_name(shapes, message):
    q, k, v = (np.zeros(s, BF16) for s in shapes)
    with pytest.raises(ValueError, match=message):
        tessera.attention(q, k, v, mask_mod=_causal, level="tile")


def test_float64_inputs_are_refused_naming_the_types():
    q, k, v = _inputs(dtype=np.float64)
    with pytest.raises(ValueError, match="element type float64 is not supported .*bfloat16, float16"):
        tessera.attention(q, k, v, mask_mod=_causal, level="tile")


def test_strided_inputs_give_the_contiguous_answer():
    """Non-contiguous q (every other column of a wider array), a transposed view, negative strides and a
    stride-0 broadcast k: the same bits as their contiguous copies, forward and backward."""
    q, k, v = _inputs()
    wide = np.repeat(q, 2, axis=-1)[..., ::2]
    flipped = np.ascontiguousarray(k[:, :, ::-1])[:, :, ::-1]
    transposed = np.swapaxes(np.ascontiguousarray(np.swapaxes(v, 1, 2)), 1, 2)
    broadcast = np.broadcast_to(k[:, :1], k.shape)
    for views in ((wide, flipped, transposed), (q, broadcast, v)):
        copies = [np.ascontiguousarray(x) for x in views]
        outs = [tessera.attention(*x, score_mod=soft_clip_where, mask_mod=_causal, return_lse=True, level="tile")
                for x in (views, copies)]
        for got, want in zip(*outs):
            np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
        o, lse = outs[1]
        grads = [tessera.attention_backward(*x, o, lse, q, score_mod=soft_clip_where, mask_mod=_causal,
                                            level="tile") for x in (views, copies)]
        for got, want in zip(*grads):
            np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))

# endregion


# region arrays read by code nested in a modifier

DISTANCE_TABLE = np.random.default_rng(4).standard_normal((H, 64)).astype(np.float32) * 0.5
SEGMENT = np.repeat([0, 1, 2], [25, 20, 1000])


def nested_def_bias(score, b, h, q_idx, kv_idx):
    def bias(d):
        return DISTANCE_TABLE[h, np.clip(d, 0, 63)]
    return score + bias(q_idx - kv_idx)


def generator_bias(score, b, h, q_idx, kv_idx):
    return score + sum(DISTANCE_TABLE[i, np.clip(kv_idx, 0, 63)] for i in range(2)) * 0.5


def lambda_segments(b, h, q_idx, kv_idx):
    same = lambda i, j: SEGMENT[i] == SEGMENT[j]  # noqa: E731
    return same(q_idx, kv_idx) & (q_idx >= kv_idx)


@pytest.mark.parametrize("score_mod,mask_mod", [(nested_def_bias, None), (generator_bias, lambda_segments)],
                         ids=["nested-def", "generator+lambda"])
def test_arrays_read_by_nested_code_are_captured(score_mod, mask_mod):
    """A module-global array read only inside a def, a lambda or a generator expression of the modifier (their
    own code objects, with the modifier's globals) was refused as "not a captured NumPy array ... a module
    global it names"; it is captured like one read by the modifier's own code, forward and backward."""
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            assert trace_mod(fn, kind).arrays
    q, k, v, do = variant_inputs((1, H, 2, 45, 70), 5)
    check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, "tile")

# endregion


# region booleans in arithmetic, as NumPy promotes them

def sink_bonus(score, b, h, q_idx, kv_idx):
    """A boolean beside a number is 1 or 0: a bonus for the first key, a score zeroed above the diagonal."""
    return score * (q_idx >= kv_idx) + 0.5 * (kv_idx == 0) - (q_idx % 2 == 1) * 0.25


def sum_of_masks(b, h, q_idx, kv_idx):
    """NumPy's booleans: `+` is or, `*` is and."""
    return (q_idx >= kv_idx) * (q_idx - kv_idx < 8) + (kv_idx < 2)


def test_booleans_promote_in_arithmetic():
    """`0.5 * (kv_idx == 0)` and `score * (q_idx >= kv_idx)` were refused ("'mul' of a boolean value"); they
    trace as NumPy computes them (a boolean beside a number is 1 or 0; bool + bool is or, bool * bool is and),
    forward and backward. What NumPy refuses stays refused: bool - bool, -bool."""
    assert trace_mod(sum_of_masks, "mask_mod").uses("or")
    q, k, v, do = variant_inputs((2, H, 2, 45, 70), 6)
    check_variant_forward_and_backward(q, k, v, do, sink_bonus, sum_of_masks, "tile")
    for fn in (lambda b, h, q, k: (q >= k) - (k < 2), lambda b, h, q, k: -(q >= k)):
        with pytest.raises(ModTraceError, match="of a boolean value"):
            trace_mod(fn, "mask_mod")

# endregion


# region block lists that are not the kernel's

def _window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 70)


@pytest.mark.parametrize("blocks", [(128, 128), (64, 64), (128, 32)])
def test_block_lists_for_other_blocks_are_refused(blocks):
    """A `flash_attention(mask_mod=, block_sparse=True)` kernel (BM 128, BN 64) given lists that
    `create_block_mask` made for other blocks read them in bounds and named other blocks: a silently wrong O
    (max error 1.8). Its list inputs' dimensions are ceildiv(seq_q, BM) and ceildiv(seq_k, BN), checked at
    launch."""
    from tessera.kernels import flash_attention

    q, k, v, _ = variant_inputs((1, 2, 2, 150, 150), 7)
    module = flash_attention(64, mask_mod=_window, block_n=64, block_sparse=True)
    lists = create_block_mask(_window, 1, 2, 150, 150, *blocks).inputs()
    with pytest.raises(ValueError, match=r"input (FULL_)?KV_(NUM_BLOCKS|INDICES) of @\w+, dimension \d "
                                         r"\(ceildiv\(seq_(q, 128|k, 64)\)\): the other sizes give \d, got \d"):
        tessera.interpret(module, q, k, v, *lists, level="tile")
    right = create_block_mask(_window, 1, 2, 150, 150, 128, 64).inputs()
    o = tessera.interpret(module, q, k, v, *right, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, None, _window).ok


def test_backward_work_lists_for_other_key_blocks_are_refused():
    """The backward's per-key-block work lists have ceildiv(seq_k, BN) rows, checked at launch."""
    from tessera.kernels import attention_backward

    kernels = attention_backward(64, mask_mod=_window, block_sparse=True)
    c = kernels.config.attention
    main = tessera.find_kernel(kernels.main)
    q, k = (1, 2, 33, 64), (1, 2, 200, 64)
    rows = (1, 2, -(-33 // c.block_m) * c.block_m)
    for bn in (c.block_n, c.block_n // 2):
        lists = create_block_mask(_window, 1, 2, 33, 200, c.block_m, bn).backward_inputs(2)
        shapes = [q, k, k, q, rows, rows, *(x.shape for x in lists)]
        if bn == c.block_n:
            main.sizes_from_inputs(shapes)
            continue
        with pytest.raises(ValueError, match=rf"Q_NUM_VISITS of @\w+, dimension 2 \(ceildiv\(seq_k, {c.block_n}\)\)"):
            main.sizes_from_inputs(shapes)

# endregion
