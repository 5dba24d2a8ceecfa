"""np.searchsorted / np.digitize / torch.searchsorted / torch.bucketize in score_mod and mask_mod (issue 29),
traced (`tessera.variants.searches`): document masks (`doc = torch.searchsorted(offsets, q_idx, right=True)`),
relative-position buckets and piecewise biases of the score.

- The counts are NumPy's exactly, at Tile, target and PTX level, by both lowerings (unrolled compares and the
  binary search with gathers, forced by `UNROLLED_SEARCH_MAX`): left and right sides, np.digitize with
  increasing and decreasing bins and both `right`s, values equal to a boundary, a unit in the last place off
  it, NaN, infinities, -0.0, duplicate and infinite boundaries, integer values against float boundaries.
- Variants forward and backward at Tile level against the float64 reference, NumPy and torch spellings (the
  default run: one NumPy and one torch variant at one odd shape; `-m slow`: each over odd shapes and GQA, a
  slice at target and PTX level, head_dim 128's keys-on-rows backward in the CTA simulator; document masks of 9
  and 300 documents warp-specialized and through ptxas without spilling).
- Block lists of `create_block_mask` from searched masks equal those of the precomputed document ids.
- What stays refused is named: unsorted boundaries (with the array's name), NaN boundaries, sorter=, a 2-D
  array, side and right set to opposites, a boolean value, boundaries computed from traced values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from mods_checks import check_variant_forward_and_backward, score_mod_kernel, variant_inputs

import tessera
from tessera.variants import ModTraceError, create_block_mask, searches, trace_mod

SHORT = np.float32([-2.0, -0.5, -0.5, 0.0, 1.25])                           # unrolled by default
LONG = np.concatenate([[-np.inf], np.linspace(-3, 3, 37), [3.0, np.inf]]).astype(np.float32)  # a binary search
DECREASING = np.float32([2.0, 1.0, 1.0, -0.75, -3.0])
SPANS = np.array([-40.5, -17.0, -3.25, 0.0, 0.5, 2.0, 9.75, 30.0])         # float64, searched by integers
STEPS = np.arange(-60, 61, 3)                                                # int64, 41 boundaries
SHIFTED = SPANS + 64
DECREASING_UP = DECREASING[::-1].copy()  # digitize(x, DECREASING) is 5 less this one's count: no equality


def left(score, b, h, q_idx, kv_idx):
    return np.searchsorted(SHORT, score) * 1.0


def right(score, b, h, q_idx, kv_idx):
    return SHORT.searchsorted(score, side="right") * 1.0


def long_left(score, b, h, q_idx, kv_idx):
    return np.searchsorted(LONG, score, "left") * 1.0


def long_right(score, b, h, q_idx, kv_idx):
    return np.searchsorted(LONG, score, side="right") * 1.0


def digitized(score, b, h, q_idx, kv_idx):
    return np.digitize(score, DECREASING) + 10.0 * np.digitize(score, DECREASING, right=True) \
        + 100.0 * np.digitize(score, LONG, right=True)


def index_buckets(score, b, h, q_idx, kv_idx):
    return np.searchsorted(SPANS, q_idx - kv_idx) + 10.0 * np.searchsorted(SPANS, kv_idx - q_idx, side="right") \
        + 100.0 * np.searchsorted(STEPS, q_idx - 2 * kv_idx, side="right")


def same_buckets(score, b, h, q_idx, kv_idx):
    """Equal counts of two searches of the same boundaries (emitted as two compares per element against the
    boundaries around the smaller operand's count, `searches.same_count`): floats with NaN, integers."""
    shifted = kv_idx * 0.125 - 4.0
    return 1.0 * (np.searchsorted(SHORT, score) == np.searchsorted(SHORT, shifted)) \
        + 2.0 * (np.searchsorted(LONG, shifted, side="right") != np.searchsorted(LONG, score, side="right")) \
        + 4.0 * (np.searchsorted(STEPS, q_idx - 64) == np.searchsorted(STEPS, kv_idx)) \
        + 8.0 * (np.digitize(q_idx, SHIFTED, right=True) == np.digitize(kv_idx, SHIFTED, right=True)) \
        + 16.0 * (np.digitize(score, DECREASING) == np.searchsorted(DECREASING_UP, score, side="right"))


def literal(score, b, h, q_idx, kv_idx):
    """Boundaries written in the hook: a list (21 entries: a binary search over a kernel input of its own) and
    a tuple."""
    return np.searchsorted(list(range(-40, 41, 4)), q_idx - kv_idx) + 100.0 * np.digitize(score, (-1.0, 0.0, 2.5))


COUNTS = [left, right, long_left, long_right, digitized, index_buckets, same_buckets, literal]


def scores(rows=128):
    """[rows, 64] f32: every boundary, a unit in the last place either side of it, NaN, +-inf, -0.0, random."""
    rng = np.random.default_rng(29)
    x = (rng.standard_normal((rows, 64)) * 2).astype(np.float32)
    special = np.concatenate([SHORT, LONG, DECREASING, [np.nan, np.inf, -np.inf, -0.0, 0.0]]).astype(np.float32)
    near = np.concatenate([special, np.nextafter(special, np.float32(np.inf)),
                           np.nextafter(special, np.float32(-np.inf))]).astype(np.float32)
    picks = rng.random((rows, 64)) < 0.5
    x[picks] = rng.choice(near, picks.sum())
    return x


def numpy_counts(fn, x):
    """What `fn` gives on the host: NumPy's own functions on x and the index grids."""
    q, kv = np.arange(x.shape[0])[:, None], np.arange(64)[None, :]
    return np.broadcast_to(fn(x, 0, 0, q, kv), x.shape).astype(np.float32)


def _check_counts(level, fns, unrolled_max, rows=128):
    x = scores(rows)
    saved = searches.UNROLLED_SEARCH_MAX
    searches.UNROLLED_SEARCH_MAX = unrolled_max
    try:
        module, arrays = score_mod_kernel(fns)
    finally:
        searches.UNROLLED_SEARCH_MAX = saved
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.interpret(module, x, *arrays, level=level)
    for k, fn in enumerate(fns):
        got, expected = out[:, 64 * k: 64 * k + 64], numpy_counts(fn, x)
        bad = np.argwhere(got != expected)[:3]
        assert not len(bad), f"{fn.__name__}: {[(x[tuple(i)], got[tuple(i)], expected[tuple(i)]) for i in bad]}"
    return arrays


@pytest.mark.parametrize("unrolled_max", [0, 1000], ids=["binary", "unrolled"])
def test_counts_are_numpys_by_both_lowerings_at_tile_level(unrolled_max):
    arrays = _check_counts("tile", COUNTS, unrolled_max, rows=64)
    # the binary search reads its boundaries from kernel inputs (SPANS as floor / ceil integers, SHIFTED as
    # floor integers); same_buckets' equalities read the floats' boundaries (SHORT, LONG) and the integers' padded
    # bounds (`searches.count_bounds` of STEPS and SHIFTED), the only inputs where the searches are unrolled
    assert len(arrays) == (4 if unrolled_max else 12)


def same_documents(score, b, h, q_idx, kv_idx):
    return 1.0 * (np.searchsorted(STEPS, q_idx - 64, side="right") == np.searchsorted(STEPS, kv_idx, side="right"))


def test_binary_search_counts_in_the_cta_simulator():
    """The binary search's gathers and selects, and an equality's two compares, in the CTA simulator: NumPy's
    counts (the rest: -m slow)."""
    _check_counts("target", [long_right, same_documents], 0, rows=64)


@pytest.mark.slow  # 10-40 s
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("unrolled_max", [0, 1000], ids=["binary", "unrolled"])
def test_counts_are_numpys_by_both_lowerings_below_tile_level(level, unrolled_max):
    """The CTA simulator and the PTX executor (setp, selp, ld.global of the boundaries): the same counts."""
    _check_counts(level, COUNTS, unrolled_max)


def test_default_threshold_unrolls_short_searches_and_gathers_long_ones():
    short, long = trace_mod(left, "score_mod"), trace_mod(long_left, "score_mod")
    assert not short.uses("gather") and short.arrays == []
    assert long.uses("gather") and [a.name for a in long.arrays] == ["score_mod_LONG"]
    assert len(SHORT) <= searches.UNROLLED_SEARCH_MAX < len(LONG)
    # ceil(log2 41) = 6 halvings, the first at a constant boundary, then the last probe: 6 gathers
    gathers, seen, stack = 0, set(), [long.result]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            gathers += n.op == "gather"
            stack.extend(n.args)
    assert gathers == 6


# region variants as users write them

OFFSETS = np.array([0, 13, 13, 40, 41, 77, 120, 121, 160, 200])   # 9 documents (one empty) over 200 tokens
DISTANCES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])  # log-spaced
BUCKET_BIAS = np.random.default_rng(3).standard_normal((4, len(DISTANCES) + 1)).astype(np.float32) * 0.5
PIECES = np.array([-4.0, -1.0, 0.5, 3.0])
MANY = np.cumsum(np.random.default_rng(4).integers(0, 2, 300))    # 300 documents' starts (repeats: empty ones)


