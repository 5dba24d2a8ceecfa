"""Element types as NumPy sees them, and the rounding Tessera's interpreters apply.

bf16 and the 8-bit floats (f8E4M3FN, f8E5M2) come from `ml_dtypes`; conversions to bf16/f16 round to nearest
even, as `cvt.rn` does on the GPU, and conversions to the 8-bit floats also saturate, as `cvt.rn.satfinite`
does (`tessera.sm90.fp8.satfinite_f32`: finite overflow and infinities to +-MAX_NORM, NaN stays NaN).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute

from tessera.sm90.fp8 import fp8_dtype, satfinite_f32

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F8E4M3 = fp8_dtype("e4m3")
F8E5M2 = fp8_dtype("e5m2")
FP8_DTYPES = {F8E4M3: "e4m3", F8E5M2: "e5m2"}
"""The 8-bit float dtypes (ml_dtypes' float8_e4m3fn and float8_e5m2) and their PTX format names."""

DTYPE_NAMES = {"bf16": BF16, "f16": F16, "f32": F32}


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """The NumPy dtype that holds elements of a Tile IR element type."""
    if isinstance(element_type, BFloat16Type):
        return BF16
    if isinstance(element_type, Float16Type):
        return F16
    if isinstance(element_type, Float32Type):
        return F32
    if isinstance(element_type, Float8E4M3FNType):
        return F8E4M3
    if isinstance(element_type, Float8E5M2Type):
        return F8E5M2
    if isinstance(element_type, IndexType):
        return np.dtype(np.int64)
    if isinstance(element_type, IntegerType):
        return np.dtype({1: np.bool_, 8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[element_type.width.data])
    raise ValueError(f"no NumPy dtype for element type {element_type}")


def widened_dtype(element_type: Attribute) -> np.dtype:
    """`numpy_dtype`, with every float element type widened to float64 (a kernel's float64 reference)."""
    dtype = numpy_dtype(element_type)
    return np.dtype(np.float64) if dtype.kind == "f" or dtype == BF16 or dtype in FP8_DTYPES else dtype


def dtype_from_name(name: str) -> np.dtype:
    """'bf16' / 'f16' / 'f32' to a NumPy dtype; refuses other names."""
    try:
        return DTYPE_NAMES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype '{name}' (supported: {', '.join(DTYPE_NAMES)})") from None


def round_to(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert to `dtype`: round to nearest even for floats (and saturate for the 8-bit floats, as
    `cvt.rn.satfinite`; from f64 they first round to f32, the register the GPU converts from), truncate toward
    zero for integers from floats, saturating to the integer's range and NaN to 0 (as `cvt.rzi.s32.f32`;
    NumPy's own cast of an out-of-range float is undefined)."""
    dtype = np.dtype(dtype)
    if dtype in FP8_DTYPES:
        x = np.asarray(x)
        return x if x.dtype == dtype else satfinite_f32(x.astype(np.float32), FP8_DTYPES[dtype])
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(np.asarray(x).dtype, np.integer):
        info = np.iinfo(dtype)
        x = np.asarray(x, np.float64)
        with np.errstate(invalid="ignore"):
            return np.where(np.isnan(x), 0, np.clip(np.trunc(x), info.min, info.max)).astype(dtype)
    x = np.asarray(x)
    if dtype == BF16 and x.dtype == np.float64:
        return f32_round_to_odd(x).astype(BF16)
    return x.astype(dtype)


def f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 to float32 rounded to odd: truncated toward zero, with the last significand bit set where that
    dropped anything. Rounding that to bf16 (8 significand bits, 16 fewer) to nearest even gives the float64
    value rounded once, as `round_to` must whatever ml_dtypes does: ml_dtypes before 0.7 cast float64 to bf16
    through float32 (rounding twice: 0.7480468529370716 became 0.75, not 0.74609375), 0.7 casts directly."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = x.astype(np.float32)
        inexact = (nearest.astype(np.float64) != x) & ~np.isnan(x)
        toward_zero = np.where(np.abs(nearest.astype(np.float64)) > np.abs(x),
                               np.nextafter(nearest, np.float32(0)), nearest)
    bits = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
    return np.where(inexact, bits.view(np.float32), nearest)


def batched_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over a leading batch axis, one BLAS call per matrix.

    NumPy's stacked `matmul` does not reach BLAS for 3-D operands here and runs ~50x slower than a loop of
    2-D products, which is why the interpreter loops."""
    out = np.empty(a.shape[:-1] + b.shape[-1:], np.result_type(a, b))
    for i in range(a.shape[0]):
        np.matmul(a[i], b[i], out=out[i])
    return out


def exact_reciprocal(divisor: float) -> float | None:
    """1/d where `x / d == x * (1/d)` bit for bit for every f32 x (IEEE round to nearest even, no flush to
    zero), else None: d = +-2^k with 1/d = +-2^-k a normal f32 (|k| <= 126).

    Why it holds: 1/d is then exact, so x * (1/d) is the exact real quotient x / d rounded once, which is what
    a correctly rounded division (`div.rn.f32`) returns; infinities, NaN, signed zeros, overflow and subnormal
    quotients follow, since both round the same real number (`mul.rn.f32` and `div.rn.f32` keep subnormals).
    Any other divisor has an inexact reciprocal (1/3, 1/30), and x * round(1/d) may differ from x / d in the
    last place, so it stays a division."""
    d = float(np.float32(divisor))
    if d != divisor or d == 0.0 or not np.isfinite(d):
        return None
    mantissa, exponent = np.frexp(abs(d))  # |d| = mantissa 2^exponent, mantissa in [0.5, 1)
    if mantissa != 0.5 or abs(int(exponent) - 1) > 126:
        return None
    return 1.0 / d


TWO_PI_HIGH = float(np.float32(2 * np.pi))
"""2 pi rounded to f32: the first constant of the sin/cos argument reduction x - n 2 pi (Cody and Waite)."""

TWO_PI_LOW = float(np.float32(2 * np.pi - TWO_PI_HIGH))
"""2 pi - TWO_PI_HIGH rounded to f32 (about -1.75e-7): together they are 2 pi within 2^-47."""

INV_TWO_PI = float(np.float32(1 / (2 * np.pi)))
"""1 / (2 pi) rounded to f32: n = rint(x INV_TWO_PI), the reduction's multiple of 2 pi."""

ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
            -0.82215223, 0.17087277)
"""The coefficients c0..c9 of erfc(z) = t exp(-z^2 + P(t)), P(t) = sum c_i t^i, t = 1 / (1 + z / 2), z >= 0, with a
relative error below 1.2e-7 everywhere (`ERFC_FIT_RELATIVE_ERROR`; Press, Teukolsky, Vetterling and Flannery,
Numerical Recipes, 3rd ed., 6.2.2)."""

ERFC_FIT_RELATIVE_ERROR = 1.2e-7
"""The fit's own relative error in erfc (with exact arithmetic), as Numerical Recipes states it."""

ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(10))
"""The Maclaurin coefficients of erf(x) / x in x^2 (2 / sqrt(pi) (-1)^n / (n! (2n + 1))), n = 0..9: on |x| < 1
the first omitted term, 2 / sqrt(pi) / (10! 21) < 1.5e-8, bounds the truncation (an alternating series of
decreasing terms) relative to erf(x) / x >= erf(1) > 0.84."""

ERF_SERIES_LIMIT = 1.0
"""|x| below which `tile.erf` is x times the series in x^2, and from which it is 1 - erfc from `ERFC_FIT`."""

F32_LARGEST = float(np.finfo(np.float32).max)
"""FLT_MAX, the largest finite f32."""

LOG2E = 1.4426950408889634
"""log2(e): below Tile level exp(x) is computed as ex2(x log2 e)."""

LN2 = 0.6931471805599453
"""ln(2): below Tile level log(x) is computed as lg2(x) ln 2."""


def exp2_factor(factor: float) -> float:
    """The f32 multiplier C that turns exp(factor x - m) into ex2(x C - m log2 e) (convert-tile-to-sm90 folds a
    `tile.scale` into the exponent's fma): f32(factor) x f32(log2 e), rounded once in f32.

    Rounded from the two f32 factors, not from the exact factor log2 e, so that it is exactly the product the
    row maximum goes through (m = f32(x_max factor), then f32(m log2 e)): for a score x = +-2^k, x C and
    f32(f32(x factor) log2 e) are then the same f32, and the largest score of a row gives ex2(0) = 1 exactly
    whatever its magnitude. Other huge scores do not (the fma leaves the rounding of m log2 e): a biased
    kernel, whose fills may be huge, subtracts first instead (`subtract_first` on tile.exp_subtract) and does
    not use C. For 1/sqrt(64), 1/sqrt(128) and 1/sqrt(256) it is the f32 nearest to factor log2 e as well."""
    return float(np.float32(factor) * np.float32(LOG2E))


ONE_FMA_SCALE_LIMIT = 16 / LOG2E
"""The largest softmax scale for which an attention kernel's exponent is one fma, ex2(x C - f32(m log2 e)) with
C = `exp2_factor(scale)` (about 11.09: scale log2 e <= 16). That fma leaves the rounding of m log2 e, an absolute
error of |m log2 e| 2^-24 in the exponent: at most 2^-10 for scores up to 2^10 below this scale; a kernel with a
larger scale subtracts before it scales (`subtract_first`), as a biased one does. (At scale 2^26 and scores of
40, m log2 e is near 2^32 and its rounding up to 2^8: the row's maximum got ex2(128) = inf and O = NaN.)"""


def bias_bound(scale: float) -> float:
    """The bound V to which an attention kernel saturates Bias / scale (`tile.saturating_scale`): the largest
    power of two, at most 2^127, with V exp2_factor(scale) a finite f32.

    A row whose every key is saturated has exactly equal scores -V scale and averages V uniformly, as the
    finite fill does in float64: the biased kernel's exponents subtract before they scale (`subtract_first`
    on tile.exp_subtract), so equal scores give exp(0) = 1 at any magnitude. A power of two as well, which
    the one-fma exponent (`exp2_factor`) would need for that. The bound on V exp2_factor(scale) keeps
    V scale log2 e a finite f32. For scale < 1.38 (scale log2 e < 2) it is 2^127."""
    factor = exp2_factor(scale)
    bound = 2.0**127
    while bound * factor > F32_LARGEST:  # exact in float64: a power of two times an f32
        bound /= 2
    return bound
