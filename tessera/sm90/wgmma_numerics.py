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
_NO_LOW_BIT = 16000
"""The lowest set bit of a zero term: above any real one (a zero is on every grid)."""


def _exponents(x: np.ndarray, least: int) -> np.ndarray:
    """floor(log2 |x|) clamped at `least` as int16, `_NO_EXPONENT` where x is 0 (exact for every finite x)."""
    _, e = np.frexp(x)
    return np.where(x == 0, _NO_EXPONENT, np.maximum(e - 1, least)).astype(np.int16)


def _low_bits(x: np.ndarray) -> np.ndarray:
    """The exponent of the least significant set bit of each finite x (float64, an exact input value: a
    float64 normal), `_NO_LOW_BIT` where x is 0; int16."""
    bits = np.ascontiguousarray(x, np.float64).view(np.uint64)
    significand = (bits & np.uint64((1 << 52) - 1)) | np.uint64(1 << 52)
    lowest = significand & (~significand + np.uint64(1))  # its lowest set bit, a power of two
    _, e = np.frexp(x)
    _, t = np.frexp(lowest.astype(np.float64))
    return np.where(x == 0, _NO_LOW_BIT, (e - 1) - 52 + (t - 1)).astype(np.int16)


_WEIGHT_BITS = 8
"""`_max_plus` weighs a K-term by 2^(8 (x + y)): the largest of at most 2^5 terms decides the sum's exponent."""


