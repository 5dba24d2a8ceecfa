"""tessera.sm90.nan against NVIDIA's headers (CUDA 13.5): the canonical NaN of f32 (math_constants.h) and of
f16/bf16 (cuda_fp16.hpp, cuda_bf16.hpp)."""

from __future__ import annotations

import re

from tessera.sm90.nan import CANONICAL_NAN_BITS

MATH_CONSTANTS_F32 = "#define CUDART_NAN_F            __int_as_float(0x7fffffffU)"
CUDA_FP16_NAN = "#define CUDART_NAN_FP16            __ushort_as_half((unsigned short)0x7FFFU)"
CUDA_BF16_NAN = "#define CUDART_NAN_BF16            __ushort_as_bfloat16((unsigned short)0x7FFFU)"


def test_canonical_nans_are_nvidias_patterns():
    pattern = r"0x([0-9a-fA-F]+)U"
    assert int(re.search(pattern, MATH_CONSTANTS_F32)[1], 16) == CANONICAL_NAN_BITS["f32"]
    assert int(re.search(pattern, CUDA_FP16_NAN)[1], 16) == CANONICAL_NAN_BITS["f16"]
    assert int(re.search(pattern, CUDA_BF16_NAN)[1], 16) == CANONICAL_NAN_BITS["bf16"]
    for bits, width, exponent in ((CANONICAL_NAN_BITS["f32"], 32, 8), (CANONICAL_NAN_BITS["f16"], 16, 5)):
        assert bits >> (width - 1) == 0  # positive, all exponent bits set, quiet (top fraction bit set)
        assert (bits >> (width - 1 - exponent)) & ((1 << exponent) - 1) == (1 << exponent) - 1
        assert bits >> (width - 2 - exponent) & 1


def test_the_cta_simulator_gives_f32_arithmetic_the_canonical_nan_as_the_ptx_executor_does():
    """A NaN from f32 arithmetic (a NaN input through max, sub, exp, sum and div of a row softmax; an inf - inf)
    is the canonical NaN at target level too, so the CTA simulator and the PTX executor agree bit for bit on the
    NaN rows (NumPy alone would give 0x7fc00000 or 0xffc00000)."""
    import warnings
    from pathlib import Path

    import numpy as np

    import tessera

    kernel = Path(__file__).resolve().parent.parent / "examples" / "kernels" / "softmax.mlir"
    module = tessera.parse_module(kernel.read_text())
    x = np.random.default_rng(0).standard_normal((70, 64)).astype(np.float32)
    x[3, 5], x[4, 6], x[5, 7] = np.nan, np.inf, -np.inf
    x[6, :2] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target, ptx = (tessera.launch(module, x, level=level) for level in ("target", "ptx"))
    assert np.isnan(target[3:7]).any(axis=1).tolist() == [True, True, False, True]
    assert target.view(np.uint32).tobytes() == ptx.view(np.uint32).tobytes()
    assert set(target.view(np.uint32)[np.isnan(target)].tolist()) == {CANONICAL_NAN_BITS["f32"]}
