"""Gradients of captured tensors with the backward's head split (`attention_backward(head_split=2)`): both thread
blocks of a key block compute the whole S and dP (only dK, dV and dQ are split over head_dim), so both hold the
whole dS_mod; only the one at head_dim column 0 scatters it (the other's indices are raised past the array,
`attention_backward_frame.split_scatter_index`), so each score's gradient is added once. At head_dim 128 this is
the kernel that fits warp-specialized where one thread block per key block spills (docs/variant-gradients.md).

The default suite (about 3 s of CPU) checks the Tile level against float64 autograd and bit for bit against the
unsplit kernel, and that the builder's default at head_dim 128 is the split and lowers warp-specialized; `-m slow`
the levels "target" and "ptx" through `tessera.attention_backward` (the runtime's choice: the split, no spill), the
GPU path through the fake driver (bit for bit level "ptx"'s), every ptxas found (no warning, no spill), and at
head_dim 64 the rebuild with the split of a kernel that would spill (`flex.HEAD_SPLIT_FALLBACK`).
Skipped without torch."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera  # noqa: E402
from tessera.kernels import attention_backward  # noqa: E402
from tessera.runtime import flex  # noqa: E402
from captured_grads_checks import assert_assembles_under_every_ptxas, assert_captured_grads  # noqa: E402
from test_attention_mods_grad import _inputs, _rel_slopes_causal, _tanh  # noqa: E402
from test_captured_gradients_gpu_path import (  # noqa: E402,F401 - the fixtures the GPU path's test uses
    _assert_bitwise_and_accurate,
    _gpu_and_ptx,
    fake_gpu,
    private_cache,
    rel_alibi,
    scale_bias,
)

NAMES = ("score_mod_slopes", "score_mod_table")
"""The kernel inputs of `_rel_slopes_causal`'s two tensors (ALiBi slopes, a per-head table read twice)."""


def _case(seq_q=17, seq_k=30, seed=4):
    """ALiBi slopes and a per-head table read twice under a causal mask_mod, GQA 2:1, at head_dim 128: the
    inputs, the forward's O and LSE, the modifiers and the tables."""
    tables, make = _rel_slopes_causal(seq_q, seq_k)
    arrays = {n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(seed)).items()}
    score_mod, mask_mod = make(arrays)
    q, k, v, do, _ = _inputs(1, 2, 1, seq_q, seq_k, head_dim=128, seed=seed)
    with np.errstate(invalid="ignore"):
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    return (q, k, v, do, o, lse), (score_mod, mask_mod), make, arrays


def test_the_head_split_adds_each_scores_gradient_once():
    """At Tile level the head-split kernel's gradients are within the float64 tolerance and bit for bit those of
    one thread block per key block (the interpreter adds block after block; the second split's scatters are all
    dropped, so the same additions land in the same order); so are dQ, dK and dV."""
    (q, k, v, do, o, lse), (score_mod, mask_mod), make, arrays = _case()
    options = dict(score_mod=score_mod, mask_mod=mask_mod, level="tile", deterministic=False, captured_grads=NAMES)
    results = {}
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        for split in (1, 2):
            kernels, sparse = flex.backward_kernels(q, causal=False, scale=None, head_dim=128, dtype="bf16",
                                                    blocks=(64, 64), head_split=split, **options)
            assert kernels.head_split == split
            results[split] = flex._backward(kernels, sparse, q, k, v, o, lse, do, **options)
    *grads, captured = results[2]
    assert_captured_grads(dict(zip(("slopes", "table"), captured)), q, k, v, do, o, make, arrays)
    for got, expected in zip(results[2][:3] + tuple(captured), results[1][:3] + tuple(results[1][3])):
        assert np.array_equal(np.asarray(got, np.float32), np.asarray(expected, np.float32))


def test_the_builders_default_at_head_dim_128_is_the_head_split_and_fits_warp_specialized():
    """`attention_backward(128, score_mod=..., captured_grads=...)` builds head_split=2 (it was refused with
    captured gradients), whose second split's scatters are raised past the arrays (one `tile.element_max` per
    scatter), and whose main kernel lowers warp-specialized (one thread block per key block needs 312 registers a
    consumer thread of 256)."""
    _, (score_mod, mask_mod), _, _ = _case()
    kernels = attention_backward(128, score_mod=score_mod, mask_mod=mask_mod, block_sparse=True, captured_grads=NAMES)
    assert kernels.head_split == 2
    scatters = [line for line in str(kernels.main).splitlines() if "tile.scatter_add" in line]
    raised = re.findall(r"(%scatter_index(?:_\d+)?) = tile.element_max", str(kernels.main))
    assert len(scatters) == len(raised) == 6  # two loops (full and partial pairs), three reads each
    assert all(name + "]" in line or name + "," in line for name, line in zip(raised, scatters))
    assert flex.warp_specialized_refusal(kernels.main) is None


