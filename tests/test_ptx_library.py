"""NVIDIA's own kernels in the PTX executor: CUTLASS 3 warp-specialized GEMMs (cooperative and ping-pong, with
and without TMA multicast clusters, FP8, bf16 with a bias-ReLU epilogue, stream-K and split-K) and
FlashAttention-3's forward (FP8, soft-capping, sliding windows, packed GQA) and backward, compiled by nvcc from
the public repositories and launched as the libraries' own host code describes (the Params bytes, the tensor
maps' cuTensorMapEncodeTiled arguments, the grid, the cluster), checked against NumPy.

The PTX is generated and large, so it is not committed: tests/ptx_library/build.py builds it (it needs
nvcc 13 from the nvidia-cuda-nvcc wheel and checkouts of CUTLASS and FlashAttention), and each test here skips
when its configuration is not built."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ptx_library.build import CONFIGS
from ptx_library.library import (BUILD, attention_fp8_bound, attention_reference, backward_reference, built,
                                 gemm_reference, launch_backward, launch_library)
from tessera.interpreters.ptx import PtxHazardError

_VARIANTS = {"ELEMENT_AB", "ELEMENT_D", "BIAS_RELU", "STREAM_K", "CPASYNC", "IS_FP8", "HAS_SOFTCAP", "IS_LOCAL",
             "PACK_GQA"}
GEMMS = [name for name in CONFIGS if name.startswith("cutlass") and not _VARIANTS & set(CONFIGS[name])]
ATTENTION = [name for name in CONFIGS if CONFIGS[name]["source"] == "fa3_fwd.cu" and not _VARIANTS & set(CONFIGS[name])]
BACKWARD = [name for name in CONFIGS if CONFIGS[name]["source"] == "fa3_bwd_run.cu"]


def needs(name: str):
    if not built(name):
        pytest.skip(f"{name} is not built (tests/ptx_library/build.py)")


@pytest.mark.parametrize("name", GEMMS)
@pytest.mark.parametrize("sizes,sms", [((256, 256, 192, 1), 2), ((200, 136, 72, 2), 4)],
                         ids=["256x256x192", "ragged-200x136x72-batch2"])
def test_cutlass_gemm_matches_numpy(name, sizes, sms):
    """Several output tiles per CTA (the persistent scheduler's loop), several k-blocks per tile, partial tiles
    at the edges (TMA fills and clips), and a batch. (An even SM count: with an odd one CUTLASS 3's persistent
    scheduler makes a grid of 3 CTAs for clusters of 2 along N, which the driver and the executor refuse.)"""
    needs(name)
    tensors, description, _ = launch_library(name, sizes, sms)
    np.testing.assert_allclose(tensors["D"], gemm_reference(tensors), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ATTENTION)
@pytest.mark.parametrize("sizes", [(1, 2, 256, 256), (2, 1, 200, 333)], ids=["b1-h2-s256", "b2-h1-sq200-sk333"])
def test_flash_attention_3_forward_matches_numpy(name, sizes):
    """Several query blocks per CTA (the persistent scheduler), several key blocks, ragged tails (TMA fills,
    the mask of the last key block) and a batch."""
    needs(name)
    head_dim = CONFIGS[name]["HDIM"]
    tensors, _, _ = launch_library(name, (*sizes, head_dim), sms=2)
    out, lse = attention_reference(tensors, causal=bool(CONFIGS[name]["IS_CAUSAL"]))
    np.testing.assert_allclose(tensors["O"].astype(np.float64), out, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(tensors["LSE"], lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name", BACKWARD)
@pytest.mark.parametrize("sizes", [(1, 1, 200, 160), (2, 2, 100, 333)], ids=["b1-h1-sq200-sk160", "b2-h2-sq100-sk333"])
def test_flash_attention_3_backward_matches_numpy(name, sizes):
    """FA3's backward as its host code launches it (preprocess, main kernel, postprocess on the same tensors):
    several query blocks per key block (Q and dO slots refilled, dQ added by bulk reductions from two buffers),
    ragged tails and a batch."""
    needs(name)
    tensors = launch_backward(name, (*sizes, CONFIGS[name]["HDIM"]))
    for got, expected in zip(("dQ", "dK", "dV"), backward_reference(tensors)):
        np.testing.assert_allclose(tensors[got].astype(np.float64), expected, atol=2e-3, rtol=2e-3, err_msg=got)


# the variants: each with the describe options (src/*.cu) its cases need

GEMM_VARIANTS = [
    ("cutlass_fp8_cooperative_128x128x128", (200, 136, 272, 2), 2, {"alpha": 0.5, "beta": 1.5}),
    ("cutlass_bf16_bias_relu_pingpong_64x128x64", (200, 136, 72, 2), 2, {"alpha": 0.5, "beta": 1.5}),
    ("cutlass_streamk_cooperative_128x128x64", (384, 128, 1024, 1), 2, {"decomposition": "streamk"}),
    ("cutlass_streamk_cooperative_128x128x64", (384, 256, 640, 1), 4,
     {"decomposition": "streamk", "reduction": "nondeterministic"}),
    ("cutlass_streamk_cooperative_128x128x64", (200, 136, 520, 1), 2, {"decomposition": "splitk", "splits": 3}),
]
"""(configuration, M N K L, SMs, options): ragged tiles, k-blocks past the pipeline's stages, a batch; stream-K with
three output tiles on two SMs (and six on four), split-K in three."""

ATTENTION_VARIANTS = [
    ("fa3_fwd_fp8_hdim128", (1, 2, 200, 333), {}),
    ("fa3_fwd_fp8_hdim128", (2, 1, 129, 65), {}),
    ("fa3_fwd_hdim128_softcap", (2, 1, 77, 129), {"softcap": 2.5}),
    ("fa3_fwd_hdim64_local", (1, 2, 200, 333), {"wl": 50, "wr": 10}),
    ("fa3_fwd_hdim64_local", (2, 1, 300, 100), {"wl": 5, "wr": 0}),
]
"""(configuration, B H SQ SK, options): ragged query and key blocks; a window that leaves the first 195 queries
of 300 without a key (O = 0, LSE = -inf)."""


def _gemm_check(name: str, tensors: dict, options: dict) -> None:
    """D against alpha A B^T + beta C (+ bias[m], ReLU) in float64: f32 D to f32 accumulation's error, bf16 D to
    its rounding (2^-8 relatively) too."""
    acc = gemm_reference(tensors)
    expected = float(options.get("alpha", 1)) * acc + float(options.get("beta", 0)) * tensors["C"].astype(np.float64)
    if "bias" in tensors:
        expected = np.maximum(expected + tensors["bias"].astype(np.float64)[None, :, None], 0.0)
    got = tensors["D"].astype(np.float64)
    rounding = 2.0 ** -8 if tensors["D"].dtype != np.float32 else 1e-5
    np.testing.assert_array_less(np.abs(got - expected), rounding * np.abs(expected) + 1e-4 * np.abs(acc).max())


def _attention_check(name: str, tensors: dict, options: dict) -> None:
    window = (int(options.get("wl", -1)), int(options.get("wr", -1))) if "wl" in options else None
    softcap = float(options.get("softcap", 0.0))
    out, lse = attention_reference(tensors, causal=bool(CONFIGS[name]["IS_CAUSAL"]), window=window, softcap=softcap)
    got = tensors["O"].astype(np.float64)
    if CONFIGS[name].get("IS_FP8"):  # P rounded to e4m3 before P V: the bound of that rounding
        np.testing.assert_array_less(np.abs(got - out), attention_fp8_bound(tensors, window=window, softcap=softcap))
    else:
        np.testing.assert_allclose(got, out, atol=2e-3, rtol=2e-3)
    np.testing.assert_array_equal(np.isinf(tensors["LSE"]), np.isinf(lse))
    np.testing.assert_allclose(np.where(np.isinf(lse), 0, tensors["LSE"]), np.where(np.isinf(lse), 0, lse),
                               atol=1e-4, rtol=1e-5)


def _descales(tensors: dict, rng) -> None:
    """FP8's per-(batch, K/V head) descale factors, away from 1."""
    for n in ("q_descale", "k_descale", "v_descale"):
        if n in tensors:
            tensors[n][...] = rng.uniform(0.5, 2.0, tensors[n].shape)


@pytest.mark.parametrize("name,sizes,sms,options", GEMM_VARIANTS,
                         ids=[f"{n}-{'x'.join(map(str, s))}-{'-'.join(map(str, o.values()))}"
                              for n, s, _, o in GEMM_VARIANTS])
def test_cutlass_gemm_variant_matches_numpy(name, sizes, sms, options):
    needs(name)
    tensors, description, _ = launch_library(name, sizes, sms, options=options)
    if "decomposition" in options:  # the units of a tile met in the workspace (else the test shows nothing)
        assert "workspace" in description["tensors"]
    _gemm_check(name, tensors, options)


@pytest.mark.parametrize("name,sizes,options", ATTENTION_VARIANTS,
                         ids=[f"{n}-{'x'.join(map(str, s))}" for n, s, _ in ATTENTION_VARIANTS])
def test_flash_attention_3_forward_variant_matches_numpy(name, sizes, options):
    needs(name)
    tensors, _, _ = launch_library(name, (*sizes, CONFIGS[name]["HDIM"]), sms=2, options=options, prepare=_descales)
    _attention_check(name, tensors, options)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", GEMM_VARIANTS[:3] + ATTENTION_VARIANTS[::2],
                         ids=[c[0] for c in GEMM_VARIANTS[:3] + ATTENTION_VARIANTS[::2]])
