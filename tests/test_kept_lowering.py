"""A repeated interpreter-level call of a builder's kernel lowers nothing twice (`tessera.lowering.kept`): the
lowering is taken from what was kept (the pass pipeline runs once, counted by a spy on
`tessera.passes.apply_pipeline`; the kept module is handed to the interpreters as it is, and they change
nothing in it), gives bitwise the output of a call that lowers afresh, warns the fallback's
warning again, and what the lowering reads changing (an option, the element type, a captured array, the shape
class, spilling allowed) lowers again. 64 tokens, at levels "target" and "ptx".

The spy wraps the real pipeline and changes nothing, so these tests do not take `monkeypatch` (which turns
keeping off, tests/conftest.py)."""

from __future__ import annotations

from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest

import tessera
import tessera.passes
from tessera.ir import print_module
from tessera.lowering import kept
from tessera.lowering.fallback import without_spilling
from tessera.runtime.compiler import KernelConfig, built_module

RNG = np.random.default_rng(11)
Q, K, V = (RNG.standard_normal((1, 2, 64, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
TABLE = np.linspace(-1.0, 1.0, 63).reshape(1, 63).repeat(2, axis=0)


def relative(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


@contextmanager
def pipeline_runs():
    """The specs `tessera.passes.apply_pipeline` is called with in the block (a list, filled as they come)."""
    runs, real = [], tessera.passes.apply_pipeline

    def spy(module, spec):
        runs.append(spec)
        return real(module, spec)
    tessera.passes.apply_pipeline = spy
    try:
        yield runs
    finally:
        tessera.passes.apply_pipeline = real


def bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def test_a_repeated_call_lowers_once_and_gives_the_same_bits():
    kept.forget_kept()
    with pipeline_runs() as runs:
        first = tessera.attention(Q, K, V, causal=True, level="target")
        (lowering,) = kept._KEPT.values()
        text = print_module(lowering.module, True)
        again = tessera.attention(Q, K, V, causal=True, level="target")
        assert len(runs) == 1
        ptx = tessera.attention(Q, K, V, causal=True, level="ptx")  # the same lowering, printed once
        assert len(runs) == 1
        with kept.unkept_lowering():
            afresh = tessera.attention(Q, K, V, causal=True, level="target")
        assert len(runs) == 2
    assert np.array_equal(bits(first), bits(again)) and np.array_equal(bits(first), bits(afresh))
    assert np.array_equal(bits(ptx), bits(first))
    assert print_module(lowering.module, True) == text  # the simulator and the PTX printer read it, change nothing


def test_a_kept_lowering_warns_its_fallback_again():
    module = built_module(KernelConfig.of("flash_attention", head_dim=128, block_n=224))  # two stages: no shared memory
    q, k, v = (RNG.standard_normal((1, 1, 64, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    outputs = []
    with pipeline_runs() as runs:
        for _ in range(2):
            with pytest.warns(UserWarning, match="the default pipeline fell back: compiled single-stage"):
                outputs.append(tessera.launch(module, q, k, v, level="target"))
    assert len(runs) <= 1  # none where an earlier test of this process kept it
    assert np.array_equal(bits(outputs[0]), bits(outputs[1]))


def test_what_the_lowering_reads_changing_lowers_again():
    kept.forget_kept()
    a, b = (RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    gemm = built_module(KernelConfig.of("gemm", aligned=None))  # specialized where K and N are multiples of 8
    saved = TABLE.copy()
    try:
        with pipeline_runs() as runs:
            def lowers(call) -> bool:
                before = len(runs)
                call()
                return len(runs) > before

            assert lowers(lambda: tessera.attention(Q, K, V, level="target", score_mod=relative))
            assert not lowers(lambda: tessera.attention(Q, K, V, level="target", score_mod=relative))
            TABLE[1, 5] += 0.5  # a captured array changed in place
            assert lowers(lambda: tessera.attention(Q, K, V, level="target", score_mod=relative))
            f16 = [x.astype(np.float16) for x in (Q, K, V)]
            assert lowers(lambda: tessera.attention(*f16, level="target", score_mod=relative))
            assert lowers(lambda: tessera.launch(gemm, a, b, level="target"))
            assert lowers(lambda: tessera.gemm(a, b, alpha=2.0, level="target"))  # an option
            assert not lowers(lambda: tessera.gemm(a, b, alpha=2.0, level="target"))
            assert not lowers(lambda: tessera.launch(gemm, a[:, :48], b[:48], level="target"))  # K 48: same class
            assert lowers(lambda: tessera.launch(gemm, a[:, :60], b[:60], level="target"))  # K 60: unspecialized
            with without_spilling():
                assert lowers(lambda: tessera.launch(gemm, a, b, level="target"))
    finally:
        TABLE[...] = saved


def test_a_module_no_builder_keeps_is_lowered_every_call():
    module = tessera.kernels.gemm()
    a, b = (RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    with pipeline_runs() as runs:
        tessera.launch(module, a, b, level="target")
        tessera.launch(module, a, b, level="target")
    assert len(runs) == 2


def test_a_refusal_for_registers_is_kept_and_raised_again():
    from tessera.regalloc import RegisterBudgetError

    gemm = built_module(KernelConfig.of("gemm", alpha=3.0))
    a, b = (RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    tight = tessera.passes.TARGET_PIPELINE + ",allocate-registers{budget=16}"
    with pipeline_runs() as runs:
        for _ in range(2):
            with pytest.raises(RegisterBudgetError, match="budget"):
                tessera.launch(gemm, a, b, level="target", pipeline=tight)
    assert len(runs) == 1