def documents(b, h, q_idx, kv_idx):
    """Packed documents, causal inside each (the FlexAttention idiom, searched in the mod)."""
    doc = np.searchsorted(OFFSETS, q_idx, side="right")
    return (doc == np.searchsorted(OFFSETS, kv_idx, side="right")) & (q_idx >= kv_idx)


def document_window(b, h, q_idx, kv_idx):
    """A window of 24 on the positions inside each document, from its start read at the searched index (the
    attention-gym idiom `q_idx - offsets[doc[q_idx]]`; the searched array is also gathered)."""
    doc, kv_doc = np.searchsorted(OFFSETS, q_idx, side="right"), np.searchsorted(OFFSETS, kv_idx, side="right")
    q_logical, kv_logical = q_idx - OFFSETS[doc - 1], kv_idx - OFFSETS[kv_doc - 1]
    return (doc == kv_doc) & (q_logical >= kv_logical) & (q_logical - kv_logical < 24)


def many_documents(b, h, q_idx, kv_idx):
    return np.searchsorted(MANY, q_idx, side="right") == np.searchsorted(MANY, kv_idx, side="right")


def bucketed_bias(score, b, h, q_idx, kv_idx):
    """A relative-position bias per log-spaced bucket of the distance and head, and a piecewise penalty of the
    score (np.digitize of the score: its derivative is the identity's)."""
    bucket = np.searchsorted(DISTANCES, np.abs(q_idx - kv_idx), side="right")
    return score + BUCKET_BIAS[h, bucket] - 0.125 * np.digitize(score, PIECES)


