"""NVIDIA's own kernels in the PTX executor: CUTLASS 3 warp-specialized GEMMs (cooperative and ping-pong, with
and without TMA multicast clusters) and FlashAttention-3's forward, compiled by nvcc from the public
repositories and launched as the libraries' own host code describes (the Params bytes, the tensor maps'
cuTensorMapEncodeTiled arguments, the grid, the cluster), checked against NumPy.

The PTX is generated and large, so it is not committed: tests/ptx_library/build.py builds it (it needs
nvcc 13 from the nvidia-cuda-nvcc wheel and checkouts of CUTLASS and FlashAttention), and each test here skips
when its configuration is not built."""

from __future__ import annotations

import numpy as np
import pytest

from ptx_library.build import CONFIGS
from ptx_library.library import (attention_reference, backward_reference, built, gemm_reference, launch_backward,
                                 launch_library)

GEMMS = [name for name in CONFIGS if name.startswith("cutlass")]
ATTENTION = [name for name in CONFIGS if CONFIGS[name]["source"] == "fa3_fwd.cu"]
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
