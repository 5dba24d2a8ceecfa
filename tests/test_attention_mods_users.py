"""Attention variants as FlexAttention users write them (issue 29), none of which the other tests have: the
attention-gym idioms (`and_masks`, `generate_doc_mask_mod` with logical positions, a softcap factory, ALiBi's
`2 ** (-8 * (h + 1) / H)`, T5's log-bucketed relative positions with `.astype`), functools.partial, Python's
`abs`, `~`/`|`, `np.where` chains, per-batch arrays, and rows that see no key. Each runs through
`tessera.attention` / `tessera.attention_backward` against the float64 reference, forward and backward.

The default run takes a slice (`FAST`) at one odd shape; `-m slow` runs every variant over three shapes at
Tile level, every variant at target level, a few at PTX level, and ptxas on every forward and backward kernel
(no spill)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from mods_checks import assert_variant_kernels_assemble, check_named_variant, variant_inputs

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.variants import ModTraceError, trace_mod

H = 4                                         # query heads of the shapes below (ALiBi's H)
PREFIX = np.array([7, 0])                     # per-batch prefix lengths: batch 1 has none
Q_DOC = np.minimum(np.arange(256) // 30, 4)   # the queries' documents
KV_DOC = np.where(np.arange(256) < 25, 0, np.where(np.arange(256) < 60, 2, 4))  # no key of documents 1 and 3
DOCUMENT_ID = np.repeat(np.arange(5), [20, 35, 1, 60, 140])  # packed documents; document 2 is one token
OFFSETS = np.array([0, 20, 55, 56, 116])      # each document's first position
SLOPES = np.array([2.0 ** (-8 * (i + 1) / H) for i in range(H)])
BATCH_BIAS = np.array([[0.1, -0.2, 0.3, 0.0], [1.0, 0.5, -0.5, 2.0]])
NUM_BUCKETS, MAX_DISTANCE = 32, 128
RELATIVE_BIAS = np.random.default_rng(5).standard_normal((H, NUM_BUCKETS)).astype(np.float32) * 0.5
SINKS, WINDOW = 4, 20
BATCH_DOCS = np.stack([np.repeat([0, 1, 2], [30, 50, 176]), np.repeat([0, 1], [100, 156])])  # per batch entry
KEY_LENGTHS = np.array([256, 37])             # key padding: batch 1 has 37 real keys
TEMPERATURE = np.random.default_rng(6).uniform(0.5, 1.5, (H, 256))  # per head and query


# region masks

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def local(b, h, q_idx, kv_idx):
    return q_idx - kv_idx <= 8


def and_masks(*masks):
    """attention-gym's combinator: every mask holds."""
    def and_mask(b, h, q_idx, kv_idx):
        result = True
        for mask in masks:
            result = result & mask(b, h, q_idx, kv_idx)
        return result
    return and_mask


def generate_doc_mask_mod(inner, document_id, offsets):
    """attention-gym's document masking: `inner` on positions inside each document."""
    def doc_mask_mod(b, h, q_idx, kv_idx):
        same_doc = document_id[q_idx] == document_id[kv_idx]
        q_logical = q_idx - offsets[document_id[q_idx]]
        kv_logical = kv_idx - offsets[document_id[kv_idx]]
        return same_doc & inner(b, h, q_logical, kv_logical)
    return doc_mask_mod


def sinks_where(b, h, q_idx, kv_idx):
    """Attention sinks: the first keys are always visible, the rest causally (np.where of booleans)."""
    return np.where(kv_idx < SINKS, True, q_idx >= kv_idx)


