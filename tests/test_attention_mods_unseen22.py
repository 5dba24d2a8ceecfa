"""Attention variants as a FlexAttention user writes them next (issue 29, round 22), against a float64 reference
written apart from `tessera.reference` (`mods_reference`: dQ, dK, dV from each score_mod's derivative taken by
hand, the gradients of captured tables summed by `np.add.at`).

The variants: attention sinks OR'd with a sliding window, a per-head dilation under causal, a per-batch prefix-LM
beside a soft-capped ALiBi, causal attention inside each document in the document's own positions (two captured
tables: [B, S] ids and [B, docs] starts), a `np.where` on the distance with a per-head scale and `np.log1p`, a
[H, 2W + 1] relative table at a clipped distance, a stable softplus of the score (`np.maximum`, `np.log1p`,
`np.exp`, `np.minimum`) under block-local attention of a per-head block size, GQA with a window per K/V head,
rows that see no key, a square of the score, a per-head temperature, a [B, H, S] table of visible keys beside a
full [B, H, S, S] bias, a Gaussian of the distance (an integer power), a [K/V heads, S] table, -inf from the
score_mod, `np.exp2` of a floored distance; gradients of six learned tables; their block classes. Then what this
round found in NumPy modifiers: `np.clip` with a bound None or by keyword and `.clip(min=, max=)` (refused), a
captured table's `.shape` / `len()` (refused), and refusals that leaked internals (`ArrayProxy`, `unhashable type:
'Traced'`). The torch modifiers of this round are in test_attention_mods_unseen22_torch.py.

The default run takes Tile level over three shapes (seq_q != seq_k both ways, no multiple of a block, GQA 2:1 and
4:1, batch 2); `-m slow` the target and PTX levels at one shape, the captured gradients in the PTX executor and
the fixes at both levels, and seven variants at 1000 x 1000 and one-row shapes."""

from __future__ import annotations

import numpy as np
import pytest
from mods_reference import check, inputs

import tessera
from tessera.variants import IndexRangeError, ModTraceError, trace_mod

H, HK, W = 4, 2, 24
_rng = np.random.default_rng(22)
PREFIX = np.array([0, 37])                                                         # per batch entry
DOCS = np.stack([np.repeat([0, 1, 2], [50, 7, 243]), np.repeat([0, 1, 2, 3], [1, 99, 100, 100])])  # [B, S]
STARTS = np.array([[0, 50, 57, 300], [0, 1, 100, 200]])                            # [B, docs]
HSCALE = np.array([1.0, 0.5, 2.0, 0.75], np.float32)
SLOPES = np.array([0.25, 0.125, 0.0625, 0.03125], np.float32)
REL2 = (_rng.standard_normal((H, 2 * W + 1)) * 0.5).astype(np.float32)
KEY_BIAS = (_rng.standard_normal((2, 300)) * 0.3).astype(np.float32)             # [B, S] by (b, kv_idx)
DILATION = np.array([1, 2, 3, 5])
BLOCK = np.array([16, 48, 64, 100])
KV_WINDOW = np.array([8, 40])                                                      # per K/V head
VISIBLE = _rng.random((2, H, 300)) < 0.8                                           # [B, H, S] keys
VISIBLE[0, 1] = False                                                              # a head that sees nothing
BIAS = (_rng.standard_normal((2, H, 300, 300)) * 0.5).astype(np.float32)          # [B, H, S, S]
SIGMA = np.array([4.0, 8.0, 16.0, 32.0])
KV_TABLE = (_rng.standard_normal((HK, 300)) * 0.5).astype(np.float32)             # [K/V heads, S]


# region modifiers

def sinks_window(b, h, q_idx, kv_idx):
    """StreamingLLM: the first four keys always, else a causal window of 32."""
    return (kv_idx < 4) | ((q_idx >= kv_idx) & (q_idx - kv_idx < 32))


def dilated_per_head(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx) % DILATION[h] == 0) & (q_idx >= kv_idx)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def softcap_alibi(score, b, h, q_idx, kv_idx):
    return 15.0 * np.tanh(score / 15.0) - SLOPES[h] * np.abs(q_idx - kv_idx)


def d_softcap_alibi(s, b, h, q_idx, kv_idx):
    return 1 - np.tanh(s / 15.0) ** 2


def document_local_window(b, h, q_idx, kv_idx):
    """Causal inside each document in its own positions (a start per document of each batch entry), window 20."""
    doc_q, doc_k = DOCS[b, q_idx], DOCS[b, kv_idx]
    local_q, local_k = q_idx - STARTS[b, doc_q], kv_idx - STARTS[b, doc_k]
    return (doc_q == doc_k) & (local_q >= local_k) & (local_q - local_k < 20)


