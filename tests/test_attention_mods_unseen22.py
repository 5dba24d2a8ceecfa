"""Attention variants as a FlexAttention user writes them next (issue 29, round 22), against a float64 reference
written here (not `tessera.reference`): O and LSE from the modified scores, dQ, dK, dV from each score_mod's
derivative taken by hand, and the gradients of captured tables summed by `np.add.at`.

The variants: attention sinks OR'd with a sliding window, a per-head dilation under causal, a per-batch prefix-LM
beside a soft-capped ALiBi, causal attention inside each document in the document's own positions (two captured
tables: [B, S] ids and [B, docs] starts), a `np.where` on the distance with a per-head scale and `np.log1p`, a
[H, 2W + 1] relative table at a clipped distance, a stable softplus of the score (`np.maximum`, `np.log1p`,
`np.exp`, `np.minimum`) under block-local attention of a per-head block size, GQA with a window per K/V head,
rows that see no key, a square of the score, a per-head temperature, a [B, H, S] table of visible keys beside a
full [B, H, S, S] bias, a Gaussian of the distance (an integer power), a [K/V heads, S] table, -inf from the
score_mod, `np.exp2` of a floored distance; gradients of six learned tables. Then what this round found:
`np.clip` with a bound None or by keyword and `.clip(min=, max=)` (refused), a captured table's `.shape` /
`len()` (refused), `F.softplus` and `F.logsigmoid` (refused), all three through autograd; and refusals naming the
construct where internals leaked (`ArrayProxy`, `unhashable type: 'Traced'`).

The default run takes Tile level over three shapes (seq_q != seq_k both ways, no multiple of a block, GQA 2:1 and
4:1, batch 2); `-m slow` the target and PTX levels at one shape and the captured gradients in the PTX executor."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tessera
from tessera.numerics import BF16, round_to
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


# region the float64 reference

def _grids(batch, heads, seq_q, seq_k):
    return (np.arange(batch)[:, None, None, None], np.arange(heads)[None, :, None, None],
            np.arange(seq_q)[None, None, :, None], np.arange(seq_k)[None, None, None, :])


def reference(q, k, v, do, score_mod, mask_mod, d_score_mod=None, captured=None):
    """(O, LSE, dQ, dK, dV, {table: gradient}) in float64. `d_score_mod(s, b, h, q_idx, kv_idx)` is
    d score_mod / d score (1 without); `captured[name] = (shape, reads)`, `reads(s, b, h, q_idx, kv_idx)` the
    (index grids, d score_mod / d value) of each read of the table."""
    q, k, v, do = (np.asarray(t, np.float64) for t in (q, k, v, do))
    batch, heads, seq_q, dim = q.shape
    heads_k, seq_k = k.shape[1], k.shape[2]
    ke, ve = (np.repeat(t, heads // heads_k, axis=1) for t in (k, v))
    s = q @ ke.transpose(0, 1, 3, 2) / np.sqrt(dim)
    grid = _grids(batch, heads, seq_q, seq_k)
    modified = s if score_mod is None else np.broadcast_to(score_mod(s, *grid), s.shape).astype(np.float64)
    visible = np.ones(s.shape, bool) if mask_mod is None else np.broadcast_to(mask_mod(*grid), s.shape)
    modified = np.where(visible, modified, -np.inf)
    top = modified.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(modified - top)
    total = e.sum(-1, keepdims=True)
    seen = total > 0
    p = np.where(seen, e / np.where(seen, total, 1.0), 0.0)
    lse = np.where(seen[..., 0], top[..., 0] + np.log(np.where(seen, total, 1.0))[..., 0], -np.inf)
    o = p @ ve
    ds_mod = p * (do @ ve.transpose(0, 1, 3, 2) - (do * o).sum(-1, keepdims=True))
    ds = ds_mod if d_score_mod is None else ds_mod * np.broadcast_to(d_score_mod(s, *grid), s.shape)
    ds = np.where(p > 0, ds, 0.0)
    group = (batch, heads_k, heads // heads_k, seq_k, dim)
    dq = ds @ ke / np.sqrt(dim)
    dk = (ds.transpose(0, 1, 3, 2) @ q / np.sqrt(dim)).reshape(group).sum(2)
    dv = (p.transpose(0, 1, 3, 2) @ do).reshape(group).sum(2)
    grads = {}
    for name, (shape, reads) in (captured or {}).items():
        grads[name] = np.zeros(shape)
        for index, d in reads(s, *grid):
            np.add.at(grads[name], tuple(np.broadcast_to(i, s.shape) for i in index),
                      np.where(p > 0, ds_mod * np.broadcast_to(d, s.shape), 0.0))
    return o, lse, dq, dk, dv, grads


def assert_close(name, got, want, relative=2e-2, absolute=2e-3):
    """Within `relative` of the largest finite entry plus `absolute`; the same entries infinite (LSE's -inf)."""
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=name)
    error = np.abs(got[finite] - want[finite]).max(initial=0.0)
    tolerance = relative * np.abs(want[finite]).max(initial=0.0) + absolute
    assert error <= tolerance, f"{name}: error {error:.3g} over {tolerance:.3g}"