# region -m slow


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_below_tile_level_the_runtime_takes_the_head_split(level):
    """`tessera.attention_backward(..., level=)` at head_dim 128 builds the head split (its warning names it, after
    the two shapes it tried) and lowers it with no fallback warning; the gradients are within the float64
    tolerance, and dQ, dK, dV those of level "tile" bit for bit. (The CTA simulator and the PTX executor add the
    scatters' atomics in different orders: their captured gradients differ in the last bits, as before the split.)"""
    (q, k, v, do, o, lse), (score_mod, mask_mod), make, arrays = _case(seed=9)
    with warnings.catch_warnings(record=True) as caught, np.errstate(invalid="ignore"):
        warnings.simplefilter("always")
        *grads, captured = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                                      level=level, captured_grads=True)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and messages[0].endswith("built with head_split=2"), messages
    assert_captured_grads(captured, q, k, v, do, o, make, arrays)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        at_tile = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                             level="tile", captured_grads=True)
    for got, expected in zip(grads, at_tile[:3]):
        assert np.array_equal(np.asarray(got, np.float32), np.asarray(expected, np.float32))


@pytest.mark.slow
def test_the_gpu_path_launches_the_head_split(fake_gpu):
    """Through the fake driver (the PTX the runtime loads, run in the PTX executor): a relative table and ALiBi
    slopes under a causal mask_mod, GQA 4:2, at head_dim 128, launch the head-split main kernel, and its gradients
    are level "ptx"'s bit for bit and within the float64 tolerance."""
    api, _ = fake_gpu
    on_gpu, at_ptx, checked = _gpu_and_ptx(rel_alibi(40, 40, heads=4), (1, 4, 2, 40, 40), 128, seed=5)
    assert [launch.function for launch in api.launches if "head_split2" in str(launch.function)]
    _assert_bitwise_and_accurate(on_gpu, at_ptx, checked)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["rel_alibi", "scale_bias", "slopes_table_twice"])
def test_the_head_split_main_kernel_assembles_without_spilling_under_every_ptxas(case):
    """The main kernel the runtime takes at head_dim 128 with captured gradients (the head split, after the
    keys-on-rows 64 x 128 and the unsplit 64 x 64 kernels are refused) compiles with no fallback warning, has one
    red.global.add.f32 per register of each scatter in the first split's code, and every ptxas found (12.9, 13.0,
    13.5) assembles it without a warning or a spill."""
    if case == "rel_alibi":
        (tables, make), names, causal = rel_alibi(40, 40, heads=4), ("score_mod_rel", "score_mod_slopes"), False
    elif case == "scale_bias":
        (tables, make), names, causal = scale_bias(2, 2, 30, 70), ("score_mod_scale", "score_mod_bias"), True
    else:
        (tables, make), names, causal = _rel_slopes_causal(17, 30), NAMES, False
    score_mod, mask_mod = make({n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(0)).items()})
    options = dict(score_mod=score_mod, mask_mod=None if causal else mask_mod, causal=causal, scale=None, level=None,
                   head_dim=128, dtype="bf16", captured_grads=names)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels, sparse = flex.backward_kernels(None, **options)
        kernels, _, refused, taken = flex.warp_specialized_first(None, kernels, sparse, **options)
        ptx = tessera.compile(kernels.main, target="ptx")
    assert taken == "with head_split=2" and kernels.head_split == 2 and len(refused) == 2
    assert not caught, [str(w.message) for w in caught]
    assert ptx.count("red.global.add.f32") % (64 * 64 // 128) == 0 and ptx.count("red.global.add.f32") > 0
    assert_assembles_under_every_ptxas(ptx)


@pytest.mark.slow
def test_at_head_dim_64_a_kernel_that_would_spill_is_rebuilt_with_the_head_split():
    """A soft-capped, per-head-scaled score times a full bias, plus a relative table and ALiBi slopes under a causal
    mask_mod, at head_dim 64, needs 379 registers a thread single-stage: the backward is rebuilt with the head split
    (`flex.HEAD_SPLIT_FALLBACK`, as without captured gradients; it was excluded while the split was refused), which
    still spills (333 of 255), with the warnings naming both; its four gradients within the float64 tolerance."""
    seq = 40

    def make(t):
        rel, slopes, bias, scale = t["rel"], t["slopes"], t["bias"], t["scale"]
        return (lambda s, b, h, q, kv: 5 * _tanh(s * scale[h] / 5) * (1 + 0.1 * bias[b, h, q, kv])
                + rel[q - kv + seq - 1] - slopes[h] * abs(q - kv), lambda b, h, q, kv: q >= kv)
    rng = np.random.default_rng(0)
    arrays = {"rel": rng.standard_normal(2 * seq - 1), "slopes": np.array([0.5, 0.25]),
              "bias": rng.standard_normal((1, 2, seq, seq)), "scale": 1 + 0.25 * rng.standard_normal(2)}
    arrays = {n: np.asarray(t, np.float32) for n, t in arrays.items()}
    score_mod, mask_mod = make(arrays)
    q, k, v, do, _ = _inputs(1, 2, 2, seq, seq, head_dim=64, seed=1)
    with warnings.catch_warnings(record=True) as caught, np.errstate(invalid="ignore"):
        warnings.simplefilter("always")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
        *_, captured = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                                  level="ptx", captured_grads=True)
    messages = " ".join(str(w.message) for w in caught)
    assert "rebuilt with head_split=2" in messages and "attention_backward_d64_bf16_head_split2" in messages
    assert_captured_grads(captured, q, k, v, do, o, make, arrays)

# endregion
