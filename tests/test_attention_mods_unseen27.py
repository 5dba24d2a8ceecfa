"""Attention variants as a FlexAttention user writes them next (round 27), forward and backward against the float64
reference written apart from `tessera.reference` (`mods_reference`: dQ, dK, dV from each score_mod's derivative taken
by hand, the gradients of captured tables summed by `np.add.at`).

The variants: a score_mod mixing two captured tables of different dtypes (a bf16 [H, 2P - 1] relative bias read at
the difference of an int32 [B, P] position table, left-padded in one batch entry) with the bias's gradient; a
temperature per batch and head from an f16 [B, H] table, with its gradient (-s / T^2); block-diagonal chunks of 48
over 191 positions (no multiple); Sparse Transformer's fixed pattern (causal, 32-blocks and the last two keys of each
block) beside symmetric ALiBi; a dilated causal window (every third key, 60 back); a bool [B, H, S] table read at [b,
h, q_idx] that empties some rows in some heads only (O = 0, LSE = -inf) under GQA 8:2, 8:1 and 8:8; a gated key bias
(a sigmoid of a learned per-head gate times a learned [H, S] bias: two gradients); a clamp of the score to a learned
per-head cap beside a signed log distance (np.clip with traced bounds, np.sign, np.log, np.abs: the cap's gradient is
the clamped scores' dS); SiLU of the score; a score_mod that ignores the score (dQ = dK = 0) and one that returns an
integer; np.where on the score whose other branch is NaN there (a soft clamp to a learned cap with log1p, sqrt of the
positive scores). Then `causal=True` beside them at decoding shapes (seq_q 1 and 16 against 300 keys), seq_q > seq_k,
one query and one key; head_dim 64/96/128 in bf16 and f16; printed kernels through `tessera-run --check`.

What this round fixed: a captured int8 / int16 / uint8 / uint16 / uint32 / uint64 array's values keep their type in
NumPy and torch, whose arithmetic wraps there (`U16[q_idx] - U16[kv_idx]` of positions), while the kernel computed in
i32: O off by 3.2 with no error; now an op that would wrap for the array's values is refused by name
(`tessera.variants.narrow_integers`), one that does not wrap runs, and so does a cast to int8 / int16 only where it
cannot wrap. A score_mod that ignores the score left K's ring stages unread, their TMA fills never waited on (both
simulators refused the kernel: a load in flight at the CTA's end). The CTA simulator took a copy group's mbarrier
for a ring slot's release (the backward single-stage under GQA 4:1 refused though right). A mask_mod returning
numbers is refused with its line. The torch modifiers of this round are in test_attention_mods_unseen27_torch.py.

The default run takes Tile level over three shapes (191 x 191 GQA 4:1 batch 2, 16 x 300 MQA, 1 x 33 MHA) and two
variants each in the CTA simulator and the PTX executor; `-m slow` every variant at target and PTX level, decoding
shapes there, and ptxas on each variant's kernels."""

from __future__ import annotations

import re
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
from mods_reference import assert_close, check, inputs

import inprocess
import tessera
from tessera.numerics import BF16, F16
from tessera.variants import ModTraceError

H, S, P = 8, 191, 300
_rng = np.random.default_rng(27)
BIAS = (_rng.standard_normal((H, 2 * P - 1)) * 0.5).astype(ml_dtypes.bfloat16)   # by position difference
POS = np.stack([np.arange(P), np.concatenate([np.zeros(9), np.arange(P - 9)])]).astype(np.int32)  # [B, P]
TEMP = (0.5 + _rng.random((2, H))).astype(np.float16)                              # [B, H]
SLOPES = (2.0 ** -np.arange(1, 9)).astype(np.float32)
KEEP = _rng.random((2, H, S)) > 0.2                                                # [B, H, S] by q_idx
GATE = _rng.standard_normal(H).astype(np.float32)
KEY_BIAS = (_rng.standard_normal((H, P)) * 0.5).astype(np.float32)
CAPS = np.linspace(1.0, 4.0, H).astype(np.float32)


# region modifiers

def mixed_dtypes(score, b, h, q_idx, kv_idx):
    return score + BIAS[h, POS[b, q_idx] - POS[b, kv_idx] + P - 1]


def temperature(score, b, h, q_idx, kv_idx):
    return score / TEMP[b, h]


def chunks(b, h, q_idx, kv_idx):
    return q_idx // 48 == kv_idx // 48


def symmetric_alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * np.abs(q_idx - kv_idx)