def chunked_causal(b, h, q_idx, kv_idx):
    """Llama 4's chunked local attention: causal inside chunks of 32."""
    return (q_idx // 32 == kv_idx // 32) & (q_idx >= kv_idx)


def dilated_window(b, h, q_idx, kv_idx):
    diff = q_idx - kv_idx
    return (diff >= 0) & (diff < 64) & (diff % 3 == 0)


def bidirectional_window(b, h, q_idx, kv_idx):
    return abs(q_idx - kv_idx) <= WINDOW


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def prefix_only(b, h, q_idx, kv_idx):
    """Batch 1's prefix is empty: its rows see no key (O = 0, LSE = -inf, gradients 0)."""
    return kv_idx < PREFIX[b]


def cross_documents(b, h, q_idx, kv_idx):
    """Queries of documents 1 and 3 have no key of their document: their rows are empty."""
    return Q_DOC[q_idx] == KV_DOC[kv_idx]


def batch_documents(b, h, q_idx, kv_idx):
    return BATCH_DOCS[b, q_idx] == BATCH_DOCS[b, kv_idx]


def key_padding(b, h, q_idx, kv_idx):
    return kv_idx < KEY_LENGTHS[b]


def not_future_nor_far(b, h, q_idx, kv_idx):
    future = kv_idx > q_idx
    far = (q_idx - kv_idx) > 40
    return ~(future | far) | (kv_idx == 0)


# endregion
# region score mods

def generate_tanh_softcap(cap):
    """attention-gym's soft-cap factory (cap a closure constant)."""
    def tanh_softcap(score, b, h, q_idx, kv_idx):
        return cap * np.tanh(score / cap)
    return tanh_softcap


def softcap_with_default(score, b, h, q_idx, kv_idx, cap=20.0):
    return cap * np.tanh(score / cap)


def alibi_closure(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def alibi_formula(score, b, h, q_idx, kv_idx):
    """Symmetric ALiBi with its slopes computed in the function."""
    slope = 2 ** (-8 * (h + 1) / H)
    return score - slope * abs(q_idx - kv_idx)


def t5_relative_bias(score, b, h, q_idx, kv_idx):
    """T5's bidirectional relative-position buckets: exact below 8, log-spaced up to 128."""
    relative = kv_idx - q_idx
    buckets = NUM_BUCKETS // 2
    bucket = (relative > 0).astype(np.int32) * buckets
    n = np.abs(relative)
    max_exact = buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 0 takes the exact branch
        large = max_exact + (np.log(n / max_exact) / np.log(MAX_DISTANCE / max_exact)
                             * (buckets - max_exact)).astype(np.int32)
    large = np.minimum(large, buckets - 1)
    bucket = bucket + np.where(n < max_exact, n, large)
    return score + RELATIVE_BIAS[h, bucket]


def batch_head_bias(score, b, h, q_idx, kv_idx):
    return score + BATCH_BIAS[b, h] * (1.0 + 0.5 * b)


def where_chain(score, b, h, q_idx, kv_idx):
    d = q_idx - kv_idx
    return np.where(d < 0, score - 1.0, np.where(d < 8, score + 0.5, np.where(d < 32, score, score * 0.5)))


def int_float_mix(score, b, h, q_idx, kv_idx):
    bias = (q_idx - kv_idx) // 4 * 0.125 + 2
    return score / 2.0 - bias / 16


def per_query_temperature(score, b, h, q_idx, kv_idx):
    return score * TEMPERATURE[h, q_idx]


def signed_square_clip(score, b, h, q_idx, kv_idx):
    return score + 0.3 * np.sign(q_idx - kv_idx) - np.square((q_idx - kv_idx).clip(-8, 8)) / 64


def score_masks_itself(score, b, h, q_idx, kv_idx):
    """FlexAttention's first idiom: -inf from score_mod hides a key (queries before 20 see none)."""
    return np.where(q_idx >= kv_idx + 20, score, -np.inf)


def sqrt_distance(score, b, h, q_idx, kv_idx):
    even = (kv_idx % 2 == 0).astype(float)
    return score - 0.1 * np.sqrt(np.abs(q_idx - kv_idx).astype(np.float32)) + 0.25 * even + score ** 2 / 64


# endregion

VARIANTS = {
    "sinks-where": (None, sinks_where),
    "and-masks(chunked, local)": (None, and_masks(chunked_causal, local)),
    "dilated-window": (None, dilated_window),
    "prefix-lm-per-batch": (None, prefix_lm),
    "prefix-only(empty rows)": (None, prefix_only),
    "not-future-nor-far": (None, not_future_nor_far),
    "softcap-factory(32)+sinks": (generate_tanh_softcap(32.0), sinks_where),
    "softcap-partial(10)": (functools.partial(softcap_with_default, cap=10.0), None),
    "alibi-closure+doc-mask-mod": (alibi_closure, generate_doc_mask_mod(and_masks(causal, local), DOCUMENT_ID,
                                                                        OFFSETS)),
    "alibi-formula+bidirectional": (alibi_formula, bidirectional_window),
    "t5-buckets": (t5_relative_bias, None),
    "batch-head-bias+prefix-lm": (batch_head_bias, prefix_lm),
    "where-chain": (where_chain, None),
    "int-float-mix+chunked": (int_float_mix, chunked_causal),
    "sqrt-distance+cross-documents": (sqrt_distance, cross_documents),
    "score-minus-inf(empty rows)": (score_masks_itself, None),
    "temperature+key-padding": (per_query_temperature, key_padding),
    "sign-square-clip+batch-documents": (signed_square_clip, batch_documents),
}

SHAPES = [  # (batch, heads, heads_k, seq_q, seq_k): seq_q != seq_k both ways, no multiple of a block, GQA
    (2, H, 2, 77, 133),
    (2, H, 1, 150, 61),
    (2, H, 4, 200, 200),
]
FAST = ["t5-buckets", "alibi-formula+bidirectional", "prefix-only(empty rows)", "sqrt-distance+cross-documents"]
FAST_SHAPE = (2, 2, 1, 70, 45)


@pytest.mark.parametrize("name", FAST)
def test_users_variant_at_tile_level(name):
    empty = check_named_variant(VARIANTS, name, FAST_SHAPE, "tile")
    if name in ("prefix-only(empty rows)", "sqrt-distance+cross-documents"):
        assert empty.any() and not empty.all()


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_users_variant_over_shapes_at_tile_level(name, shape):
    check_named_variant(VARIANTS, name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_users_variant_at_target_level(name):
    check_named_variant(VARIANTS, name, (1, H, 2, 77, 133), "target")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5-buckets", "alibi-formula+bidirectional", "alibi-closure+doc-mask-mod",
                                  "sqrt-distance+cross-documents"])
def test_users_variant_at_ptx_level(name):
    check_named_variant(VARIANTS, name, (1, H, 2, 77, 133), "ptx")


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_users_variant_kernels_assemble_without_spills(name):
    assert_variant_kernels_assemble(*VARIANTS[name])


# region what the tracer makes of them, and what it refuses

def test_powers_and_casts_trace_to_the_kernel_vocabulary():
    """`2 ** e` is exp2(e); `x ** 2` is x * x; `x ** 0.5` np.sqrt; `x ** -1` a division; `.astype(int)` of a
    float a truncating cast; a boolean's `.astype(float)` a select."""
    assert trace_mod(alibi_formula, "score_mod").uses("exp2")
    t5 = trace_mod(t5_relative_bias, "score_mod")
    assert t5.uses("to_i32") and t5.uses("log") and [a.name for a in t5.arrays] == ["score_mod_RELATIVE_BIAS"]
    square = trace_mod(lambda s, b, h, q, k: s ** 2, "score_mod").result
    assert square.op == "mul" and square.args[0] is square.args[1]
    assert trace_mod(lambda s, b, h, q, k: s ** 0.5, "score_mod").result.op == "sqrt"
    assert trace_mod(lambda s, b, h, q, k: s ** -1, "score_mod").result.op == "div"
    assert trace_mod(lambda s, b, h, q, k: (q > k).astype(float), "score_mod").result.op == "select"
    assert trace_mod(lambda s, b, h, q, k: np.log1p(s), "score_mod").result.op == "log"
    assert trace_mod(lambda s, b, h, q, k: s.clip(None, 5.0), "score_mod").result.op == "min"


def test_powers_and_casts_at_tile_level_against_numpy():
    """Odd powers by squaring, a float power, a power of a constant base and float-to-int truncation of
    negative values, through the kernel against the reference."""
    def powers(score, b, h, q_idx, kv_idx):
        x = score / 4
        t = ((q_idx - kv_idx) / 3).astype(np.int32)  # truncation toward zero, negative values too
        return x ** 3 - np.abs(x) ** 1.5 / 4 + 1.5 ** (-(h + 1.0)) + 0.1 * t - 0.5 * x ** -2 / (1 + x ** -2)

    def window(b, h, q_idx, kv_idx):
        return np.abs(q_idx - kv_idx) < 50

    q, k, v, do = variant_inputs((1, 2, 1, 70, 45), 7)
    o, lse = tessera.attention(q, k, v, score_mod=powers, mask_mod=window, return_lse=True, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, powers, window, lse=lse).ok


def _refusal(fn, kind):
    with pytest.raises(ModTraceError) as info:
        trace_mod(fn, kind)
    return str(info.value)


STRINGS = np.array(["a", "b"])
EMPTY = np.zeros((0,))
HUGE = np.array([2**40, 1])
TABLE = np.zeros((2, 8), np.float32)


@pytest.mark.parametrize("fn,construct", [
    (lambda b, h, q, k: STRINGS[h] == "a", "the captured array STRINGS: its dtype <U1 is not a number"),
    (lambda b, h, q, k: EMPTY[q] > 0, "the captured array EMPTY: its shape (0,) is empty"),
    (lambda b, h, q, k: HUGE[h] > k, "the captured array HUGE: its values [1, 1099511627776] do not fit i32"),
    (lambda b, h, q, k: TABLE[h] > 0, "TABLE[...] with 1 indices: a captured array of shape (2, 8)"),
    (lambda b, h, q, k: q ** k > 0, "'**' of a traced integer base by a traced integer exponent"),
    (lambda b, h, q, k: 2 ** h > k, "'**' of the integer 2 by a traced integer exponent"),
    (lambda b, h, q, k: q ** -1 > 0, "'**' of an integer by the negative power -1"),
    (lambda b, h, q, k: (-2.0) ** (h + 0.5) > 0, "'**' with the base -2.0 and a traced exponent"),
    (lambda b, h, q, k: q.astype(np.float16) > 0, ".astype(float16)"),
    (lambda b, h, q, k: q.astype(np.uint32) > 0, ".astype(uint32)"),
    (lambda b, h, q: q > 0, "cannot be called with a mask_mod's 4 arguments"),
])
def test_refusals_name_the_function_line_and_construct(fn, construct):
    message = _refusal(fn, "mask_mod")
    assert construct in message and "mask_mod '<lambda>'" in message
    if "cannot be called" not in message:
        assert f"{__file__}:" in message


def test_refuses_a_callable_that_is_not_a_python_function():
    """A callable object is traced as its class's `__call__` (test_attention_mods_unseen4.py); one whose call is
    not Python is refused by name."""
    assert "must be a Python function (def, lambda, functools.partial" in _refusal(functools.partial(max),
                                                                                  "mask_mod")


def test_a_partial_is_named_by_its_function():
    def window(b, h, q_idx, kv_idx, size=4):
        if q_idx - kv_idx < size:  # the refused line
            return True
        return False

    message = _refusal(functools.partial(window, size=8), "mask_mod")
    assert f"window' at {__file__}:{window.__code__.co_firstlineno + 1}" in message

# endregion


def test_an_array_default_argument_is_captured():
    """def mask(..., doc_ids=DOC) reads DOC as a closure would (a kernel input, bounds-checked)."""
    def document(b, h, q_idx, kv_idx, doc_ids=DOCUMENT_ID, *, first=OFFSETS):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) | (kv_idx == first[doc_ids[q_idx]])

    trace = trace_mod(document, "mask_mod")
    assert [a.name for a in trace.arrays] == ["mask_mod_doc_ids", "mask_mod_first"]
    assert trace.arrays[0].array is DOCUMENT_ID


