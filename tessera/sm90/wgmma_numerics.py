"""How Hopper's tensor cores round a block of products: the published bit-accurate model of one block
fused multiply-add (BFMA), d = c + sum_k a_k b_k, that wgmma and mma.sync compute per output element.

NVIDIA documents only that wgmma accumulates in the accumulator's type; the arithmetic inside is measured.
Sources:
[KM25] F. A. Khattak, M. Mikaitis, "Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004 (2025), ACM
  TACO; its models and measured test vectors: github.com/north-numerical-computing/MATLAB-tensor-core
  (models/H100TC.m, H200TC.m = H100TC; models/tools/Generic_BFMA_TC.m; model_validation/H100, H200), BSD-2.
[KM25b] the same authors, "Generalized Methodology for Determining Numerical Features of Hardware
  Floating-Point Matrix Multipliers: Part I", IEEE HPEC 2025 (the test-vector method).
[FHMP21] M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ
  Comput. Sci. 7:e330 (2021) (V100/T4/A100: exact products, truncation, no normalisation inside a block).
[BHLMP20] P. Blanchard, N. J. Higham, F. Lopez, T. Mary, S. Pranesh, "Mixed precision block fused
  multiply-add", SIAM J. Sci. Comput. 42(3) (2020) (the BFMA abstraction and its error analysis).
[DSV3] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437 (2024), section 3.3.2: FP8 GEMM on H800
  accumulates with "around 14 bits" retained, hence promotion to CUDA cores every 128 K-elements.

The model of H100/H200 [KM25], for a block of `BLOCK_K` products (k16 for .f16/.bf16, k8 for .tf32, k32 for
.e4m3/.e5m2: exactly one wgmma's K, so one wgmma instruction is one block per accumulator element):
1. every product a_k b_k is exact; its exponent is e_a + e_b, each the input's floor(log2 |x|) clamped at the
   input format's least normal exponent (subnormal inputs are kept), the product's significand left
   unnormalised (in [1, 4));
2. the accumulator c enters the same block as one more term (exponent floor(log2 |c|) as an f32, at least
   -126); zero products and c = 0 take no part (so scale-d = 0 is c = 0);
3. all terms are aligned to E = max(exponents, MIN_EXPONENT) and each truncated (toward zero, no sticky bit)
   to a multiple of 2^(E - 23 - extra_bits): 2 bits beyond f32's 23 for 16-bit inputs, 10 bits *fewer*
   (13 fraction bits) for FP8;
4. the truncated terms are summed exactly (carry bits suffice), normalised once, and rounded to the result:
   toward zero to 24 significant bits for an f32 accumulator (14 for FP8 inputs: [DSV3]'s "around 14
   bits"), to nearest even for an .f16 accumulator; subnormal results are kept; an exponent beyond the
   format's is infinity [KM25's model; RZ to IEEE would give the largest finite value].
Inputs with an infinity or NaN follow IEEE sums of the exact products (NaN for inf * 0 or inf - inf).
The test vectors of [KM25] (5,000 random blocks per input type, measured on an H100 and an H200 with wmma) are
reproduced bit for bit by `block_fma` (tests/test_wgmma_numerics.py: a sample of them is checked in); that
wgmma uses the same datapath is what the GPU probe (bench/gpu_probes.py) checks. FP8 with an .f16
accumulator is not modelled (the published vectors of that case could not be reproduced: refused by name).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class BlockFma(NamedTuple):
    """One row of `HOPPER_BLOCK_FMA`: products per block, extra alignment bits beyond f32's 23 fraction bits
    (negative: fewer), significant bits of the result, its rounding ("rz" or "rn"), the least exponent E may
    take, and the result's least normal and largest exponents."""

    block_k: int
    extra_bits: int
    result_bits: int
    rounding: str
    min_exponent: int
    result_emin: int
    result_emax: int


