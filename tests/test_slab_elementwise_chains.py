"""`slab-elementwise-chains` (issue 29): a score_mod whose chain holds several whole score fragments at once,
emitted 8 registers at a time, fits the warp-specialized 128 x 128 forward at head_dim 64, with the same bits
as the chain emitted op by op; kernels whose chains it does not help keep their PTX byte for byte."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tessera
from tessera import passes
from tessera.kernels import flash_attention

BINS = np.array([-1.0, 0.0, 1.0, 2.0])


def floor_tenths(score, b, h, q_idx, kv_idx):  # float_division's fmod ladder: score, remainder, quotient live
    return score // 0.1


def digitized(score, b, h, q_idx, kv_idx):  # searches' compares: score, count and its conversion live
    return score + np.digitize(score, BINS)


def without_pass(pipeline: str) -> str:
    assert ",slab-elementwise-chains," in pipeline
    return pipeline.replace(",slab-elementwise-chains,", ",")


def inputs(seq_q: int, seq_k: int, d: int = 64):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, 1, seq_q, d)), rng.standard_normal((1, 1, seq_k, d)),
            rng.standard_normal((1, 1, seq_k, d)))


def _warp_specialized(module) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns
        return "sm90.setmaxnreg" in str(tessera.compile(module, target="target"))


def _bits(outputs):
    return [np.asarray(x).view(np.uint16 if np.asarray(x).dtype.itemsize == 2 else np.uint32) for x in outputs]


@pytest.mark.parametrize("level", ["target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_slabs_fit_warp_specialized_with_the_bits_of_the_chain_op_by_op(level):
    """`score // 0.1` takes 292 registers op by op (single-stage); in slabs the consumers' count is about the
    dense kernel's, under their 240: the default pipeline keeps its first rung. Its O and LSE (CTA simulator,
    PTX executor) are those of the single-stage kernel with the chain op by op (`PTX_PIPELINE` without the
    pass) bit for bit, with a partial key block (200 keys)."""
    from tessera.lowering.memo import memoized_lowering

    module = flash_attention(64, block_n=128, score_mod=floor_tenths, return_lse=True)
    q, k, v = inputs(64, 200)
    with memoized_lowering():  # the kernel compiled once for both
        assert _warp_specialized(module)
        slabs = tessera.interpret(module, q, k, v, level=level)
    plain = tessera.interpret(module, q, k, v, level="target", pipeline=without_pass(passes.PTX_PIPELINE))
    for got, expected in zip(_bits(slabs), _bits(plain)):
        np.testing.assert_array_equal(got, expected)


def test_digitized_score_fits_warp_specialized():
    """`np.digitize(score, 4 bins)`: 285 registers op by op (BN 64 in `tessera.attention`), in slabs the
    128 x 128 warp-specialized forward."""
    assert _warp_specialized(flash_attention(64, block_n=128, score_mod=digitized))


@pytest.mark.slow  # four kernels compiled twice, about 12 s
@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(score_mod="softcap"), dict(score_mod="alibi")],
                         ids=["dense", "causal", "softcap", "alibi"])
def test_kernels_it_does_not_help_keep_their_ptx(options):
    slopes = np.array([0.5])
    mods = {"softcap": lambda score, b, h, q_idx, kv_idx: 30.0 * np.tanh(score / 30.0),
            "alibi": lambda score, b, h, q_idx, kv_idx: score + slopes[h] * (kv_idx - q_idx)}
    if "score_mod" in options:
        options = dict(score_mod=mods[options["score_mod"]])
    module = flash_attention(64, block_n=128, **options)
    assert tessera.compile(module, target="ptx") == tessera.compile(
        module, target="ptx", pipeline=without_pass(passes.DEFAULT_PIPELINE))
