"""Attention variants as a FlexAttention user writes them next (round 24), forward and backward against the float64
reference written apart from `tessera.reference` (`mods_reference`: dQ, dK, dV from each score_mod's derivative
taken by hand, the gradients of captured tables summed by `np.add.at` for the O the kernels hold).

The variants: Gemma-2's tanh soft-cap by 50 with its backward, alone and under a causal sliding window; ALiBi under
GQA with eight per-head slopes captured and their gradient; attention sinks (the first 4 keys) beside a causal
window whose width is read per head; prefix-LM from a per-batch length array; a learned [2S - 1] relative-position
table and T5's bidirectional log buckets into an [H, 32] table, both with their gradients; a [B, S] per-query
temperature times the score plus an [H, S] key bias under a causal factor (two tables, two gradients); a mask that
empties whole query rows (every third), a whole query block's rows (64..127) and whole key blocks (64..127); T5's
buckets precomputed as an integer [2S - 1] table that indexes the float [H, 32] one (only the float table gets a
gradient); key blocks listed with gaps (every other block of 64); a score_mod NaN where causal hides it (sqrt of
q_idx - kv_idx, with a learned slope); a table read at the np.digitize bucket of the score; `deterministic=True`
repeating bit for bit. Then `causal=True` beside a mask_mod and a score_mod (bottom-right, the rows above the
diagonal left empty when seq_q > seq_k), head_dim 64/96/128 in bf16 and f16, `block_mask=` made by
`create_block_mask` from a document-id array, a soft-capped kernel printed and run by `tessera-run --check`, and
what this round fixed: a NaN constant in a hook (np.nan, float("nan"), a table's NaN read at a constant index) is
refused by name, where the kernel builder's tile.fill verifier raised from inside the build; a builder's kernel
launched with captured arrays of other values than traced is refused by name (it ran them against lists and proofs
of the traced ones).
The torch modifiers (a learned per-head soft-cap, HF T5's `_relative_position_bucket` over an nn.Embedding, a
prefix-LM length tensor with torch's own block mask, a loss that reads the LSE) are in
test_attention_mods_unseen24_torch.py.

The default run takes Tile level over three shapes (seq 177, 7 and 1 queries; GQA 2:1, MHA and MQA: 4:1,
2:1 and 8:1 for ALiBi's eight heads; batch 2); `-m slow` every variant in the CTA simulator and the PTX executor
at one shape (batch 2 for the hooks that read b), the head_dim and dtype grid in the CTA simulator, and four
variants at 1000 x 1000 and one-row shapes at Tile level."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import mods_reference
from mods_reference import check

import inprocess
import tessera
from tessera.numerics import BF16, F16
from tessera.variants import ModTraceError, create_block_mask

H = 4
S = 177                                                                   # the longest sequence of the shapes
_rng = np.random.default_rng(24)
CAP = 50.0
SLOPES = (2.0 ** -np.arange(1, 9)).astype(np.float32)                    # ALiBi, eight query heads
SINKS = 4
WIDTH = np.array([8, 16, 33, 64])                                          # a causal window per head
PREFIX = np.array([5, 120])                                                # per batch entry
REL = (_rng.standard_normal(2 * S - 1) * 0.5).astype(np.float32)          # by q_idx - kv_idx + S - 1
T5 = (_rng.standard_normal((H, 32)) * 0.5).astype(np.float32)             # [heads, buckets]
QTEMP = (1 + 0.3 * _rng.standard_normal((2, S))).astype(np.float32)       # [B, S] by (b, q_idx)
KBIAS = (0.5 * _rng.standard_normal((H, S))).astype(np.float32)           # [H, S] by (h, kv_idx)
_distance = np.arange(-(S - 1), S)                                         # kv_idx - q_idx
BUCKETS = np.where(np.abs(_distance) < 8, np.abs(_distance), np.minimum(
    8 + (np.log(np.maximum(np.abs(_distance), 1) / 8) / np.log(16) * 8).astype(np.int64), 15)) + 16 * (_distance > 0)


# region modifiers

def softcap(score, b, h, q_idx, kv_idx):
    return CAP * np.tanh(score / CAP)


def d_softcap(s, b, h, q_idx, kv_idx):
    return 1 - np.tanh(s / CAP) ** 2


def causal_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40)


def alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sinks_head_window(b, h, q_idx, kv_idx):
    return (kv_idx < SINKS) | ((q_idx >= kv_idx) & (q_idx - kv_idx < WIDTH[h]))


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def relative(score, b, h, q_idx, kv_idx):
    return score + REL[q_idx - kv_idx + S - 1]


def t5_bucket(relative_position, num_buckets=32, max_distance=128):
    """T5's bidirectional bucket of kv_idx - q_idx: half the buckets each way, the first 8 exact, then
    log-spaced up to max_distance."""
    half = num_buckets // 2
    n = np.abs(relative_position)
    exact = half // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 0 takes the exact branch
        large = exact + (np.log(n / exact) / np.log(max_distance / exact) * (half - exact)).astype(np.int32)
    return (relative_position > 0).astype(np.int32) * half + np.where(n < exact, n, np.minimum(large, half - 1))


def t5(score, b, h, q_idx, kv_idx):
    return score + T5[h, t5_bucket(kv_idx - q_idx)]


def two_tables(score, b, h, q_idx, kv_idx):
    return score * QTEMP[b, q_idx] + KBIAS[h, kv_idx] * (q_idx >= kv_idx)


def empty_rows_and_blocks(b, h, q_idx, kv_idx):
    """Rows 64..127 and every third row see nothing; keys 64..127 are never seen."""
    return (q_idx // 64 != 1) & (q_idx % 3 != 0) & (kv_idx // 64 != 1) & (kv_idx <= q_idx + 5)


def bucket_table(score, b, h, q_idx, kv_idx):
    return score + T5[h, BUCKETS[kv_idx - q_idx + S - 1]]

# endregion


def _t5_reads(s, b, h, q_idx, kv_idx):
    return [((h, t5_bucket(kv_idx - q_idx)), 1.0)]


VARIANTS = {  # name -> (score_mod, mask_mod, d score_mod / d score, {table: (shape, reads)})
    "softcap": (softcap, None, d_softcap, None),
    "softcap+causal-window": (softcap, causal_window, d_softcap, None),
    "alibi-gqa": (alibi, causal, None, {"SLOPES": (SLOPES.shape, lambda s, b, h, q_idx, kv_idx: [
        ((h,), kv_idx - q_idx)])}),
    "sinks+head-window": (None, sinks_head_window, None, None),
    "prefix-lm": (None, prefix_lm, None, None),
    "relative": (relative, None, None, {"REL": (REL.shape, lambda s, b, h, q_idx, kv_idx: [
        ((q_idx - kv_idx + S - 1,), 1.0)])}),
    "t5-bidirectional": (t5, None, None, {"T5": (T5.shape, _t5_reads)}),
    "two-tables": (two_tables, None, lambda s, b, h, q_idx, kv_idx: QTEMP[b, q_idx], {
        "QTEMP": (QTEMP.shape, lambda s, b, h, q_idx, kv_idx: [((b, q_idx), s)]),
        "KBIAS": (KBIAS.shape, lambda s, b, h, q_idx, kv_idx: [((h, kv_idx), (q_idx >= kv_idx) * 1.0)])}),
    "empty-rows-and-blocks": (None, empty_rows_and_blocks, None, None),
    "bucket-table": (bucket_table, None, None, {"T5": (T5.shape, lambda s, b, h, q_idx, kv_idx: [
        ((h, BUCKETS[kv_idx - q_idx + S - 1]), 1.0)])}),
}
SHAPES = [(2, H, 2, S, S), (1, H, H, 7, S), (2, H, 1, 1, 7)]  # (batch, heads, heads_k, seq_q, seq_k)


def _shape(name, shape):
    """ALiBi's eight slopes make eight query heads (GQA 4:1, or 8:1 for MQA)."""
    return (shape[0], 8, *shape[2:]) if name == "alibi-gqa" else shape


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_at_tile_level(name, shape):
    check(_shape(name, shape), "tile", *VARIANTS[name])


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, H, 2, 1000, 1000), (1, H, 1, 1, 1000), (1, H, 1, 1000, 1)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["softcap+causal-window", "sinks+head-window", "t5-bidirectional", "alibi-gqa"])
def test_variant_at_long_and_one_row_shapes(name, shape):
    """1000 x 1000 (eight query blocks, sixteen key blocks of 64), one query row against 1000 keys (decoding), 1000
    queries against one key: the variants whose tables reach past 177 positions (about 5 s each). Without the
    slopes' gradient: against one key it is exactly 0, a sum of f32 roundings of dP - dPsum weighted by distances
    up to 999 (0.012 of terms near 8000), which no tolerance of the largest entry bounds."""
    check(_shape(name, shape), "tile", *VARIANTS[name][:3])


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_below_tile_level(name, level):
    batch = 2 if name in ("prefix-lm", "two-tables") else 1  # PREFIX[b], QTEMP[b, q_idx]
    check(_shape(name, (batch, 2, 1, 50, 70)), level, *VARIANTS[name])