def numpy_variant(score, b, h, q_idx, kv_idx):
    return bucketed_bias(score, b, h, q_idx, kv_idx)


VARIANTS = {
    "numpy-documents": (None, documents),
    "numpy-many-documents": (None, many_documents),
    "numpy-buckets": (bucketed_bias, None),
    "numpy-buckets+documents": (bucketed_bias, documents),
    "numpy-buckets+document-window": (bucketed_bias, document_window),
}
SHAPES = [(1, 4, 2, 200, 200), (2, 4, 4, 77, 200), (1, 2, 1, 130, 61)]


def _torch_variants():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")
    offsets, distances = torch.from_numpy(OFFSETS), torch.from_numpy(DISTANCES)
    pieces, many = torch.from_numpy(PIECES), torch.from_numpy(MANY)
    table = torch.from_numpy(BUCKET_BIAS)

    def torch_documents(b, h, q_idx, kv_idx):
        doc = torch.searchsorted(offsets, q_idx, right=True)
        return (doc == torch.searchsorted(offsets, kv_idx, side="right")) & (q_idx >= kv_idx)

    def torch_many(b, h, q_idx, kv_idx):
        return torch.bucketize(q_idx, many, right=True) == torch.bucketize(kv_idx, many, right=True)

    def torch_buckets(score, b, h, q_idx, kv_idx):
        bucket = torch.bucketize((q_idx - kv_idx).abs(), distances, right=True)
        return score + table[h, bucket] - 0.125 * torch.bucketize(score, pieces, right=True)

    return {"torch-documents": (None, torch_documents), "torch-many-documents": (None, torch_many),
            "torch-buckets+documents": (torch_buckets, torch_documents)}


def _variant(name):
    return VARIANTS[name] if name in VARIANTS else _torch_variants()[name]


def _check(name, level, shape):
    score_mod, mask_mod = _variant(name)
    q, k, v, do = variant_inputs(shape, seed=len(name))
    check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, level)


@pytest.mark.parametrize("name,shape", [("numpy-buckets+document-window", SHAPES[2]),
                                        ("torch-buckets+documents", (1, 2, 1, 45, 61))])
def test_searched_variants_forward_and_backward(name, shape):
    _check(name, "tile", shape)


ALL = sorted(VARIANTS) + ["torch-documents", "torch-many-documents", "torch-buckets+documents"]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_each_searched_variant_over_shapes(name, shape):
    _check(name, "tile", shape)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", ["numpy-buckets+documents", "numpy-many-documents"])
def test_searched_variants_below_tile_level(name, level):
    _check(name, level, (1, 2, 1, 70, 90))


@pytest.mark.slow  # 20 s: the CTA simulator at head_dim 128
def test_searched_documents_on_the_backwards_keys_on_rows_blocks():
    """At head_dim 128 the backward takes the keys-on-rows 64 x 128 blocks (S^T: `kv_idx` the row vector, so
    the equality searches the keys and compares the queries' column): right in the CTA simulator."""
    q, k, v, do = variant_inputs((1, 2, 1, 90, 130), seed=11, head_dim=128)
    check_variant_forward_and_backward(q, k, v, do, None, documents, "target")