def test_library_variant_is_clean_and_right_on_adversarial_schedules(case, seed):
    """The same kernels with the threads run in a seeded random order: no race reported, the same results (FA3's
    local forward was reported here while only the first wgmma.wait_group of a warpgroup freed the slot)."""
    name = case[0]
    needs(name)
    if name.startswith("cutlass"):
        _, sizes, sms, options = case
        tensors, _, _ = launch_library(name, sizes, sms, options=options, schedule="adversarial", seed=seed)
        _gemm_check(name, tensors, options)
    else:
        _, sizes, options = case
        tensors, _, _ = launch_library(name, (*sizes, CONFIGS[name]["HDIM"]), sms=2, options=options,
                                       prepare=_descales, schedule="adversarial", seed=seed)
        _attention_check(name, tensors, options)


_PROXY = (r"wgmma operand [AB] reads shared address 0x[0-9a-f]+ of CTA \(\d, \d, 0\), which thread \(\d+, 0, 0\) .* "
          r"stored through the generic proxy .*missing fence.proxy.async after the store at line (\d+)")


def _stored_by(name: str, error: PtxHazardError) -> str:
    """The line of configuration `name`'s PTX that a proxy-fence report names as the store."""
    line = int(re.search(_PROXY, str(error)).group(1))
    return (BUILD / name / "kernel.ptx").read_text().split("\n")[line - 1].strip()