def _max_plus(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """max_k (x[b, m, k] + y[b, n, k]) [B, M, N] int32 for int16 exponents ([B, M, K], [B, N, K]; an entry at
    +-16000 marks a zero input, and a sum with one is no term: `_NO_EXPONENT` where there is none). One BLAS
    product of weights 2^(8 (x - row max)): the sum of at most 32 weights has the largest one's exponent
    within 5 bits, so floor(log2(sum) / 8) is the largest exponent exactly. None where a largest weight
    underflows float64 (exponents over ~127 apart): the caller reduces over K instead."""
    real_x, real_y = np.abs(x) < _NO_LOW_BIT, np.abs(y) < _NO_LOW_BIT
    top_x = np.max(np.where(real_x, x, -_NO_LOW_BIT), axis=-1, keepdims=True).astype(np.int32)
    top_y = np.max(np.where(real_y, y, -_NO_LOW_BIT), axis=-1, keepdims=True).astype(np.int32)
    wx = np.where(real_x, np.ldexp(1.0, _WEIGHT_BITS * (x - top_x)), 0.0)
    wy = np.where(real_y, np.ldexp(1.0, _WEIGHT_BITS * (y - top_y)), 0.0)
    total = np.matmul(wx, wy.transpose(0, 2, 1))
    biased = (total.view(np.uint64) >> np.uint64(52)).astype(np.int32)  # floor(log2 total) + 1023; 0: no term
    if (biased < 1023 - 1000).any():
        if ((total > 0) & (total < 2.0**-1000)).any():
            return None
        return np.where(total > 0, top_x + top_y.transpose(0, 2, 1) + (biased - 1023) // _WEIGHT_BITS, _NO_EXPONENT)
    biased -= 1023
    biased //= _WEIGHT_BITS
    biased += top_x
    biased += top_y.transpose(0, 2, 1)
    return biased


def _k_first(x: np.ndarray) -> np.ndarray:
    """[K, B, rows] contiguous from [B, rows, K]: reductions over K then add whole rows."""
    return np.ascontiguousarray(np.moveaxis(x, -1, 0))


def _round_result(s: np.ndarray, model: BlockFma) -> np.ndarray:
    """The exact sums `s` (float64) rounded to `model.result_bits` significant bits at the result's
    exponent range (subnormals kept), toward zero or to nearest even; overflow is infinity."""
    bits = s.view(np.uint64)
    if model.rounding == "rz":  # normal results: the float64's low fraction bits cleared
        r = (bits & ~np.uint64((1 << (53 - model.result_bits)) - 1)).view(np.float64)
        # zeros, results below the least normal or past the largest exponent (the float64 exponent field
        # outside [emin, emax] + 1023, wrapped): each by itself
        field = (bits >> np.uint64(52)) & np.uint64(0x7FF)
        field -= np.uint64(1023 + model.result_emin)
        odd = np.nonzero(field > np.uint64(model.result_emax - model.result_emin))
    else:
        r, odd = np.empty_like(s), np.nonzero(np.ones(s.shape, bool))
    if odd[0].size:
        x = s[odd]
        _, e = np.frexp(x)
        ulp = np.ldexp(1.0, np.maximum(e - 1, model.result_emin) - (model.result_bits - 1))
        with np.errstate(invalid="ignore"):
            y = (np.trunc(x / ulp) if model.rounding == "rz" else np.rint(x / ulp)) * ulp  # x / ulp: exact
        r[odd] = np.where(np.abs(y) >= 2.0 ** (model.result_emax + 1), np.copysign(np.inf, x), y)
    return r


def _cut_terms(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, grid: np.ndarray, model: BlockFma) -> np.ndarray:
    """Blocks one by one: rows of `a` and `b` [n, K], accumulators `c` [n] (or None), each row's terms cut
    toward zero at 2^grid [n], summed exactly (float64: each below 2^27 units) and rounded."""
    scale = np.ldexp(1.0, -grid.astype(np.int64))
    units = np.trunc(a * b * scale[:, None]).sum(axis=1)
    if c is not None:
        units += np.trunc(c * scale)
    return _round_result(units / scale, model)


def block_fma(a, b, c, atype: str, dtype: str, btype: str | None = None) -> np.ndarray:
    """D = C + A B^T on Hopper's tensor cores, one block per element: `a` [..., M, K], `b` [..., N, K] (the
    multiplicands' values, any float dtype; K = the block's size), `c` [..., M, N] accumulator values or None
    (0). Returns float64 [..., M, N] holding `dtype` values. `btype` is B's format where it differs from A's
    (.e4m3 with .e5m2).

    Most blocks cut nothing: where every term's lowest set bit lies on the block's grid 2^(E - 23 - extra),
    the float64 sum of BLAS (exact: below 2^32 units) rounded is the result; only the other elements are
    computed term by term."""
    model = block_model(atype, dtype)
    if btype is not None and btype != atype:
        block_model(btype, dtype)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape[-1] != model.block_k or b.shape[-1] != model.block_k:
        raise ValueError(f"a .{atype} block has K = {model.block_k}, got {a.shape[-1]} and {b.shape[-1]}")
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], () if c is None else np.shape(c)[:-2])
    (m, k), n = a.shape[-2:], b.shape[-2]
    a = np.broadcast_to(a, lead + (m, k)).reshape(-1, m, k)
    b = np.broadcast_to(b, lead + (n, k)).reshape(-1, n, k)
    c = None if c is None else np.broadcast_to(np.asarray(c, np.float64), lead + (m, n)).reshape(-1, m, n)
    # E and each element's lowest term bit: max-plus products over K, by BLAS where exponents allow
    ea, eb = _exponents(a, INPUT_MIN_EXPONENT[atype]), _exponents(b, INPUT_MIN_EXPONENT[btype or atype])
    la, lb = _low_bits(a), _low_bits(b)
    top, lowest = _max_plus(ea, eb), _max_plus(-la, -lb)
    if top is None or lowest is None:  # exponents too far apart for float64 weights: int16 [K, B, M, N]
        top = np.max(_k_first(ea)[..., :, None] + _k_first(eb)[..., None, :], axis=0).astype(np.int32)
        low = np.min(_k_first(la)[..., :, None] + _k_first(lb)[..., None, :], axis=0)
    else:
        low = -lowest
    if c is not None:
        top = np.maximum(top, _exponents(c, ACCUMULATOR_MIN_EXPONENT))
    grid = np.maximum(top, model.min_exponent) - (F32_FRACTION_BITS + model.extra_bits)
    finite = np.isfinite(a).all() and np.isfinite(b).all() and (c is None or np.isfinite(c).all())
    with np.errstate(invalid="ignore", over="ignore"):
        exact = np.matmul(a, b.transpose(0, 2, 1))  # exact products; the sum exact where nothing is cut
        if c is not None:
            exact += c
        total = _round_result(exact, model)
        cut = low < grid
        if c is not None:  # c cut: not a whole number of grid units
            units = c * np.ldexp(1.0, -grid)
            cut |= units != np.trunc(units)
        if not finite:  # IEEE sums of the exact products (inf * 0 and inf - inf are NaN): term by term
            exact = np.einsum("bmk,bnk->bmn", a, b) + (0.0 if c is None else c)
            cut |= ~np.isfinite(exact)
        where = np.nonzero(cut)
        if where[0].size:
            rows_c = None if c is None else c[where]
            total[where] = _cut_terms(a[where[0], where[1]], b[where[0], where[2]], rows_c, grid[where], model)
        if not finite:
            total = np.where(np.isfinite(exact), total, exact)  # finite terms never overflow float64
    return total.reshape(lead + (m, n))


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