def where_distance(score, b, h, q_idx, kv_idx):
    d = np.abs(q_idx - kv_idx)
    return np.where(d > 16, score * HSCALE[h], score + 0.1 * np.log1p(d))


def d_where_distance(s, b, h, q_idx, kv_idx):
    return np.where(np.abs(q_idx - kv_idx) > 16, HSCALE[h], 1.0)


def relative_2d(score, b, h, q_idx, kv_idx):
    return score + REL2[h, np.clip(kv_idx - q_idx, -W, W) + W]


def softplus_chain(score, b, h, q_idx, kv_idx):
    """A stable softplus of the score, less a capped log of the distance."""
    softplus = np.maximum(score, 0.0) + np.log1p(np.exp(-np.abs(score)))
    return softplus - np.minimum(np.log1p(np.abs(q_idx - kv_idx).astype(np.float32)), 3.0)


def d_softplus(s, b, h, q_idx, kv_idx):
    return 1 / (1 + np.exp(-s))


def block_local(b, h, q_idx, kv_idx):
    return q_idx // BLOCK[h] == kv_idx // BLOCK[h]


def kv_head_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < KV_WINDOW[h // (H // HK)])


def head_scale(score, b, h, q_idx, kv_idx):
    return score * HSCALE[h] + (h % 2) * 0.5


def late_rows(b, h, q_idx, kv_idx):
    """Rows before 10 see nothing, then causal shifted by 10; batch 1's rows 40..59 see nothing either."""
    return (q_idx - 10 >= kv_idx) & ~((b == 1) & (q_idx >= 40) & (q_idx < 60))


def square(score, b, h, q_idx, kv_idx):
    return score - 0.05 * score * score + 0.01 * (q_idx - kv_idx)


def temperature(score, b, h, q_idx, kv_idx):
    return score / HSCALE[h]


def temperature_key_bias(score, b, h, q_idx, kv_idx):
    """A learned per-head temperature and a learned [B, S] key bias."""
    return score / HSCALE[h] + KEY_BIAS[b, kv_idx]

def visible_keys(b, h, q_idx, kv_idx):
    """A [B, H, S] table of the keys each head may see (batch 0's head 1 none), reaching 5 keys ahead."""
    return VISIBLE[b, h, kv_idx] & (q_idx >= kv_idx - 5)


def full_bias(score, b, h, q_idx, kv_idx):
    return score + BIAS[b, h, q_idx, kv_idx]


def gaussian(score, b, h, q_idx, kv_idx):
    """An integer power of the distance over a per-head width."""
    return score - (q_idx - kv_idx) ** 2 / (2 * SIGMA[h] ** 2)


def kv_head_table(score, b, h, q_idx, kv_idx):
    return score + KV_TABLE[h // (H // HK), kv_idx]


def minus_inf(score, b, h, q_idx, kv_idx):
    """Hides keys itself (the first 7 rows see none), as FlexAttention users do in a score_mod."""
    return np.where((kv_idx > q_idx) | (q_idx < 7), -np.inf, score * 0.5)


def exp2_decay(score, b, h, q_idx, kv_idx):
    return score + np.exp2(-(np.abs(q_idx - kv_idx) // 8).astype(np.float32))

# endregion


VARIANTS = {  # name -> (score_mod, mask_mod, d score_mod / d score)
    "sinks|window": (None, sinks_window, None),
    "dilated-per-head": (None, dilated_per_head, None),
    "prefix-lm+softcap-alibi": (softcap_alibi, prefix_lm, d_softcap_alibi),
    "document-local-window": (None, document_local_window, None),
    "where-distance": (where_distance, None, d_where_distance),
    "relative-2d+sinks": (relative_2d, sinks_window, None),
    "softplus+block-local": (softplus_chain, block_local, d_softplus),
    "kv-head-window+head-scale": (head_scale, kv_head_window, lambda s, b, h, q_idx, kv_idx: HSCALE[h]),
    "late-rows+square": (square, late_rows, lambda s, b, h, q_idx, kv_idx: 1 - 0.1 * s),
    "temperature+dilated": (temperature, dilated_per_head, lambda s, b, h, q_idx, kv_idx: 1 / HSCALE[h]),
    "visible-keys+full-bias": (full_bias, visible_keys, None),
    "gaussian": (gaussian, None, None),
    "kv-head-table+visible-keys": (kv_head_table, visible_keys, None),
    "minus-inf": (minus_inf, None, lambda s, b, h, q_idx, kv_idx: 0.5),
    "exp2-decay+sinks": (exp2_decay, sinks_window, None),
}
SHAPES = [(2, H, HK, 77, 203), (2, H, H, 203, 77), (1, H, 1, 1, 300)]  # (batch, heads, heads_k, seq_q, seq_k)
LEVELS = ["tile", pytest.param("target", marks=pytest.mark.slow), pytest.param("ptx", marks=pytest.mark.slow)]
"""The levels of this round's fixes' tests: Tile level by default; the CTA simulator and the PTX executor with
-m slow."""


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_at_tile_level(name, shape):
    check(shape, "tile", *VARIANTS[name])


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, H, HK, 1000, 1000), (2, H, HK, 1, 1000), (1, H, H, 1000, 1)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["sinks|window", "dilated-per-head", "softplus+block-local",
                                  "kv-head-window+head-scale", "late-rows+square", "gaussian", "minus-inf"])
def test_variant_at_long_and_one_row_shapes(name, shape):
    """1000 x 1000, one query row against 1000 keys (decode), 1000 queries against one key."""
    check(shape, "tile", *VARIANTS[name])


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_below_tile_level(name, level):
    check((2, H, HK, 77, 130), level, *VARIANTS[name])


CAPTURED = {  # name -> (score_mod, mask_mod, d score_mod / d score, {table: (shape, reads)})
    "relative-2d": (relative_2d, kv_head_window, None, {
        "REL2": (REL2.shape, lambda s, b, h, q_idx, kv_idx: [((h, np.clip(kv_idx - q_idx, -W, W) + W), 1.0)])}),
    "temperature+key-bias": (temperature_key_bias, prefix_lm, lambda s, b, h, q_idx, kv_idx: 1 / HSCALE[h], {
        "HSCALE": (HSCALE.shape, lambda s, b, h, q_idx, kv_idx: [((h,), -s / HSCALE[h] ** 2)]),
        "KEY_BIAS": (KEY_BIAS.shape, lambda s, b, h, q_idx, kv_idx: [((b, kv_idx), 1.0)])}),
    "alibi-slopes": (softcap_alibi, sinks_window, d_softcap_alibi, {
        "SLOPES": (SLOPES.shape, lambda s, b, h, q_idx, kv_idx: [((h,), -np.abs(q_idx - kv_idx))])}),
    "full-bias": (full_bias, visible_keys, None, {
        "BIAS": (BIAS.shape, lambda s, b, h, q_idx, kv_idx: [((b, h, q_idx, kv_idx), 1.0)])}),
    "kv-head-table": (kv_head_table, None, None, {
        "KV_TABLE": (KV_TABLE.shape, lambda s, b, h, q_idx, kv_idx: [((h // (H // HK), kv_idx), 1.0)])}),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_captured_gradients_at_tile_level(name):
    check((2, H, HK, 77, 203), "tile", *CAPTURED[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CAPTURED))
def test_captured_gradients_in_the_ptx_executor(name):
    check((2, H, HK, 77, 130), "ptx", *CAPTURED[name])


# region what this round found

def clip_none(score, b, h, q_idx, kv_idx):
    return np.clip(score, None, 1.0) + 0.1 * np.clip(q_idx - kv_idx, 0, None)


def clip_keywords(score, b, h, q_idx, kv_idx):
    return np.clip(score, a_min=-1.0, a_max=None, out=None) + REL2[h, np.clip(kv_idx - q_idx + W, min=0, max=2 * W)]


def clip_methods(score, b, h, q_idx, kv_idx):
    return score.clip(max=1.0) + REL2[h, (kv_idx - q_idx + W).clip(min=0).clip(None, 2 * W)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("score_mod", [clip_none, clip_keywords, clip_methods])
def test_clip_with_one_bound_or_by_keyword(score_mod, level):
    """np.clip with a bound None, NumPy's a_min= / a_max= and NumPy 2's min= / max=, and the method's
    `.clip(min=, max=)`, as NumPy computes them (each was refused: an operand of type NoneType, np.clip, an
    unexpected keyword); the one-sided index clip is proved in bounds."""
    def d_clip(s, b, h, q_idx, kv_idx):
        return np.where(s < (-1.0 if score_mod is clip_keywords else -np.inf), 0.0,
                        np.where(s > (np.inf if score_mod is clip_keywords else 1.0), 0.0, 1.0))
    check((1, H, HK, 70, 90), level, score_mod, None, d_clip)


def length_sized(score, b, h, q_idx, kv_idx):
    """A table sized by its own shape: `len(table)`, `.shape[-1]`, `.size`, `.ndim`."""
    last = REL2.shape[-1] - 1
    return (score + REL2[h, np.clip(kv_idx - q_idx + W, 0, last)] + 0.01 * REL2.ndim
            + KEY_BIAS[b, np.minimum(kv_idx, KEY_BIAS.shape[1] - 1)]
            - 0.1 * SLOPES[h % len(SLOPES)] + 0.001 * (kv_idx % SLOPES.size))


@pytest.mark.parametrize("level", LEVELS)
def test_a_captured_arrays_shape_sizes_its_index(level):
    """A captured array's shape and type (`.shape`, `len()`, `.ndim`, `.size`, `.dtype`) are known when traced
    and part of what a trace is kept by: they were refused (`the attribute .shape of the captured array`)."""
    check((2, H, HK, 60, 80), level, length_sized, None)
    trace_mod(lambda s, b, h, q_idx, kv_idx: s + SLOPES[h].astype(SLOPES.dtype), "score_mod")


def unrolled_sum(score, b, h, q_idx, kv_idx):
    return score + sum(SLOPES[i] * (kv_idx % len(SLOPES) == i) for i in range(len(SLOPES)))


def loop_over_table(score, b, h, q_idx, kv_idx):
    for i, slope in enumerate(SLOPES):
        score = score + slope * (q_idx - kv_idx == i)
    return score


@pytest.mark.parametrize("score_mod", [unrolled_sum, loop_over_table])
def test_a_python_loop_over_a_captured_table_unrolls(score_mod):
    """A loop over a captured table (its values read at constant indices: constants of the kernel)."""
    check((1, H, HK, 50, 70), "tile", score_mod, None)


WIDTHS = [4, 9, 4, 9]
WIDTHS_BY_HEAD = {0: 4, 1: 9, 2: 4, 3: 9}


def _line(fn) -> int:
    return fn.__code__.co_firstlineno + 1


def scaled_table(score, b, h, q_idx, kv_idx):
    return score + (REL2 * 0.5)[h, np.clip(kv_idx - q_idx + W, 0, 2 * W)]


def exp_of_table(score, b, h, q_idx, kv_idx):
    return score + np.exp(np.log(SLOPES))[h] * (kv_idx - q_idx)


def dict_by_head(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < WIDTHS_BY_HEAD[h]


def list_by_head(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < WIDTHS[h]


def branch_on_score(score, b, h, q_idx, kv_idx):
    return score if score > 0 else score * 0.5


def loop_over_keys(score, b, h, q_idx, kv_idx):
    return score + sum(0.1 * k for k in kv_idx)


def sine_bias(score, b, h, q_idx, kv_idx):
    return score + np.sin(q_idx - kv_idx)


def clip_into(score, b, h, q_idx, kv_idx):
    return np.clip(score, -1.0, 1.0, out=WIDTHS_BY_HEAD)


def past_the_table(score, b, h, q_idx, kv_idx):
    return score + REL2[h, kv_idx - q_idx + W]


@pytest.mark.parametrize("fn,kind,construct", [
    (scaled_table, "score_mod", "the captured array REL2 of shape (4, 49) used as a whole"),
    (exp_of_table, "score_mod", "the captured array SLOPES of shape (4,) used as a whole"),
    (dict_by_head, "mask_mod", "a traced value as a dict key"),
    (list_by_head, "mask_mod", "a list, tuple or range is none: make it np.array"),
    (branch_on_score, "score_mod", "Python control flow on a traced value"),
    (loop_over_keys, "score_mod", "iteration over a traced value"),
    (sine_bias, "score_mod", "np.sin"),
    (clip_into, "score_mod", "np.clip with out="),
    (past_the_table, "score_mod", "reads REL2[h, kv_idx - q_idx + 24]"),
])
def test_untraceable_modifiers_are_refused_naming_the_function_line_and_construct(fn, kind, construct):
    """Arithmetic or a ufunc on a whole captured array (was `TypeError: unsupported operand type(s) for *:
    'ArrayProxy'`, or `.__array_struct__`), a dict keyed by the head (was `unhashable type: 'Traced'`), a list
    indexed by the head, a branch on the score, a loop over the keys, np.sin, a read past the table."""
    q, k, v, _ = inputs((1, H, HK, 40, 90))
    error = IndexRangeError if fn is past_the_table else ModTraceError
    with pytest.raises(error) as caught:
        tessera.attention(q, k, v, **{kind: fn}, level="tile")
    message = str(caught.value)
    assert message.startswith(f"{kind} '{fn.__name__}' at {__file__}:{_line(fn)}: "), message
    assert construct in message, message

# endregion


@pytest.mark.parametrize("mask_mod", [sinks_window, dilated_per_head, prefix_lm, document_local_window, block_local,
                                      kv_head_window, late_rows, visible_keys], ids=lambda f: f.__name__)
def test_block_classes_match_a_brute_force(mask_mod):
    """FlexAttention's `create_block_mask(..., BLOCK_SIZE=)` of this round's masks at three block shapes (seq_q
    != seq_k, partial last blocks) against a brute-force classification of the whole mask."""
    from mods_checks import brute_block_kinds

    from tessera.variants import create_block_mask

    for seq_q, seq_k, blocks in ((203, 77, (64, 32)), (77, 300, (128, 128)), (300, 300, (32, 64))):
        mask = create_block_mask(mask_mod, 2, H, seq_q, seq_k, device="cpu", BLOCK_SIZE=blocks)
        np.testing.assert_array_equal(mask.kinds, brute_block_kinds(mask_mod, 2, H, seq_q, seq_k, *blocks))


def test_create_block_mask_takes_flex_attentions_keywords():
    """`create_block_mask(mask_mod, B=None, H=None, Q_LEN=..., KV_LEN=..., _compile=True)`, FlexAttention's most
    common call, gave `TypeError: unexpected keyword argument 'B'` though the docs say its calls port unchanged:
    the keywords are the positional arguments' other names; one given twice or missing is a TypeError naming it."""
    from tessera.variants import create_block_mask

    by_keyword = create_block_mask(sinks_window, B=None, H=None, Q_LEN=300, KV_LEN=200, device="cpu",
                                   BLOCK_SIZE=(64, 32), _compile=True)
    by_position = create_block_mask(sinks_window, None, None, 300, 200, device="cpu", BLOCK_SIZE=(64, 32))
    np.testing.assert_array_equal(by_keyword.kinds, by_position.kinds)
    assert create_block_mask(dilated_per_head, 2, H, Q_LEN=77, KV_LEN=90).kinds.shape == (2, H, 1, 1)
    with pytest.raises(TypeError, match="create_block_mask: seq_q given twice"):
        create_block_mask(sinks_window, 1, 1, 64, 64, Q_LEN=64)
    with pytest.raises(TypeError, match="create_block_mask: missing heads"):
        create_block_mask(sinks_window, B=1, Q_LEN=64, KV_LEN=64)


class ClassMods:
    """Modifiers written as classmethods over class attributes, with a staticmethod helper."""

    widths = np.array([4, 9, 16, 25])
    slopes = np.array([0.1, 0.2, 0.3, 0.4], np.float32)

    @classmethod
    def window(cls, b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < cls.widths[h])

    @classmethod
    def alibi(cls, score, b, h, q_idx, kv_idx):
        return score - cls.slopes[h] * cls.distance(q_idx, kv_idx)

    @staticmethod
    def distance(q_idx, kv_idx):
        return abs(q_idx - kv_idx)


def test_classmethod_modifiers_read_their_class_arrays():
    """A classmethod modifier was refused ('instance of type cannot be copied for tracing'): it is traced with a
    subclass whose arrays are captured (`mask_mod_widths`) and whose class and static methods are rebound; the
    class is not changed, and a changed array is read afresh."""
    check((1, H, HK, 60, 70), "tile", ClassMods.alibi, ClassMods.window)
    assert [a.name for a in trace_mod(ClassMods.window, "mask_mod").arrays] == ["mask_mod_widths"]
    assert isinstance(ClassMods.__dict__["widths"], np.ndarray)


class RelativeModel:
    """A model object whose method makes the modifiers, closures over `self`."""

    def __init__(self):
        self.rel = REL2[0]
        self.widths = np.array([8, 20, 40, 80])

    def modifiers(self):
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + self.rel[np.clip(kv_idx - q_idx + W, 0, len(self.rel) - 1)]

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < self.widths[h])
        return score_mod, mask_mod


def test_closures_over_self_read_its_arrays():
    """Modifiers made by a method, reading `self.rel` and `self.widths`, were refused ('indexing with a traced value
    an array that is not a captured NumPy array'): `self` is read through a copy whose arrays are kernel inputs."""
    check((2, H, HK, 60, 90), "tile", *RelativeModel().modifiers())