def fixed_sparse(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx // 32 == kv_idx // 32) | (kv_idx % 32 >= 30))


def dilated(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx - kv_idx) % 3 == 0) & (q_idx - kv_idx < 60)


def keep_rows(b, h, q_idx, kv_idx):
    return KEEP[b, h, q_idx] & (kv_idx <= q_idx + 3)


def gated(score, b, h, q_idx, kv_idx):
    return score + 1 / (1 + np.exp(-GATE[h])) * KEY_BIAS[h, kv_idx]


def clamp_log_sign(score, b, h, q_idx, kv_idx):
    d = kv_idx - q_idx
    return np.clip(score, -CAPS[h], CAPS[h]) - 0.3 * np.sign(d) * np.log(1 + np.abs(d))


def silu(score, b, h, q_idx, kv_idx):
    return score / (1 + np.exp(-score))


def key_bias_only(score, b, h, q_idx, kv_idx):
    return KEY_BIAS[h, kv_idx]


def integer_score(score, b, h, q_idx, kv_idx):
    return (kv_idx - q_idx) // 16

# endregion


def _sigmoid(x):
    return 1 / (1 + np.exp(-x.astype(np.float64)))


def _inside(s, h):
    return ((s > -CAPS[h]) & (s < CAPS[h])) * 1.0


VARIANTS = {  # name -> (score_mod, mask_mod, d score_mod / d score, {table: (shape, reads)})
    "mixed-dtypes": (mixed_dtypes, None, None, {"BIAS": (BIAS.shape, lambda s, b, h, q, k: [
        ((h, POS[b, q] - POS[b, k] + P - 1), 1.0)])}),
    "temperature": (temperature, None, lambda s, b, h, q, k: 1 / TEMP[b, h].astype(np.float64), {
        "TEMP": (TEMP.shape, lambda s, b, h, q, k: [((b, h), -s / TEMP[b, h].astype(np.float64) ** 2)])}),
    "chunks": (None, chunks, None, None),
    "fixed-sparse+alibi": (symmetric_alibi, fixed_sparse, None, {"SLOPES": (SLOPES.shape, lambda s, b, h, q, k: [
        ((h,), -np.abs(q - k))])}),
    "dilated": (None, dilated, None, None),
    "keep-rows": (None, keep_rows, None, None),
    "gated": (gated, None, None, {
        "GATE": (GATE.shape, lambda s, b, h, q, k: [((h,), _sigmoid(GATE[h]) * (1 - _sigmoid(GATE[h])) *
                                                     KEY_BIAS[h, k])]),
        "KEY_BIAS": (KEY_BIAS.shape, lambda s, b, h, q, k: [((h, k), _sigmoid(GATE[h]))])}),
    "clamp-log-sign": (clamp_log_sign, None, lambda s, b, h, q, k: _inside(s, h), {
        "CAPS": (CAPS.shape, lambda s, b, h, q, k: [((h,), (s >= CAPS[h]) * 1.0 - (s <= -CAPS[h]) * 1.0)])}),
    "silu": (silu, None, lambda s, b, h, q, k: _sigmoid(s) * (1 + s * (1 - _sigmoid(s))), None),
    "key-bias-only": (key_bias_only, None, lambda s, b, h, q, k: 0.0, {"KEY_BIAS": (KEY_BIAS.shape, (
        lambda s, b, h, q, k: [((h, k), 1.0)]))}),
    "integer-score": (integer_score, None, lambda s, b, h, q, k: 0.0, None),
}
SHAPES = [(2, H, 2, S, S), (2, H, 1, 16, P), (2, H, 8, 1, 33)]  # (batch, heads, heads_k, seq_q, seq_k)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_at_tile_level(name, shape):
    check(shape, "tile", *VARIANTS[name])


_BY_DEFAULT = (("keep-rows", "target"), ("temperature", "ptx"), ("key-bias-only", "target"), ("integer-score", "ptx"))


@pytest.mark.parametrize("name, level", [
    *_BY_DEFAULT, *(pytest.param(name, level, marks=pytest.mark.slow) for level in ("target", "ptx")
                    for name in VARIANTS if (name, level) not in _BY_DEFAULT)])
def test_variant_below_tile_level(name, level):
    """Two variants each in the CTA simulator and the PTX executor by default (about 2 s each), every one with
    `-m slow` (2 to 7 s each). A score_mod that ignores the score (a key bias alone, an integer of the distance)
    leaves K's ring stages unread: they were released without waiting for their TMA fills, and both simulators
    refused the kernel (the CTA ends with a TMA load in flight); `tile.release` of an unread stage now waits
    for its fill."""
    check((2, 2, 1, 50, 70), level, *VARIANTS[name])