def inputs(shape, seed=1, head_dim=64):
    batch, heads, heads_k, seq_q, seq_k = shape
    rng = np.random.default_rng(seed)
    q, do = (round_to(rng.standard_normal((batch, heads, seq_q, head_dim)), BF16) for _ in range(2))
    k, v = (round_to(rng.standard_normal((batch, heads_k, seq_k, head_dim)), BF16) for _ in range(2))
    return q, k, v, do


def check(shape, level, score_mod, mask_mod, d_score_mod=None, captured=None, reference_mods=None):
    """Forward and backward at `level` against `reference` (of `reference_mods` where the hooks are torch)."""
    q, k, v, do = inputs(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rung taken below Tile level
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level=level)
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level=level,
                                           captured_grads=bool(captured))
    want = reference(q, k, v, do, *(reference_mods or (score_mod, mask_mod)), d_score_mod, captured)
    for name, got, expected in zip(("O", "dQ", "dK", "dV"), (o, *grads[:3]), (want[0], *want[2:5])):
        assert_close(name, got, expected)
    assert_close("LSE", lse, want[1], 1e-3, 1e-2)
    for name in captured or {}:
        assert_close(f"d {name}", grads[3][name], want[5][name])

# endregion


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


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_at_tile_level(name, shape):
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
    return np.clip(score, a_min=-1.0, a_max=None) + REL2[h, np.clip(kv_idx - q_idx + W, min=0, max=2 * W)]


def clip_methods(score, b, h, q_idx, kv_idx):
    return score.clip(max=1.0) + REL2[h, (kv_idx - q_idx + W).clip(min=0).clip(None, 2 * W)]


@pytest.mark.parametrize("score_mod", [clip_none, clip_keywords, clip_methods])
def test_clip_with_one_bound_or_by_keyword(score_mod):
    """np.clip with a bound None, NumPy's a_min= / a_max= and NumPy 2's min= / max=, and the method's
    `.clip(min=, max=)`, as NumPy computes them (each was refused: an operand of type NoneType, np.clip, an
    unexpected keyword); the one-sided index clip is proved in bounds."""
    def d_clip(s, b, h, q_idx, kv_idx):
        return np.where(s < (-1.0 if score_mod is clip_keywords else -np.inf), 0.0,
                        np.where(s > (np.inf if score_mod is clip_keywords else 1.0), 0.0, 1.0))
    check((1, H, HK, 70, 90), "tile", score_mod, None, d_clip)


def length_sized(score, b, h, q_idx, kv_idx):
    """A table sized by its own shape: `len(table)`, `.shape[-1]`, `.size`, `.ndim`."""
    last = REL2.shape[-1] - 1
    return (score + REL2[h, np.clip(kv_idx - q_idx + W, 0, last)] + 0.01 * REL2.ndim
            + KEY_BIAS[b, np.minimum(kv_idx, KEY_BIAS.shape[1] - 1)]
            - 0.1 * SLOPES[h % len(SLOPES)] + 0.001 * (kv_idx % SLOPES.size))


def test_a_captured_arrays_shape_sizes_its_index():
    """A captured array's shape and type (`.shape`, `len()`, `.ndim`, `.size`, `.dtype`) are known when traced
    and part of what a trace is kept by: they were refused (`the attribute .shape of the captured array`)."""
    check((2, H, HK, 60, 80), "tile", length_sized, None)
    trace_mod(lambda s, b, h, q_idx, kv_idx: s + SLOPES[h].astype(SLOPES.dtype), "score_mod")


