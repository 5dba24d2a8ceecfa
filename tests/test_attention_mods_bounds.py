"""A modifier reading a captured array past its end (issue 29): refused by name, with its line, the index and the
range it reaches, before any kernel runs (`tessera.variants.index_ranges`), at every entry point; a kernel
launched without the check reads 0 outside a table at every level, never another buffer."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera import reference, reference_attention
from tessera.kernels import attention_backward, flash_attention
from tessera.numerics import BF16
from tessera.variants import ModTraceError, create_block_mask
from tessera.variants.index_ranges import EXACT_EVALUATION_LIMIT, IndexRangeError, check_index_ranges

D = 64
SLOPES = np.array([0.5, 0.25])
TABLE = np.linspace(-1.0, 1.0, 63)
BATCH_HEAD = np.linspace(0.0, 1.0, 2 * 4).reshape(2, 4)  # rows: batch entries, columns: heads
DOC_IDS = np.repeat([0, 1, 2], [10, 10, 10])  # 30 keys' documents


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx)


def relative(score, b, h, q_idx, kv_idx):
    return score + TABLE[q_idx - kv_idx + 31]


def per_batch_head(score, b, h, q_idx, kv_idx):
    return score + BATCH_HEAD[b, h]


def documents(b, h, q_idx, kv_idx):
    return DOC_IDS[q_idx] == DOC_IDS[kv_idx]


def previous_head(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h - 1]


def inputs(batch, heads, seq_q, seq_k, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(x.astype(BF16) for x in reference_attention.attention_operands(rng, seq_q, seq_k, D, batch, heads))


BAD = [  # (mods, launch (batch, heads, seq_q, seq_k), the message's tail)
    (dict(score_mod=alibi), (1, 4, 20, 20), r"reads SLOPES\[h\], which reaches \[0, 3\] for the launch "
                                            r"\(batch 1, heads 4, seq_q 20, seq_k 20\), outside \[0, 2\)"),
    (dict(score_mod=relative), (1, 1, 20, 40), r"reads TABLE\[q_idx - kv_idx \+ 31\], which reaches \[-8, 50\] .*"
                                               r"negative indices are refused"),
    (dict(score_mod=relative), (1, 1, 40, 20), r"reads TABLE\[.*\], which reaches \[12, 70\] .* outside "
                                               r"\[0, 63\) of the array of shape \(63,\)"),
    (dict(mask_mod=documents), (1, 1, 20, 40), r"reads DOC_IDS\[kv_idx\], which reaches \[0, 39\]"),
    (dict(score_mod=per_batch_head), (3, 4, 20, 20), r"reads BATCH_HEAD\[b, h\] \(dimension 0: b\), which reaches "
                                                     r"\[0, 2\] .* of the array of shape \(2, 4\)"),
    (dict(score_mod=previous_head), (1, 2, 20, 20), r"reads SLOPES\[h - 1\], which reaches \[-1, 0\]"),
]


def _located(kind, fn, tail) -> str:
    line = fn.__code__.co_firstlineno + 1
    return rf"{kind} '{fn.__qualname__}' at {re.escape(__file__)}:{line}: {tail}"


@pytest.mark.parametrize("mods, launch, tail", BAD)
def test_a_read_outside_its_array_is_refused_at_every_entry_point(mods, launch, tail):
    (kind, fn), = mods.items()
    message = _located(kind, fn, tail)
    batch, heads, seq_q, seq_k = launch
    q, k, v = inputs(*launch)
    with pytest.raises(IndexRangeError, match=message):
        check_index_ranges(**mods, batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k)
    for level in ("tile", "target", "ptx", None):  # refused before anything is built or launched
        with pytest.raises(IndexRangeError, match=message):
            tessera.attention(q, k, v, **mods, level=level)
    o = np.zeros(q.shape, BF16)
    lse, do = np.zeros(q.shape[:3], np.float32), np.ones(q.shape, BF16)
    with pytest.raises(IndexRangeError, match=message):
        tessera.attention_backward(q, k, v, o, lse, do, **mods, level="tile")
    if kind == "mask_mod":
        with pytest.raises(IndexRangeError, match=message):
            create_block_mask(fn, batch, heads, seq_q, seq_k, 64, 64)
    with pytest.raises(ModTraceError):  # the reference refuses the same read
        reference_attention.attention_mods(q, k, v, **mods)


def clipped(score, b, h, q_idx, kv_idx):
    return score + TABLE[np.clip(q_idx - kv_idx + 31, 0, 62)]


def wrapped_head(score, b, h, q_idx, kv_idx):
    return score - SLOPES[(h - 1) % 2] * np.abs(q_idx - kv_idx)


def last_slope(score, b, h, q_idx, kv_idx):  # a constant index is NumPy's: -1 is the last
    return score - SLOPES[-1] * np.abs(q_idx - kv_idx)


def scrambled(b, h, q_idx, kv_idx):
    return DOC_IDS[(q_idx * 7) % 13] == DOC_IDS[kv_idx % 30]


def t5_bias(score, b, h, q_idx, kv_idx, buckets=16, max_distance=64):  # in range only by exact evaluation
    n = np.abs(kv_idx - q_idx)
    exact = buckets // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 0 takes the exact branch
        log = exact + (np.log(n / exact) / np.log(max_distance / exact) * exact).astype(np.int32)
    return score + BATCH_HEAD[0, np.minimum(np.where(n < exact, n, np.minimum(log, buckets - 1)), 3)] \
        + TABLE[np.where(n < exact, n, np.minimum(log, buckets - 1))]


@pytest.mark.parametrize("mods", [dict(score_mod=clipped, mask_mod=scrambled), dict(score_mod=wrapped_head),
                                  dict(score_mod=t5_bias), dict(score_mod=last_slope)])
def test_reads_proved_in_range_run_and_agree_with_the_reference(mods):
    """np.clip of a relative position, a wrap written as % (the policy for negative indices), `(q * 7) % 13`
    (intervals), T5's buckets (exact evaluation over the seq_q + seq_k - 1 relative positions), a constant
    negative index (NumPy's, in the tracer and the reference alike)."""
    q, k, v = inputs(1, 2, 40, 50)
    o = tessera.attention(q, k, v, **mods, level="tile")
    check = reference.check_attention_mods(o, q, k, v, BF16, mods.get("score_mod"), mods.get("mask_mod"))
    assert check.ok, check


def from_score(score, b, h, q_idx, kv_idx):
    return score + TABLE[(score * 4).astype(int) % 63]


def from_score_clipped(score, b, h, q_idx, kv_idx):
    return score + TABLE[np.clip((score * 4).astype(int), 0, 62)]


def product(b, h, q_idx, kv_idx):
    return TABLE[(q_idx * kv_idx) % 70] > 0


def test_what_cannot_be_proved_is_refused_naming_np_clip():
    """An index from the score is proved only by its bounds (% 63 and np.clip are); a 2-D grid of (q_idx, kv_idx)
    past `EXACT_EVALUATION_LIMIT` positions is not evaluated; below it, it is, exactly."""
    check_index_ranges(score_mod=from_score, batch=1, heads=1, seq_q=8, seq_k=8)
    check_index_ranges(score_mod=from_score_clipped, batch=1, heads=1, seq_q=8, seq_k=8)

    def mod_70(score, b, h, q_idx, kv_idx):
        return score + TABLE[(score * 4).astype(int) % 70]
    with pytest.raises(IndexRangeError, match=r"cannot prove TABLE\[.*\] inside the array of shape \(63,\) .*"
                                              r"computed from the score .*wrap it in np.clip\(\.\.\., 0, 62\)"):
        check_index_ranges(score_mod=mod_70, batch=1, heads=1, seq_q=8, seq_k=8)
    check_index_ranges(mask_mod=product, batch=1, heads=1, seq_q=9, seq_k=7)  # at most 8 * 6 = 48 < 63
    with pytest.raises(IndexRangeError, match=r"reaches \[0, 69\]"):
        check_index_ranges(mask_mod=product, batch=1, heads=1, seq_q=64, seq_k=64)
    side = int(EXACT_EVALUATION_LIMIT ** 0.5) + 1
    with pytest.raises(IndexRangeError, match=rf"its {side * side} positions are more than the "
                                              rf"{EXACT_EVALUATION_LIMIT} Tessera evaluates exactly; wrap it in "
                                              r"np.clip"):
        check_index_ranges(mask_mod=product, batch=1, heads=1, seq_q=side, seq_k=side)


def test_a_launch_of_a_kernel_built_from_modifiers_checks_its_shapes():
    """flash_attention and attention_backward know no shapes: tessera.interpret / tessera.launch prove the reads
    for the inputs' (and refuse on the GPU path before asking for a GPU)."""
    q, k, v = inputs(1, 4, 20, 20)
    arrays = (SLOPES.astype(np.float32),)
    message = _located("score_mod", alibi, r"reads SLOPES\[h\], which reaches \[0, 3\]")
    module = flash_attention(D, score_mod=alibi)
    for run in (lambda: tessera.interpret(module, q, k, v, *arrays),
                lambda: tessera.launch(module, q, k, v, *arrays, level="ptx"),
                lambda: tessera.launch(module, q, k, v, *arrays)):
        with pytest.raises(IndexRangeError, match=r"tessera\.(interpret|launch): " + message):
            run()
    main = attention_backward(D, score_mod=alibi).main
    lse, do = np.zeros((1, 4, 64), np.float32), np.ones(q.shape, BF16)  # LSE2, dPsum: rows padded to 64
    with pytest.raises(IndexRangeError, match=message):
        tessera.interpret(main, q, k, v, do, lse, lse, *arrays)
    tessera.interpret(module, *(x[:, :2] for x in (q, k, v)), *arrays)  # two heads: in bounds


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_a_kernel_launched_unchecked_reads_0_outside_a_table(level):
    """A kernel no builder registered (here a copy of flash_attention(score_mod=)'s module) launched with more
    heads than slopes: the bounds-checked gather reads 0 for heads 2 and 3 (the reference with those slopes 0
    agrees), never a neighbouring input."""
    q, k, v = (x.astype(np.float64) for x in inputs(1, 4, 40, 50, seed=1))
    module = flash_attention(D, score_mod=alibi).clone()
    o = tessera.interpret(module, q, k, v, SLOPES.astype(np.float32), level=level)
    padded = np.array([0.5, 0.25, 0.0, 0.0])

    def zero_past_the_end(score, b, h, q_idx, kv_idx):
        return score - padded[h] * (q_idx - kv_idx)
    check = reference.check_attention_mods(o, q, k, v, BF16, zero_past_the_end, None)
    assert check.ok, check