@pytest.mark.parametrize("shape", [(1, H, 1, 1, P), (1, H, 2, 16, P), (2, H, 2, S, 33), (1, H, 8, 1, 1),
                                   (2, H, 2, 33, S)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["keep-rows+alibi", "dilated+temperature", "chunks+clamp"])
def test_causal_true_beside_a_mask_mod(name, shape):
    """causal=True (bottom-right) and a mask_mod at decoding shapes (one and 16 queries against 300 keys), more
    queries than keys (the first rows see nothing), one query and one key."""
    score, mask = {"keep-rows+alibi": ("fixed-sparse+alibi", "keep-rows"), "dilated+temperature": (
        "temperature", "dilated"), "chunks+clamp": ("clamp-log-sign", "chunks")}[name]
    score_mod, _, d_score_mod, captured = VARIANTS[score]
    check(shape, "tile", score_mod, VARIANTS[mask][1], d_score_mod, captured, causal=True)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("shape", [(1, 2, 1, 1, P), (1, 4, 2, 16, P), (1, 2, 2, 33, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_causal_true_at_decoding_shapes_below_tile_level(shape, level):
    """One and 16 queries against 300 keys, 33 queries against one key, bottom-right causal beside the dilated
    window and the per-(b, h) temperature, in the CTA simulator and the PTX executor (1 to 3 s each)."""
    score_mod, _, d_score_mod, captured = VARIANTS["temperature"]
    check(shape, level, score_mod, dilated, d_score_mod, captured, causal=True)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_kernels_assemble_without_spills(name):
    from mods_checks import assert_variant_kernels_assemble

    assert_variant_kernels_assemble(*VARIANTS[name][:2])


def soft_clamp(score, b, h, q_idx, kv_idx):
    return np.where(score > CAPS[h], CAPS[h] + np.log1p(score - CAPS[h]), score)


def sqrt_of_positive(score, b, h, q_idx, kv_idx):
    return np.where(score > 0, np.sqrt(score), score)


BRANCHES = {  # name -> (score_mod, d score_mod / d score, {table: (shape, reads)})
    "soft-clamp": (soft_clamp, lambda s, b, h, q, k: np.where(s > CAPS[h], 1 / (1 + s - CAPS[h]), 1.0), {
        "CAPS": (CAPS.shape, lambda s, b, h, q, k: [((h,), np.where(s > CAPS[h], 1 - 1 / (1 + s - CAPS[h]), 0.0))])}),
    "sqrt-of-positive": (sqrt_of_positive, lambda s, b, h, q, k: np.where(s > 0, 0.5 / np.sqrt(np.abs(s)), 1.0),
                         None),
}


@pytest.mark.parametrize("level", ["tile", pytest.param("target", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", list(BRANCHES))
def test_a_branch_not_taken_may_be_nan(name, level):
    """np.where on the score whose other branch is NaN there (log1p and sqrt of negatives) and so is its
    derivative: the values and gradients (a learned cap's among them) are the taken branch's."""
    score_mod, d_score_mod, captured = BRANCHES[name]
    with np.errstate(invalid="ignore", divide="ignore"):  # the reference evaluates both branches
        check((1, H, 2, 70, 90), level, score_mod, None, d_score_mod, captured)


@pytest.mark.parametrize("head_dim, dtype", [(hd, dtype) for hd in (64, 96, 128) for dtype in (BF16, F16)],
                         ids=lambda x: str(getattr(x, "name", x)))
def test_head_dims_and_types_at_tile_level(head_dim, dtype):
    check((1, H, 2, 33, S), "tile", *VARIANTS["gated"], head_dim=head_dim, dtype=dtype)
    check((1, H, 1, 33, S), "tile", *VARIANTS["clamp-log-sign"], head_dim=head_dim, dtype=dtype)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name, head_dim, dtype", [
    ("gated", 96, BF16), ("keep-rows", 96, F16), ("clamp-log-sign", 128, F16), ("mixed-dtypes", 128, BF16),
    ("key-bias-only", 96, F16)], ids=lambda x: str(getattr(x, "name", x)))
def test_head_dims_and_types_below_tile_level(name, head_dim, dtype, level):
    check((1, 2, 1, 50, 130), level, *VARIANTS[name], head_dim=head_dim, dtype=dtype)


@pytest.mark.parametrize("hooks, level", [
    ({"mask_mod": keep_rows}, "tile"), ({"mask_mod": keep_rows}, "target"), ({"score_mod": key_bias_only}, "ptx")],
    ids=["keep-rows-tile", "keep-rows-target", "key-bias-ptx"])
def test_tessera_run_checks_a_printed_variant_kernel(tmp_path, hooks, level):
    """The keep-rows kernel printed from the builder (its bool table an i32 input), more queries than the table
    holds (reads past it are 0: rows hidden), and the key-bias kernel whose K stages nothing reads, run in
    `tessera-run --check` against their own Tile IR in float64, exit status 0."""
    path = tmp_path / "variant.mlir"
    path.write_text(str(tessera.kernels.flash_attention(64, dtype="bf16", **hooks)))
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "-d", "batch=1", "-d",
                            "heads=2", "-d", "seq_q=300", "-d", "seq_k=70", "--check", "--level", level])
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": ok" in result.stdout


def _softcap(score, b, h, q_idx, kv_idx):
    return 20 * np.tanh(score / 20)


def test_the_cta_simulator_pairs_no_release_with_a_copy_group():
    """The backward's main kernel single-stage (`SPILL_PIPELINE`, the last rung a heavy modifier reaches) with a
    GQA group of four heads and the keep-rows lists: thread 0 waits on one copy group's mbarrier and then issues
    another group's copies, which the CTA simulator took for a ring slot's release and refill, and refused the
    kernel (group 2 filled 5 times, group 1 "released" 3) though it is right (the PTX executor agreed with Tile
    level); a copy group's barrier now pairs with no release."""
    from tessera import passes
    from tessera.kernels import attention_backward
    from tessera.variants import create_block_mask

    q, k, v, do = inputs((1, 4, 1, 70, 130))
    o, lse = tessera.attention(q, k, v, score_mod=_softcap, mask_mod=keep_rows, return_lse=True, level="tile")
    kernels = attention_backward(64, score_mod=_softcap, mask_mod=keep_rows, block_sparse=True)
    dpsum, lse2, _ = tessera.launch(kernels.preprocess, o, do, np.asarray(lse, np.float32), level="tile")
    c = kernels.config.attention
    lists = create_block_mask(keep_rows, 1, 4, 70, 130, c.block_m, c.block_n).backward_inputs(1)
    args = (q, k, v, do, lse2, dpsum, KEEP.astype(np.int32), *lists)
    want = tessera.launch(kernels.main, *args, level="tile")
    got = tessera.launch(kernels.main, *args, level="target", pipeline=passes.SPILL_PIPELINE)
    for name, a, b in zip(("dQaccum", "dK", "dV"), got, want):
        assert_close(name, a, np.asarray(b, np.float64))


def _heavy(score, b, h, q_idx, kv_idx):
    s = CAPS[h] * 10 * np.tanh(score / (CAPS[h] * 10)) + BIAS[h, POS[b, q_idx] - POS[b, kv_idx] + P - 1]
    s = s + 1 / (1 + np.exp(-GATE[h])) * KEY_BIAS[h, kv_idx]
    return np.clip(s, -CAPS[h] * 3, CAPS[h] * 3) - 0.3 * np.sign(kv_idx - q_idx) * np.log(
        1 + np.abs(kv_idx - q_idx)) / TEMP[b, h]


@pytest.mark.slow
def test_a_heavy_variant_under_gqa_4_to_1_on_the_spilling_rung():
    """Soft-cap by a learned per-head cap, the mixed-dtype bias, the gated key bias, the clamp and the signed log
    distance under keep-rows with GQA 4:1: the backward takes the head split, then the spilling rung, with
    warnings; the CTA simulator gives Tile level's O, LSE and gradients (about 25 s)."""
    q, k, v, do = inputs((1, 4, 1, 70, 130))
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rungs taken below Tile level
        for level in ("tile", "target"):
            o, lse = tessera.attention(q, k, v, score_mod=_heavy, mask_mod=keep_rows, return_lse=True, level=level)
            results[level] = (o, lse, *tessera.attention_backward(q, k, v, o, lse, do, score_mod=_heavy,
                                                                  mask_mod=keep_rows, level=level))
    for name, got, want in zip(("O", "LSE", "dQ", "dK", "dV"), results["target"], results["tile"]):
        assert_close(name, got, np.asarray(want, np.float64), 1e-3 if name == "LSE" else 2e-2)


# region what this round fixed: narrow integer arrays

U16 = np.arange(S).astype(np.uint16)                                                # positions in uint16
I8 = ((np.arange(S) % 9) - 4).astype(np.int8)                                       # -4 .. 4
U8 = (np.arange(S) % 7).astype(np.uint8)
TABLE9 = np.linspace(-1.0, 1.0, 9).astype(np.float32)


@pytest.mark.parametrize("hooks, construct", [
    ({"mask_mod": lambda b, h, q_idx, kv_idx: U16[q_idx] - U16[kv_idx] < 40}, "'sub' of uint16 values read from "
     "a captured array, which reaches [-190, 190]"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score - 0.01 * (U16[kv_idx] - U16[3])}, "'sub' of uint16 "
     "values read from a captured array, which reaches [-3, 187]"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + 0.1 * -U8[kv_idx]}, "'neg' of uint8 values"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + 0.01 * (U8[kv_idx] * I8[q_idx] * 10000)}, "'mul' of "
     "int16 values read from a captured array, which reaches [-240000, 240000]"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + 0.01 * U8[kv_idx] ** 4}, "'pow' of uint8 values "
     "read from a captured array, which reaches [0, 1296]"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + 0.01 * (U8[kv_idx] << 6)}, "'lshift' of uint8"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + 0.01 * (np.where(q_idx > kv_idx, U8[kv_idx], 0) - 1)},
     "'sub' of uint8 values read from a captured array, which reaches [-1, 5]"),
    ({"mask_mod": lambda b, h, q_idx, kv_idx: (q_idx - kv_idx).astype(np.int16) < 4}, ".astype(int16) of a value "
     "that may leave int16"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + score.astype(np.int8)}, ".astype(int8) of a value"),
], ids=["positions", "minus-a-read", "negation", "product", "power", "shift", "where", "index-to-int16",
        "score-to-int8"])