HOPPER_BLOCK_FMA = {
    ("bf16", "f32"): BlockFma(16, 2, 24, "rz", -133, -126, 127),
    ("f16", "f32"): BlockFma(16, 2, 24, "rz", -133, -126, 127),
    ("tf32", "f32"): BlockFma(8, 2, 24, "rz", -133, -126, 127),
    ("f16", "f16"): BlockFma(16, 2, 11, "rn", -21, -14, 15),
    ("e4m3", "f32"): BlockFma(32, -10, 14, "rz", -133, -126, 127),
    ("e5m2", "f32"): BlockFma(32, -10, 14, "rz", -133, -126, 127),
}
"""[KM25] models/H100TC.m (H200TC.m calls it): (multiplicand type, accumulator type) -> the block's arithmetic.
fma = 16 (tf32: 8; fp8: 32), neab = 2 (fp8: -10, which also narrows the f32 result to 23 - 10 fraction bits),
final rounding 'rz' ('rne' for an fp16 result), min_exp_limit -133 (-21 for fp16 -> fp16)."""

INPUT_MIN_EXPONENT = {"bf16": -126, "tf32": -126, "f16": -14, "e4m3": -6, "e5m2": -14}
"""The least normal exponent of each multiplicand format (1 - bias): a subnormal input's exponent in the
alignment, its significand below 1."""

F32_FRACTION_BITS = 23
"""The alignment's reference width: [KM25]'s aligned significands carry 23 + neab fraction bits."""

ACCUMULATOR_MIN_EXPONENT = -126
"""The accumulator term's exponent is read as an f32's: an f32 subnormal c aligns as 2^-126."""


def block_model(atype: str, dtype: str) -> BlockFma:
    """The block FMA of multiplicands `atype` (the PTX name; A and B of FP8 may mix formats) accumulating
    into `dtype`; ValueError naming the combination for one the model does not cover."""
    row = HOPPER_BLOCK_FMA.get((atype, dtype))
    if row is None:
        known = ", ".join(f".{a} -> .{d}" for a, d in HOPPER_BLOCK_FMA)
        raise ValueError(f"no Hopper tensor-core model for .{atype} products into .{dtype} (modelled: {known})")
    return row


_NO_EXPONENT = -16000
"""The exponent of a zero term: below any real one, and twice it still fits an int16."""


def _exponents(x: np.ndarray, least: int) -> np.ndarray:
    """floor(log2 |x|) clamped at `least` as int16, `_NO_EXPONENT` where x is 0 (exact for every finite x)."""
    _, e = np.frexp(x)
    return np.where(x == 0, _NO_EXPONENT, np.maximum(e - 1, least)).astype(np.int16)


_SINGLE_EXPONENTS = 50
"""`block_fma` computes in float32 where every input's exponent and every block's E lie within +-50."""


def _k_first(x: np.ndarray, dtype=None) -> np.ndarray:
    """[K, ..., rows] contiguous from [..., rows, K]: reductions over K then add whole rows."""
    return np.ascontiguousarray(np.moveaxis(x, -1, 0), dtype=dtype)


def _within(exponents: np.ndarray, bound: int) -> bool:
    """Whether every exponent of a nonzero input lies in [-bound, bound]."""
    real = exponents[exponents != _NO_EXPONENT]
    return real.size == 0 or (real.min() >= -bound and real.max() <= bound)


def _round_result(s: np.ndarray, model: BlockFma) -> np.ndarray:
    """The exact sums `s` (float64) rounded to `model.result_bits` significant bits at the result's
    exponent range (subnormals kept), toward zero or to nearest even; overflow is infinity."""
    small = np.abs(s) < 2.0**model.result_emin
    if model.rounding == "rz":  # normal results: the float64's low fraction bits cleared
        cut = np.uint64((1 << (53 - model.result_bits)) - 1)
        r = (s.view(np.uint64) & ~cut).view(np.float64)
    if model.rounding != "rz" or small.any():
        _, e = np.frexp(s)
        ulp = np.ldexp(1.0, np.maximum(e - 1, model.result_emin) - (model.result_bits - 1))
        q = s / ulp  # exact: a power-of-two scaling of a float64
        stepped = (np.trunc(q) if model.rounding == "rz" else np.rint(q)) * ulp
        r = stepped if model.rounding != "rz" else np.where(small, stepped, r)
    return np.where(np.abs(r) >= 2.0 ** (model.result_emax + 1), np.copysign(np.inf, s), r)


