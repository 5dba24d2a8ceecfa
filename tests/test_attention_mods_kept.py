"""`tessera.attention` with score_mod / mask_mod keeps what it traced and built (`trace.trace_mod`'s traces,
`runtime.flex`'s kernels, keyed by `tessera.variants.fingerprint`): a repeated call traces nothing, and what a
modifier reads changing between calls (an array changed in place, a closure cell rebound, a global reassigned)
is never served stale: the result is bitwise the one a call with nothing kept gives. At Tile level, 64 tokens."""

from __future__ import annotations

import types

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.runtime import flex
from tessera.variants import trace
from tessera.variants.fingerprint import fingerprint

RNG = np.random.default_rng(7)
Q, K, V = (RNG.standard_normal((1, 2, 64, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
TABLE = np.linspace(-2.0, 2.0, 63).reshape(1, 63).repeat(2, axis=0)
WEIGHTS = np.array([0.5, 3.0])
WINDOW = 16
DOCS = np.repeat([0, 1, 2], [20, 24, 20])


def relative(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def weighted(score, b, h, q_idx, kv_idx):  # WEIGHTS[0] read with a constant index: a constant of the kernel
    return score * WEIGHTS[0]


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def documents(b, h, q_idx, kv_idx):
    return DOCS[q_idx] == DOCS[kv_idx]


def attend(score_mod=None, mask_mod=None):
    return np.asarray(tessera.attention(Q, K, V, level="tile", score_mod=score_mod, mask_mod=mask_mod), np.float32)


def fresh(score_mod=None, mask_mod=None):
    """The result with nothing kept."""
    trace._TRACES.clear()
    flex._BUILT.clear()
    return attend(score_mod, mask_mod)


@pytest.fixture
def traces(monkeypatch):
    """The traces made (`trace._trace` calls), by kind."""
    made = []
    real = trace._trace

    def counted(fn, kind):
        made.append(kind)
        return real(fn, kind)
    monkeypatch.setattr(trace, "_trace", counted)
    trace._TRACES.clear()
    flex._BUILT.clear()
    return made


def test_a_repeated_call_traces_and_builds_nothing(traces, monkeypatch):
    first = attend(relative, window)
    assert sorted(set(traces)) == ["mask_mod", "score_mod"]
    traces.clear()
    import tessera.kernels

    monkeypatch.setattr(tessera.kernels, "flash_attention", None)  # a build would fail
    monkeypatch.setattr(flex, "create_block_mask", None)  # so would evaluating the block mask
    assert np.array_equal(attend(relative, window), first)
    assert traces == []
    check = reference.check_attention_mods(first, Q, K, V, BF16, relative, window)
    assert check.ok, check


def test_an_array_changed_in_place_is_read_anew(traces):
    saved = TABLE.copy(), WEIGHTS.copy(), DOCS.copy()
    try:
        before = attend(relative), attend(weighted), attend(mask_mod=documents)
        TABLE[:] = TABLE[:, ::-1]  # a gathered table: a kernel input
        WEIGHTS[0] = -1.5  # a constant index: a constant in the kernel
        DOCS[:] = np.repeat([0, 1], [40, 24])  # a mask's array: the block mask too
        after = attend(relative), attend(weighted), attend(mask_mod=documents)
        for old, new, (score_mod, mask_mod) in zip(before, after, ((relative, None), (weighted, None),
                                                                   (None, documents))):
            assert not np.array_equal(old, new)
            assert np.array_equal(new, fresh(score_mod, mask_mod))
    finally:
        TABLE[:], WEIGHTS[:], DOCS[:] = saved


def test_a_rebound_closure_cell_is_traced_anew(traces):
    cap = 2.0

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * np.tanh(score / cap)

    before = attend(softcap)
    cap = 0.5
    after = attend(softcap)
    assert not np.array_equal(before, after)
    assert np.array_equal(after, fresh(softcap))


def test_a_reassigned_global_is_traced_anew(traces):
    global WINDOW
    before = attend(mask_mod=window)
    try:
        WINDOW = 4
        after = attend(mask_mod=window)
    finally:
        WINDOW = 16
    assert not np.array_equal(before, after)
    WINDOW = 4
    try:
        assert np.array_equal(after, fresh(mask_mod=window))
    finally:
        WINDOW = 16


def test_what_cannot_be_keyed_is_traced_on_every_call(traces):
    """An object of the user's (its attributes may change unseen) has no fingerprint: traced each call."""
    config = types.SimpleNamespace(window=16)

    def configured(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < config.window)

    assert fingerprint(configured) is None
    before = attend(mask_mod=configured)
    config.window = 4
    after = attend(mask_mod=configured)
    assert not np.array_equal(before, after)
    assert traces.count("mask_mod") >= 2  # each call traces (several times)
    assert np.array_equal(after, fresh(mask_mod=configured))


def test_fingerprints_tell_apart_what_the_trace_depends_on():
    a, b = np.arange(4), np.arange(4)

    def make(x, y):
        return lambda score, b_, h, q_idx, kv_idx: score + x[h] + y[h]
    assert fingerprint(make(a, b)) == fingerprint(make(a, b))  # a new function object reading the same
    assert fingerprint(make(a, b)) != fingerprint(make(a.copy(), b))  # the trace holds the array it read
    assert fingerprint(make(a, a)) != fingerprint(make(a, b))  # one kernel input, not two
    assert fingerprint(make(a, b.astype(np.int16))) != fingerprint(make(a, b))

    def plus(c):
        return lambda score, b_, h, q_idx, kv_idx: score + c
    assert fingerprint(plus(0.0)) == fingerprint(plus(0.0))
    assert fingerprint(plus(0.0)) != fingerprint(plus(-0.0))  # two constants of the kernel


def test_a_librarys_closure_is_keyed_by_what_it_closes_over():
    """A composition made by a library (torch's and_masks returns a closure of torch's module) calls the user's
    masks through its cells: a global one of them reads, reassigned, changes the key."""
    def and_masks(*masks):
        def combined(b, h, q_idx, kv_idx):
            return masks[0](b, h, q_idx, kv_idx) & masks[1](b, h, q_idx, kv_idx)
        combined.__module__ = "torch.nn.attention.flex_attention"  # as torch's own
        return combined

    global WINDOW
    composed = and_masks(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, window)
    before = fingerprint(composed)
    assert before is not None
    WINDOW = 4
    try:
        assert fingerprint(composed) != before
    finally:
        WINDOW = 16


def test_a_repeated_backward_with_modifiers_neither_lowers_nor_prints_its_kernels_again(monkeypatch):
    """`tessera.attention_backward` with modifiers asks, on every call below Tile level, whether the main kernels
    of `flex.WARP_SPECIALIZED_FIRST` lower warp-specialized (`flex.warp_specialized_refusal`); the answer is
    remembered by the key the kept kernels were built under, so that a repeated call lowers nothing and prints no
    module (the first prints it: its text is a key too, for a kept module built again for new array contents,
    tests/test_captured_gradients_gpu_path.py). The pipeline is a stub here: what is counted is how often it runs
    and how often a module is printed."""
    from xdsl.printer import Printer

    import tessera.passes

    lowered, printed = [], []

    class Lowering:
        def apply(self, ctx, module):
            lowered.append(module)

    real_print = Printer.print_op

    def print_op(self, op, *args, **kwargs):
        if op.name == "builtin.module":
            printed.append(op)
        return real_print(self, op, *args, **kwargs)
    monkeypatch.setattr(tessera.passes, "parse_pipeline", lambda spec: Lowering())
    monkeypatch.setattr(Printer, "print_op", print_op)
    monkeypatch.setattr(flex, "_FITS", {})
    options = dict(score_mod=relative, mask_mod=None, causal=False, scale=None, level="target", head_dim=64,
                   dtype="bf16")
    kernels, sparse = flex.backward_kernels(None, **options)
    first = flex.warp_specialized_first(None, kernels, sparse, **options)
    assert (len(lowered), len(printed), first[2:]) == (1, 1, ([], "with 128 x 128 blocks"))
    again = flex.warp_specialized_first(None, kernels, sparse, **options)
    assert (len(lowered), len(printed), again[0]) == (1, 1, first[0])
    unkept = first[0].main.clone()
    assert flex.warp_specialized_refusal(unkept) is None and flex.warp_specialized_refusal(unkept) is None
    assert (len(lowered), len(printed)) == (1, 3)  # by its text (the kept one's): printed on each call, not lowered