def test_flash_attention_3_packed_gqa_relies_on_barrier_q_for_the_async_proxy():
    """FA3's forward with the query heads of one K/V head packed into the M tile loads Q with cp.async (generic
    proxy), completes it with cp.async.mbarrier.arrive on barrier_Q, and the consumers' first wgmma reads it after
    their barrier_Q wait with no fence.proxy.async [memory_model.CP_ASYNC_PROXY]: clean and right by default (as
    CUTLASS's cp.async GMMA mainloop, NVIDIA's kernels rely on the mbarrier completion); `strict_proxy` reports it
    as the ISA's letter asks, naming the cp.async; with a fence after the consumers' wait it passes that too. 4
    query heads on 2 K/V heads, ragged blocks."""
    name = "fa3_fwd_hdim64_packgqa"
    needs(name)
    sizes, options = (1, 4, 100, 150, 64), {"hk": 2}
    tensors, _, _ = launch_library(name, sizes, sms=2, options=options)
    _attention_check(name, tensors, {})
    with pytest.raises(PtxHazardError, match=_PROXY) as caught:
        launch_library(name, sizes, sms=2, options=options, strict_proxy=True)
    assert _stored_by(name, caught.value).startswith("cp.async.")
    lines = (BUILD / name / "kernel.ptx").read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.strip() == "wgmma.fence.sync.aligned;")
    lines.insert(first, "\tfence.proxy.async.shared::cta;")  # the consumers' first wgmma follows their Q wait
    tensors, _, _ = launch_library(name, sizes, sms=2, options=options, text="\n".join(lines), strict_proxy=True)
    _attention_check(name, tensors, {})


def test_cutlass_cp_async_gemm_relies_on_its_stage_mbarrier_for_the_async_proxy():
    """CUTLASS's cp.async GMMA mainloop (KernelCpAsyncWarpSpecializedCooperative: what KernelScheduleAuto builds
    for operands TMA cannot load) completes each stage with cp.async.mbarrier.arrive and a plain arrive, and its
    consumers issue wgmma after the stage wait with no fence.proxy.async: clean and right by default, reported
    under `strict_proxy` naming the cp.async [memory_model.CP_ASYNC_PROXY]. On a K that is not a multiple of the
    tile's 64, the producer zero-fills the first stage's k-blocks past K with st.shared, which no fence orders
    before the wgmma either: that stays reported (a generic store, as FA3 fences its transposed V before the same
    kind of mbarrier arrive)."""
    name = "cutlass_cpasync_cooperative_128x128x64"
    needs(name)
    tensors, _, _ = launch_library(name, (200, 136, 256, 2), sms=2)
    _gemm_check(name, tensors, {})
    with pytest.raises(PtxHazardError, match=_PROXY) as caught:
        launch_library(name, (200, 136, 256, 2), sms=2, strict_proxy=True)
    assert _stored_by(name, caught.value).startswith("cp.async.")
    with pytest.raises(PtxHazardError, match=_PROXY) as caught:
        launch_library(name, (200, 136, 200, 2), sms=2)
    assert _stored_by(name, caught.value).startswith("st.u16")