def test_narrow_integer_arithmetic_that_wraps_is_refused_by_name(hooks, construct):
    """Was a silently wrong O (3.2 off the reference for uint16 positions, which NumPy subtracts modulo 2^16):
    now refused, naming the dtype and the conversion to write; so is a cast to int8 or int16 of a value that
    may leave it (NumPy wraps it there)."""
    q, k, v = (np.ones((1, 2, S, 64), BF16) for _ in range(3))
    with pytest.raises(ModTraceError, match=r"at .*test_attention_mods_unseen27.py:\d+: cannot trace "
                                            + re.escape(construct)):
        tessera.attention(q, k, v, level="tile", **hooks)


def _astype_window(b, h, q_idx, kv_idx):
    return (U16[q_idx].astype(np.int64) - U16[kv_idx].astype(int) < 40) & (U16[q_idx] - kv_idx >= 0)


def _small_reads(score, b, h, q_idx, kv_idx):
    return score + TABLE9[I8[kv_idx] + 4] + 0.1 * (U8[kv_idx] + 3) * (U8[q_idx] // 2)


def _narrow_casts(score, b, h, q_idx, kv_idx):
    return score + 0.1 * (U8[kv_idx].astype(np.int8) - U8[q_idx].astype(np.int8)) + (q_idx > kv_idx).astype(np.int16)


def _small_functions(score, b, h, q_idx, kv_idx):
    picked = np.where(q_idx > kv_idx, U8[kv_idx], U8[q_idx])
    return score + 0.01 * (U8[kv_idx] ** 2 + (picked & 3) + np.sign(U8[q_idx]) + (U8[kv_idx] << 3))


@pytest.mark.parametrize("score_mod, mask_mod", [(None, _astype_window), (_small_reads, None),
                                                 (_small_functions, None), (_narrow_casts, None)],
                         ids=["converted", "in-range", "functions-in-range", "narrow-casts"])
def test_narrow_integer_arithmetic_that_cannot_wrap_runs(score_mod, mask_mod):
    """A read converted with .astype, a read beside an index grid (int64 in NumPy), and narrow arithmetic whose
    values stay in their type (int8 + 4, uint8 + 3 and // 2, a square, np.where, &, np.sign, << 3, the int8
    difference of two uint8 reads cast to int8, a boolean cast to int16) run, as NumPy computes them."""
    check((1, 2, 1, 40, S), "tile", score_mod, mask_mod)


def test_a_mask_mod_returning_numbers_is_refused_with_its_line():
    """`(q_idx >= kv_idx) * 1` (FlexAttention wants a bool) is refused naming the function's file and line."""
    q, k, v = (np.ones((1, 1, 9, 64), BF16) for _ in range(3))
    with pytest.raises(ModTraceError, match=r"mask_mod '.*<lambda>' at .*test_attention_mods_unseen27.py:\d+: "
                                            "returns a i32 value"):
        tessera.attention(q, k, v, level="tile", mask_mod=lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) * 1)

# endregion