def test_a_captured_tensors_shape_sizes_its_index():
    torch = pytest.importorskip("torch")
    table = torch.tensor(REL2)

    def sized(score, b, h, q_idx, kv_idx):
        d = torch.clamp(kv_idx - q_idx + W, 0, table.shape[1] - 1)
        return score + table[h % len(table), torch.clamp(d, max=table.size(1) - 1)] + 0 * (table.numel() + table.dim())

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return score + REL2[h, np.clip(kv_idx - q_idx + W, 0, 2 * W)]
    check((1, H, HK, 60, 80), "tile", sized, None, reference_mods=(numpy_twin, None))


def test_softplus_and_logsigmoid():
    """`F.softplus(x, beta, threshold)` (torch's form: x past the threshold) and `F.logsigmoid` are traced (they
    were refused by name), against NumPy's logaddexp."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional

    def softplus(score, b, h, q_idx, kv_idx):
        return functional.softplus(score, beta=2.0, threshold=3.0) + functional.logsigmoid(score - 0.1 * kv_idx)

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return np.where(2 * score > 3, score, np.logaddexp(0, 2 * score) / 2) - np.logaddexp(0, 0.1 * kv_idx - score)

    def d_twin(s, b, h, q_idx, kv_idx):
        return np.where(2 * s > 3, 1.0, 1 / (1 + np.exp(-2 * s))) + 1 / (1 + np.exp(s - 0.1 * kv_idx))
    check((1, H, HK, 60, 80), "tile", softplus, None, d_twin, reference_mods=(numpy_twin, None))


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


def test_autograd_through_softplus_of_a_learned_slope_and_a_table_sized_by_len():
    """`tessera.runtime.autograd.attention` with GQA, a bottom-right causal mask with sinks, and a score_mod that
    takes F.softplus of a learned per-head slope and reads a learned table clamped by `len(rel)`: the gradients
    of q, k, v and both parameters against torch's autograd through an eager float64 attention."""
    torch = pytest.importorskip("torch")
    import tessera.runtime.autograd

    functional = torch.nn.functional
    seq_q, seq_k = 70, 90
    gen = torch.Generator().manual_seed(22)
    q = torch.randn(1, H, seq_q, 64, generator=gen).bfloat16().requires_grad_()
    k, v = (torch.randn(1, HK, seq_k, 64, generator=gen).bfloat16().requires_grad_() for _ in range(2))
    slope = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.0]))
    rel = torch.nn.Parameter(torch.randn(2 * W + 1, generator=gen) * 0.3)
    do = torch.randn(1, H, seq_q, 64, generator=gen)

    def biases(slopes, table, h, q_idx, kv_idx):
        d = torch.clamp(kv_idx - q_idx + W, 0, len(table) - 1)
        return table[d] - functional.softplus(slopes[h]) * 0.05 * (q_idx - kv_idx).abs()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + biases(slope, rel, h, q_idx, kv_idx)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx + (seq_k - seq_q) >= kv_idx) | (kv_idx < 4)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = tessera.runtime.autograd.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, level="tile")
    (o.float() * do).sum().backward()
    wanted = [x.detach().double().requires_grad_() for x in (q, k, v, slope, rel)]
    q64, k64, v64, slope64, rel64 = wanted
    grid = [torch.from_numpy(np.ascontiguousarray(np.broadcast_to(g, (1, H, seq_q, seq_k))))
            for g in _grids(1, H, seq_q, seq_k)]
    s = q64 @ k64.repeat_interleave(H // HK, 1).transpose(-1, -2) / 8 + biases(slope64, rel64, *grid[1:])
    s = s.masked_fill(~mask_mod(*grid), float("-inf"))
    (torch.softmax(s, -1) @ v64.repeat_interleave(H // HK, 1) * do.double()).sum().backward()
    for name, got, want in zip(("dQ", "dK", "dV", "d slope", "d rel"), (q, k, v, slope, rel), wanted):
        assert_close(name, got.grad.double().numpy(), want.grad.numpy())


def test_a_custom_op_is_traced_as_its_python_definition():
    """attention-gym's soft-cap with `approx=True` calls an operator made with `torch.library.custom_op` (was
    refused as 'torch.tanh.default'): traced as the function it was defined from, which the reference runs; an
    operator with no Python definition is refused by its `torch.ops` name."""
    torch = pytest.importorskip("torch")

    @torch.library.custom_op("tessera_unseen22::tanh_approx", mutates_args=(), schema="(Tensor x) -> Tensor")
    def tanh_approx(x):
        return torch.tanh(x)

    def generate_tanh_softcap(soft_cap, approx=False):
        tanh = tanh_approx if approx else torch.tanh

        def tanh_softcap(score, b, h, q_idx, kv_idx):
            return soft_cap * tanh(score / soft_cap)
        return tanh_softcap

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return 5 * np.tanh(score / 5)
    check((1, H, HK, 60, 80), "tile", generate_tanh_softcap(5, approx=True), sinks_window,
          lambda s, b, h, q_idx, kv_idx: 1 - np.tanh(s / 5) ** 2, reference_mods=(numpy_twin, sinks_window))
    with pytest.raises(ModTraceError, match=r"torch.ops.aten.tanh \(an operator with no Python definition"):
        trace_mod(lambda score, b, h, q_idx, kv_idx: torch.ops.aten.tanh.default(score), "score_mod")


def test_attention_gym_generators_with_torch_functions_passed_in():
    """attention-gym's generators as written there: `generate_activation_score_mod(activation=F.relu)` calls the
    torch function it closes over (was refused as 'torch.relu': the rebinding copied F.relu as a user's helper,
    so the tracer no longer knew it), the block diffusion mask and `batchify_mask_mod(causal_mask, 16)`."""
    torch = pytest.importorskip("torch")

    def generate_activation_score_mod(activation, offset=1.0):
        def activation_score_mod(score, b, h, q_idx, kv_idx):
            return torch.log(activation(score) + offset)
        return activation_score_mod

    def generate_block_diffusion_mask(seq_len, block_size):
        def block_diffusion_mask(b, h, q_idx, kv_idx):
            q_noised, kv_noised = q_idx < seq_len, kv_idx < seq_len
            q_block, kv_block = (q_idx % seq_len) // block_size, (kv_idx % seq_len) // block_size
            block_diagonal = (q_block == kv_block) & (q_noised == kv_noised)
            offset_block_causal = (q_block > kv_block) & q_noised & ~kv_noised
            return block_diagonal | offset_block_causal | ((q_block >= kv_block) & ~q_noised & ~kv_noised)
        return block_diffusion_mask

    def batchify_mask_mod(mask_mod, size):
        def batched_mask_mod(b, h, q_idx, kv_idx):
            return (q_idx // size == kv_idx // size) & mask_mod(b, h, q_idx % size, kv_idx % size)
        return batched_mask_mod

    def d_relu_log(s, b, h, q_idx, kv_idx):
        return np.where(s > 0, 1 / (s + 1), 0.0)

    relu_twin = (lambda score, b, h, q_idx, kv_idx: np.log(np.maximum(score, 0) + 1.0))
    mask = generate_block_diffusion_mask(45, 8)
    check((1, H, HK, 90, 90), "tile", generate_activation_score_mod(torch.nn.functional.relu), mask, d_relu_log,
          reference_mods=(relu_twin, mask))
    check((1, H, HK, 90, 90), "tile", None, batchify_mask_mod(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 16))


def test_gelu_silu_and_erf():
    """`F.gelu` (exact, through erf to 1.2e-7, and approximate="tanh"), `F.silu`, `torch.erf`, `torch.special.erf`
    and `.erf()` (all refused by name before; attention-gym's activation score_mod takes F.gelu by default),
    against math.erf in float64 with the derivative by hand."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    import math

    def activations(score, b, h, q_idx, kv_idx):
        return (score + 0.5 * functional.gelu(score) + 0.25 * functional.gelu(score, approximate="tanh")
                + 0.25 * functional.silu(score) + 0.05 * (torch.erf(score) + torch.special.erf(score) + score.erf()))

    erf = np.vectorize(math.erf)
    c = math.sqrt(2 / math.pi)

    def twin(score, b, h, q_idx, kv_idx):
        gelu_tanh = 0.5 * score * (1 + np.tanh(c * (score + 0.044715 * score ** 3)))
        return (score + 0.25 * score * (1 + erf(score / math.sqrt(2))) + 0.25 * gelu_tanh
                + 0.25 * score / (1 + np.exp(-score)) + 0.15 * erf(score))

    def d_twin(s, b, h, q_idx, kv_idx):
        phi, sigmoid, u = np.exp(-s * s / 2) / math.sqrt(2 * math.pi), 1 / (1 + np.exp(-s)), c * (s + 0.044715 * s ** 3)
        d_gelu_tanh = 0.5 * (1 + np.tanh(u)) + 0.5 * s * (1 - np.tanh(u) ** 2) * c * (1 + 3 * 0.044715 * s * s)
        return (1 + 0.5 * (0.5 * (1 + erf(s / math.sqrt(2))) + s * phi) + 0.25 * d_gelu_tanh
                + 0.25 * sigmoid * (1 + s * (1 - sigmoid)) + 0.15 * 2 / math.sqrt(math.pi) * np.exp(-s * s))
    check((1, H, HK, 60, 80), "tile", activations, sinks_window, d_twin, reference_mods=(twin, sinks_window))


@pytest.mark.parametrize("name", ["jetspec-tree", "jetspec-training", "shared-prefix", "sandwich"])
def test_attention_gym_masks_and_biases_in_torch(name):
    """attention-gym's JetSpec tree-causal mask (a [nodes, nodes] bool tensor at q_idx and a `.clamp`ed key) and
    training mask (`//` and `%` of negative differences), its shared-prefix mask (offsets read at document ids
    read at positions, three gathers deep) and its Sandwich bias (a cosine table summed in torch, outside the
    modifier), each against a NumPy twin."""
    torch = pytest.importorskip("torch")
    if name == "jetspec-tree":
        parents = [-1] + [(i - 1) // 2 for i in range(1, 63)]
        ancestor = np.eye(63, dtype=bool)
        for node, parent in enumerate(parents[1:], start=1):
            ancestor[node] |= ancestor[parent]
        tensor = torch.from_numpy(ancestor)

        def tree(table, clamp):
            def mask_mod(b, h, q_idx, kv_idx):
                node = clamp(kv_idx - 37)
                return (kv_idx < 37) | ((kv_idx >= 37) & (kv_idx < 100) & table[q_idx, node])
            return mask_mod
        mods = (None, tree(tensor, lambda x: x.clamp(min=0, max=62)))
        twins, shape = (None, tree(ancestor, lambda x: np.clip(x, 0, 62))), (1, H, HK, 63, 100)
    elif name == "jetspec-training":
        def mask_mod(b, h, q_idx, kv_idx):
            kv_block_idx = kv_idx - 37
            same = (kv_idx >= 37) & (q_idx // 8 == kv_block_idx // 8) & (kv_block_idx % 8 <= q_idx % 8)
            return (kv_idx < 37) | same
        mods = twins = (None, mask_mod)
        shape = (1, H, HK, 64, 101)
    elif name == "shared-prefix":
        offsets = np.array([0, 10, 25, 31, 50, 70, 71, 90])
        prefix_of = np.array([0, 0, 0, 3, 3, 3, 6])
        documents = np.repeat(np.arange(7), np.diff(offsets))

        def shared_prefix(offsets, prefix_of, documents):
            def mask_mod(b, h, q_idx, kv_idx):
                doc = documents[q_idx]
                prefix = prefix_of[doc]
                own = (kv_idx >= offsets[doc]) & (q_idx >= kv_idx)
                return own | ((doc != prefix) & (kv_idx >= offsets[prefix]) & (kv_idx < offsets[prefix + 1]))
            return mask_mod
        mods = (None, shared_prefix(*(torch.from_numpy(a) for a in (offsets, prefix_of, documents))))
        twins, shape = (None, shared_prefix(offsets, prefix_of, documents)), (1, H, HK, 90, 90)
    else:
        freqs = 1.0 / 10000 ** (2 * torch.arange(64, dtype=torch.float32) / 128)
        distances = torch.arange(-(-399 // 8) * 8, dtype=torch.float32) - 199
        rel_bias = torch.cos(distances.abs()[:, None] * freqs).sum(dim=-1)
        head_scale = H / (8.0 * torch.arange(1, H + 1, dtype=torch.float32))

        def sandwich(rel_bias, head_scale):
            def score_mod(score, b, h, q_idx, kv_idx):
                return score + rel_bias[q_idx - kv_idx + 199] * head_scale[h]
            return score_mod
        mods = (sandwich(rel_bias, head_scale), None)
        twins, shape = (sandwich(rel_bias.double().numpy(), head_scale.double().numpy()), None), (1, H, HK, 90, 150)
    check(shape, "tile", *mods, reference_mods=twins)