WIDTHS = np.array([4, 37, 2**31 - 1, 90])   # a window per head; head 2's reaches everything


def head_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WIDTHS[h])


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
def test_symmetric_alibi_under_a_per_head_window_takes_the_dense_blocks():
    """The window's compare with widths[h] is one setp a register against the thread's scalar less the bound
    (`index_diagonals`): the backward at head_dim 64 lowers warp-specialized at the dense kernel's 128 x 128
    blocks (224 registers; 256 when the difference's 34 registers stayed beside ALiBi's), no warning; ptxas
    12.9, 13.0 and 13.5 assemble it without spilling; at target level it matches the reference."""
    from tessera import toolchain
    from tessera.kernels import attention_backward

    kernels = attention_backward(64, block_m=128, block_n=128, score_mod=alibi_formula, mask_mod=head_window,
                                 block_sparse=True)
    ptx = tessera.compile(kernels.main, target="ptx")
    for tool in toolchain.find_all_ptxas():
        result = toolchain.compile_ptx(ptx, ptxas=tool.path)
        assert result.warnings == () and not any(e.spills for e in result.entries.values()), tool.release
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rung is taken: a warning would fail here
        q, k, v, do = variant_inputs((1, H, 2, 150, 133), 3)
        o, lse = tessera.attention(q, k, v, score_mod=alibi_formula, mask_mod=head_window, return_lse=True,
                                   level="tile")
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi_formula, mask_mod=head_window,
                                           level="target")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, alibi_formula, head_window)
    assert all(c.ok for c in checks), [str(c) for c in checks]