def block_fma(a, b, c, atype: str, dtype: str, btype: str | None = None) -> np.ndarray:
    """D = C + A B^T on Hopper's tensor cores, one block per element: `a` [..., M, K], `b` [..., N, K] (the
    multiplicands' values, any float dtype; K = the block's size), `c` [..., M, N] accumulator values or None
    (0). Returns float64 [..., M, N] holding `dtype` values. `btype` is B's format where it differs from A's
    (.e4m3 with .e5m2)."""
    model = block_model(atype, dtype)
    if btype is not None and btype != atype:
        block_model(btype, dtype)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape[-1] != model.block_k or b.shape[-1] != model.block_k:
        raise ValueError(f"a .{atype} block has K = {model.block_k}, got {a.shape[-1]} and {b.shape[-1]}")
    # K leading: every [K, ..., M, N] temporary is reduced over its first axis (whole rows at a time)
    ea = _k_first(_exponents(a, INPUT_MIN_EXPONENT[atype]))[..., :, None]
    eb = _k_first(_exponents(b, INPUT_MIN_EXPONENT[btype or atype]))[..., None, :]
    top = np.max(ea + eb, axis=0).astype(np.int64)  # [..., M, N]
    if c is not None:
        c = np.asarray(c, np.float64)
        top = np.maximum(top, _exponents(c, ACCUMULATOR_MIN_EXPONENT))
    top = np.maximum(top, model.min_exponent)
    scale = np.ldexp(1.0, F32_FRACTION_BITS + model.extra_bits - top)
    finite = np.isfinite(a).all() and np.isfinite(b).all() and (c is None or np.isfinite(c).all())
    # float32 suffices where every product and scale is a normal f32: a term >= 1 unit is then exact (at most
    # 22 significant bits, below 2^27), and one below 1 truncates to 0 however it rounds. The cast to int32
    # truncates toward zero, and K terms below 2^27 (FP8: 2^15) sum below 2^31.
    single = (finite and _within(ea, _SINGLE_EXPONENTS) and _within(eb, _SINGLE_EXPONENTS)
              and top.min() > -_SINGLE_EXPONENTS)
    kind = np.float32 if single else np.float64
    with np.errstate(invalid="ignore", over="ignore"):
        terms = _k_first(a, kind)[..., :, None] * _k_first(b, kind)[..., None, :]
        if not finite:  # IEEE sums of the exact products: inf * 0 and inf - inf are NaN
            exact = terms.sum(axis=0) + (0.0 if c is None else c)
        terms *= scale.astype(kind)  # each term in units of 2^(E - 23 - extra bits): a power-of-two scaling
        units = terms.astype(np.int32).sum(axis=0, dtype=np.int32).astype(np.float64)
        if c is not None:
            units += np.trunc(c * scale)
        total = _round_result(units / scale, model)
        if not finite:
            total = np.where(np.isfinite(exact), total, exact)  # finite terms never overflow float64
    return total


def chained_gemm(a, b, c, atype: str, dtype: str) -> np.ndarray:
    """C + A B^T as a kernel's K loop computes it: A [M, K], B [N, K] zero-padded to whole blocks, one
    `block_fma` per block in K order, each block's result the next one's accumulator."""
    model = block_model(atype, dtype)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    pad = -a.shape[-1] % model.block_k
    a = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)])
    b = np.pad(b, [(0, 0)] * (b.ndim - 1) + [(0, pad)])
    d = c
    for k in range(0, a.shape[-1], model.block_k):
        d = block_fma(a[..., k:k + model.block_k], b[..., k:k + model.block_k], d, atype, dtype)
    return d