@pytest.mark.slow  # ptxas, 20 s each
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", ["numpy-documents", "numpy-many-documents"])
def test_searched_document_masks_stay_warp_specialized_without_spills(name):
    """A document mask searched over 9 and over 300 documents: the forward at head_dim 64 (BN 128) and the
    backward's main kernel at the blocks `tessera.attention_backward` takes first (128 x 128) lower
    warp-specialized, and ptxas assembles them without spilling (bench/searched_documents.py: both head_dims,
    every ptxas, SASS)."""
    from tessera import passes
    from tessera.kernels import flash_attention
    from tessera.runtime import flex

    mask = _variant(name)[1]
    forward = flash_attention(64, mask_mod=mask, block_sparse=True)
    assert flex.warp_specialized_refusal(forward) is None
    options = dict(score_mod=None, mask_mod=mask, causal=False, scale=None, level="ptx", head_dim=64, dtype="bf16",
                   deterministic=False)
    kernels, _, refused, _ = flex.warp_specialized_first(None, *flex.backward_kernels(None, **options), **options)
    assert refused == [] and kernels.config.attention.block_m == kernels.config.attention.block_n == 128
    for module in (forward, kernels.main):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback
            result = tessera.compile(module, target="cubin", pipeline=passes.DEFAULT_PIPELINE)
        assert result.warnings == () and not any(entry.spills for entry in result.entries.values())


def test_block_lists_of_searched_documents_are_those_of_the_document_ids():
    """A document mask searched in the mod, in NumPy and in torch, classifies the blocks as the one that
    indexes document ids precomputed on the host (the rewrite users made before)."""
    doc_ids = np.searchsorted(OFFSETS, np.arange(200), side="right")

    def indexed(b, h, q_idx, kv_idx):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)

    expected = create_block_mask(indexed, 1, 1, 200, 200, 32, 16)
    mods = [documents] + ([_torch_variants()["torch-documents"][1]] if _has_torch() else [])
    for mod in mods:
        got = create_block_mask(mod, 1, 1, 200, 200, 32, 16)
        assert np.array_equal(got.kinds, expected.kinds)
        assert all(np.array_equal(a, b) for a, b in zip(got.inputs(), expected.inputs()))


def _has_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


# endregion
# region refusals

UNSORTED = np.array([0, 5, 3, 9])
WITH_NAN = np.array([0.0, np.nan, 1.0])
GRID = np.arange(12).reshape(3, 4)


@pytest.mark.parametrize("fn,construct", [
    (lambda b, h, q, k: np.searchsorted(UNSORTED, q) == 1,
     "np.searchsorted of UNSORTED: it is not sorted in increasing order \\(5 at index 1 before 3\\)"),
    (lambda b, h, q, k: np.digitize(q, UNSORTED) == 1,
     "np.digitize of UNSORTED: it is not sorted in increasing or decreasing order"),
    (lambda b, h, q, k: np.searchsorted(WITH_NAN, q) == 1, "np.searchsorted of WITH_NAN: it holds NaN at index 1"),
    (lambda b, h, q, k: np.searchsorted(OFFSETS, q, sorter=np.arange(10)) == 1, "np.searchsorted with sorter="),
    (lambda b, h, q, k: np.searchsorted(GRID, q) == 1, "np.searchsorted of GRID: its shape \\(3, 4\\) is not"),
    (lambda b, h, q, k: np.searchsorted(OFFSETS, q, side="middle") == 1, "np.searchsorted with side='middle'"),
    (lambda b, h, q, k: np.searchsorted(OFFSETS, q > k) == 1, "np.searchsorted of a boolean value"),
    (lambda b, h, q, k: np.digitize(q, OFFSETS, right=k > 0) == 1, "np.digitize with right="),
])
def test_what_stays_refused_is_named(fn, construct):
    with pytest.raises(ModTraceError, match=f"mask_mod '<lambda>' at .*: cannot trace {construct}"):
        trace_mod(fn, "mask_mod")


def test_torch_refusals_are_named():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")
    unsorted = torch.tensor([3, 1, 2])
    offsets = torch.from_numpy(OFFSETS)
    cases = [
        (lambda b, h, q, k: torch.searchsorted(unsorted, q) == 0, "torch.searchsorted of unsorted: it is not sorted"),
        (lambda b, h, q, k: torch.searchsorted(offsets, q, side="left", right=True) == 0,
         "torch.searchsorted with side='left' and right=True \\(opposites"),
        (lambda b, h, q, k: torch.bucketize(q, offsets, out=None) == 0, "torch.bucketize with the arguments"),
        (lambda b, h, q, k: torch.searchsorted(offsets, q, sorter=torch.arange(10)) == 0,
         "torch.searchsorted with sorter="),
    ]
    for fn, construct in cases:
        with pytest.raises(ModTraceError, match=f"mask_mod '.*<lambda>' at .*: cannot trace {construct}"):
            trace_mod(fn, "mask_mod")

# endregion