def bottom_right_window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < 50  # with causal=True: a sliding window under the bottom-right diagonal


def distance_bias(score, b, h, q_idx, kv_idx):
    return score - 0.05 * np.abs(q_idx - kv_idx)


@pytest.mark.parametrize("shape", [(1, 2, 2, 100, 177), (1, 2, 2, 177, 100), (1, 2, 1, 7, 7), (1, 2, 1, 1, 177)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mods", [(distance_bias, bottom_right_window), (None, sinks_head_window)],
                         ids=["bias+window", "sinks"])
def test_causal_true_beside_a_mask_mod(mods, shape):
    """causal=True is bottom-right and hides what the mask_mod shows too; seq_q > seq_k leaves the first rows
    empty (O = 0, LSE = -inf)."""
    check(shape, "tile", *mods, causal=True)


HEAD_DIM_CASES = [(hd, dtype) for hd in (64, 96, 128) for dtype in (BF16, F16)]


@pytest.mark.parametrize("head_dim, dtype", HEAD_DIM_CASES, ids=lambda x: str(getattr(x, "name", x)))
def test_head_dims_and_types_at_tile_level(head_dim, dtype):
    check((1, 2, 1, 77, 130), "tile", *VARIANTS["softcap+causal-window"], head_dim=head_dim, dtype=dtype)
    check((1, 8, 2, 33, 100), "tile", *VARIANTS["alibi-gqa"], head_dim=head_dim, dtype=dtype)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim, dtype", HEAD_DIM_CASES, ids=lambda x: str(getattr(x, "name", x)))
def test_head_dims_and_types_in_the_cta_simulator(head_dim, dtype):
    check((1, 2, 1, 77, 130), "target", *VARIANTS["softcap+causal-window"], head_dim=head_dim, dtype=dtype)
    check((1, 8, 2, 33, 100), "target", *VARIANTS["alibi-gqa"], head_dim=head_dim, dtype=dtype)


DOCS = np.repeat([0, 1, 2, 3], [40, 1, 50, 86])                            # packed documents, one of one token


def documents(b, h, q_idx, kv_idx):
    return (DOCS[q_idx] == DOCS[kv_idx]) & (q_idx >= kv_idx)


@pytest.mark.parametrize("block", [64, 128])
def test_block_mask_of_a_document_id_array(block):
    """FlexAttention's call: the block mask made once from the documents' mask_mod, passed to the forward and the
    backward instead of the mask_mod, with a relative table's gradient beside it."""
    block_mask = create_block_mask(documents, 1, H, S, S, device="cpu", BLOCK_SIZE=block)
    check((1, H, 2, S, S), "tile", relative, documents, None, VARIANTS["relative"][3], block_mask=block_mask)


def strided_blocks(b, h, q_idx, kv_idx):
    """Every other key block of 64 and the diagonal: lists with gaps, a query block's blocks not contiguous."""
    return ((kv_idx // 64) % 2 == 0) | (q_idx == kv_idx)


_T2 = np.array([0.5, -0.25], np.float32)


def sqrt_of_the_distance(score, b, h, q_idx, kv_idx):
    return score - _T2[h] * np.sqrt(q_idx - kv_idx)  # NaN above the diagonal, which causal hides


BINS = np.array([-1.0, 0.0, 1.0])
_BUCKET_BIAS = np.array([0.3, -0.2, 0.1, 0.5], np.float32)


def score_buckets(score, b, h, q_idx, kv_idx):
    return score + _BUCKET_BIAS[np.digitize(score, BINS)]


MORE = {  # name -> (shape, score_mod, mask_mod, d score_mod / d score, {table: (shape, reads)})
    "strided-blocks+softcap": ((1, 2, 2, 300, 520), softcap, strided_blocks, d_softcap, None),
    "sqrt-distance-under-causal": ((1, 2, 1, 50, 70), sqrt_of_the_distance, causal, None, {"_T2": (_T2.shape, (
        lambda s, b, h, q_idx, kv_idx: [((h,), -np.sqrt(np.maximum(q_idx - kv_idx, 0)))]))}),
    "table-at-the-score's-bucket": ((1, 2, 1, 37, 45), score_buckets, None, None, {"_BUCKET_BIAS": (
        _BUCKET_BIAS.shape, lambda s, b, h, q_idx, kv_idx: [((np.digitize(s, BINS),), 1.0)])}),
}


@pytest.mark.parametrize("name", list(MORE))
def test_more_variants_at_tile_level(name):
    """Block lists with gaps; a score_mod NaN where causal hides it (its derivatives and the table's gradient
    0 there, not NaN); a table read at the bucket of the score (its gradient 1 at each read, the score's
    derivative through the bucket 0)."""
    shape, *mods = MORE[name]
    with np.errstate(invalid="ignore"):  # the reference's sqrt above the diagonal
        check(shape, "tile", *mods)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", ["sqrt-distance-under-causal", "table-at-the-score's-bucket"])
def test_more_variants_below_tile_level(name, level):
    shape, *mods = MORE[name]
    with np.errstate(invalid="ignore"):
        check(shape, level, *mods)


@pytest.mark.parametrize("name, level", [
    *((name, "tile") for name in ("empty-rows-and-blocks", "sinks+head-window", "prefix-lm", "softcap+causal-window")),
    *(pytest.param(name, "ptx", marks=pytest.mark.slow) for name in ("empty-rows-and-blocks", "prefix-lm"))])
def test_deterministic_backward_repeats_bit_for_bit(name, level):
    """deterministic=True orders the dQ additions by each key block's rank among a query block's visitors: with
    rows and blocks emptied, sinks and prefixes, two runs give the same bits, within the reference (in the PTX
    executor, whose schedule interleaves the key blocks' thread blocks, at 150 queries x 140 keys)."""
    score_mod, mask_mod, d_score_mod, _ = VARIANTS[name]
    shape = (2, H, 2, 200, 150) if level == "tile" else (2, 2, 1, 150, 140)
    q, k, v, do = mods_reference.inputs(shape, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rung taken below Tile level
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level=level)
        runs = [tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                           level=level, deterministic=True) for _ in range(2)]
    want = mods_reference.reference(q, k, v, do, score_mod, mask_mod, d_score_mod)
    for grad, first, second, expected in zip(("dQ", "dK", "dV"), *runs, want[2:5]):
        assert np.array_equal(np.asarray(first), np.asarray(second)), grad
        mods_reference.assert_close(grad, first, expected)


# region what this round found

_NAN_TABLE = np.array([np.nan, 1.0], np.float32)


def nan_where(score, b, h, q_idx, kv_idx):
    return np.where(q_idx == kv_idx, np.nan, score)


def nan_plus(score, b, h, q_idx, kv_idx):
    return score + float("nan")


def nan_read(score, b, h, q_idx, kv_idx):
    return score + _NAN_TABLE[0]


def nan_compare(b, h, q_idx, kv_idx):
    return q_idx < kv_idx + np.nan


@pytest.mark.parametrize("hook, kind", [(nan_where, "score_mod"), (nan_plus, "score_mod"), (nan_read, "score_mod"),
                                        (nan_compare, "mask_mod")], ids=lambda x: getattr(x, "__name__", x))
def test_a_nan_constant_is_refused_by_name(hook, kind):
    """Was xdsl's VerifyException from tile.fill's verifier (a kernel constant holds no NaN) while the builder
    verified the kernel: now the tracer refuses it, naming the hook and its line."""
    q, k, v, _ = (np.ones((1, 1, 9, 64), BF16) for _ in range(4))
    with pytest.raises(ModTraceError, match=rf"{kind} '{hook.__name__}' at .*test_attention_mods_unseen24.py:\d+: "
                                            "cannot trace a NaN constant"):
        tessera.attention(q, k, v, level="tile", **{kind: hook})


def test_a_table_holding_nan_read_at_traced_indices_is_data():
    """A NaN in a captured table read at traced indices is an input of the kernel, not a constant: it runs, and
    the rows that read it are NaN, as in NumPy."""
    q, k, v, _ = (np.ones((1, 1, 9, 64), BF16) for _ in range(4))

    def nan_by_distance(score, b, h, q_idx, kv_idx):
        return score + _NAN_TABLE[np.clip(q_idx - kv_idx, 0, 1)]

    o = np.asarray(tessera.attention(q, k, v, score_mod=nan_by_distance, level="tile"), np.float32)
    assert np.isnan(o).all()  # every row reads q_idx - kv_idx = 0 at its diagonal

_HEAD_INDEX = np.array([0, 1])


def indexed_bias(score, b, h, q_idx, kv_idx):
    return score + T5[_HEAD_INDEX[h], 0]


def test_a_builders_kernel_takes_its_captured_arrays_as_traced():
    """`tessera.launch` of the builders' kernels with the captured arrays passed beside q, k, v: a window array
    of other widths than traced ran against the block lists made for the traced ones (O 0.37 off the reference
    of the widths passed, 2.1 off the traced ones'), and an index array of other values read past its table
    unproved; both are refused by name now. A learned table (read at traced indices) takes new values."""
    from tessera.kernels import flash_attention

    q, k, v, _ = mods_reference.inputs((1, 2, 2, 300, 300))
    window = flash_attention(64, mask_mod=sinks_head_window, block_sparse=True)
    lists = create_block_mask(sinks_head_window, 1, 2, 300, 300, 128, 128).inputs()
    with pytest.raises(ValueError, match="input mask_mod_WIDTH holds other values than the array WIDTH the mask_mod "
                                         "'sinks_head_window' was traced with"):
        tessera.launch(window, q, k, v, WIDTH * 4, *lists, level="tile")
    indexed = flash_attention(64, score_mod=indexed_bias)
    with pytest.raises(ValueError, match="input score_mod__HEAD_INDEX holds other values"):
        tessera.interpret(indexed, q, k, v, np.array([5, 7]), T5)
    learned = T5 * 2
    o = tessera.launch(indexed, q, k, v, _HEAD_INDEX, learned, level="tile")
    want = mods_reference.reference(q, k, v, q, lambda s, b, h, q_idx, kv_idx: s + learned[h, 0], None)[0]
    mods_reference.assert_close("O", o, want)

# endregion


def test_tessera_run_checks_a_printed_variant_kernel(tmp_path):
    """A soft-capped kernel printed from the builder runs in `tessera-run --check` against its own Tile IR in
    float64 (a kernel of kind custom), exit status 0."""
    path = tmp_path / "softcap.mlir"
    path.write_text(str(tessera.kernels.flash_attention(64, score_mod=softcap, dtype="bf16")))
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "-d", "batch=1", "-d",
                            "heads=2", "-d", "seq_q=70", "-d", "seq_k=90", "--check"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check: max error" in result.stdout and ": ok" in result.stdout
