"""Floating-point rounding as PTX specifies it, on NumPy arrays.

Rounding modes are PTX's: "rn" (nearest, ties to even), "rz" (toward zero), "rm" (toward -inf), "rp" (toward
+inf). Every result is *correctly rounded* once from the exact value, the way the hardware does it:

- products of two f32 (or narrower) values are exact in float64; a sum of two float64 values is made exact
  enough with TwoSum and then rounded to float64 *to odd* (`sum_to_odd`). Rounding a round-to-odd float64 to
  f32/f16/bf16 (at least 2 bits narrower) in any mode gives the correctly rounded result of the exact value,
  so `fma.rn.f32` is a single rounding (no double-rounding error) and `add.rz.f32` is exact too.
- f16/bf16 results go float64 -> f32 (to odd) -> 16-bit, for the same reason.
- float64 arithmetic is done by NumPy (round to nearest; `fma.rn.f64` by `fma_f64`, one rounding); directed
  modes for f64 arithmetic are refused by the decoder (they would need more than float64).

The approximate functions (`ex2`, `lg2`, `rcp`, `rsqrt`, `sqrt`, `sin`, `cos`, `tanh` with `.approx`) return
the correctly rounded f32 of the exact function, which is within the error the PTX ISA documents for each
(e.g. ex2: 2 ulp; rcp: 1 ulp): compare kernel results with a tolerance, as for the Target IR simulator.
`.ftz` flushes f32 subnormal inputs and results to zero of the same sign; `.sat` clamps to [0, 1], NaN -> 0.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.truth import any_set
from tessera.sm90.rounding import INTEGER_ROUNDING

MODES = ("rn", "rz", "rm", "rp")
INTEGER_MODES = {modifier: getattr(np, function) for function, modifier in INTEGER_ROUNDING.items()}
"""Round to an integral value in the float type (cvt .rni/.rzi/.rmi/.rpi): nearest even, zero, down, up; the
modifiers' meanings are `tessera.sm90.rounding`'s (NumPy's floor/ceil/rint/trunc by the same names)."""

_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def flush_f32(x: np.ndarray) -> np.ndarray:
    """`.ftz`: f32 subnormals become zero of the same sign."""
    x = np.asarray(x, np.float32)
    small = np.abs(x) < _F32_TINY
    if not any_set(small) or not any_set(x[small]):  # nothing below the smallest normal but zeros, which stay as they are
        return x  # (an exponential's input and output hold zeros: a row's maximum minus itself, a masked score)
    return np.where(small, np.copysign(np.float32(0), x), x).astype(np.float32)


def has_nan_f32(x: np.ndarray) -> bool:
    """Whether the f32 array `x` holds a NaN: one maximum reduction (NumPy's maximum propagates NaN in its vector
    loop, `tessera.sm90.nan`)."""
    return x.size > 0 and bool(np.isnan(np.maximum.reduce(x, axis=None)))


_BF16_TIE = np.uint32(0x7FFF)


def bf16_rn_words(x: np.ndarray) -> np.ndarray:
    """f32 values `x` (no NaN: `has_nan_f32`) rounded to the nearest bf16, ties to even, as uint32 words whose bits
    31:16 are the bf16's bits (bits 15:0 are left over): the f32 bits plus 0x7FFF plus the bf16's last bit, whose
    carry rounds up past the halfway point, and at it only from an odd bf16; a carry out of the fraction steps the
    exponent, out of the largest finite value to infinity. The bits of ml_dtypes' cast for every f32 that is not a
    NaN (checked over all 2^32 patterns; a NaN takes the cast)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return bits + ((bits >> np.uint32(16)) & np.uint32(1)) + _BF16_TIE


def saturate(x: np.ndarray) -> np.ndarray:
    """`.sat`: clamp to [0.0, 1.0]; NaN becomes 0."""
    return np.where(np.isnan(x), np.zeros((), x.dtype), np.clip(x, 0, 1)).astype(x.dtype)


def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")


def _step(r: np.ndarray, up: np.ndarray) -> np.ndarray:
    """The neighbour of finite-or-infinite r one ulp up (where `up`) or down, in r's own format."""
    u = _unsigned(r.dtype)
    bits = r.view(u).copy()
    sign_bit = u.type(1 << (u.itemsize * 8 - 1))
    negative = (bits & sign_bit) != 0
    zero = (bits & ~sign_bit) == 0
    away = up != negative  # moving away from zero in magnitude
    stepped = np.where(away, bits + u.type(1), bits - u.type(1))
    # from +-0: up gives the smallest positive subnormal, down the smallest negative one
    stepped = np.where(zero, np.where(up, u.type(1), sign_bit | u.type(1)), stepped)
    return stepped.astype(u).view(r.dtype)


def _directed(r: np.ndarray, exact: np.ndarray, mode: str) -> np.ndarray:
    """Turn a round-to-nearest result r of `exact` (compared in a wider type) into the `mode` result."""
    if mode == "rn":
        return r
    wide = r.astype(exact.dtype)
    with np.errstate(invalid="ignore"):
        if mode == "rz":
            fix = np.abs(wide) > np.abs(exact)
            up = wide < 0
        elif mode == "rm":
            fix = wide > exact
            up = np.zeros(r.shape, bool)
        elif mode == "rp":
            fix = wide < exact
            up = np.ones(r.shape, bool)
        else:
            raise ValueError(f"unknown rounding mode {mode!r}")
    if not any_set(fix):
        return r
    return np.where(fix, _step(r, up), r)


def to_odd_f32(x: np.ndarray) -> np.ndarray:
    """float64 -> f32 rounded to odd: an inexact result takes the neighbour whose last bit is 1 (overflow
    gives the largest finite f32, which is odd)."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
        inexact = (r.astype(np.float64) != x) & ~np.isnan(x)
    if not any_set(inexact):
        return r
    big = np.float32(np.finfo(np.float32).max)
    r = np.where(inexact & np.isinf(r), np.copysign(big, x).astype(np.float32), r)
    even = (r.view(np.uint32) & 1) == 0
    fix = inexact & even
    return np.where(fix, _step(r, r.astype(np.float64) < x), r)


def round_f64(x: np.ndarray, dtype: np.dtype, mode: str = "rn") -> np.ndarray:
    """float64 values (exact, or rounded to odd from the exact value) rounded to `dtype` (f64, f32, f16,
    bf16) in `mode`."""
    x = np.asarray(x, np.float64)
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == np.float64:
            if mode != "rn":
                raise ValueError("directed rounding of float64 arithmetic is not supported")
            return x
        if dtype == np.float32:
            return _directed(x.astype(np.float32), x, mode)
        odd = to_odd_f32(x)
        return _directed(odd.astype(dtype), odd, mode)


def round_f32(x: np.ndarray, dtype: np.dtype, mode: str = "rn") -> np.ndarray:
    """f32 values rounded to a 16-bit float `dtype` (or f32/f64) in `mode`."""
    x = np.asarray(x, np.float32)
    if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64)):
        return x.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return _directed(x.astype(dtype), x, mode)


def sum_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b (float64) rounded to odd from the exact sum (TwoSum gives the exact error)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = a + b
        bb = s - a
        err = (a - (s - bb)) + (b - bb)
        fix = (err != 0) & np.isfinite(s) & ((s.view(np.uint64) & 1) == 0)
    if not any_set(fix):
        return s
    return np.where(fix, _step(s, err > 0), s)


def add(a: np.ndarray, b: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    """a + b of two float arrays of `dtype` with one rounding in `mode`."""
    if np.dtype(dtype) == np.float64 or (mode == "rn" and np.dtype(dtype) == np.float32):
        with np.errstate(all="ignore"):
            return (a + b).astype(dtype, copy=False)
    return round_f64(sum_to_odd(a.astype(np.float64), b.astype(np.float64)), dtype, mode)


def mul(a: np.ndarray, b: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    """a * b with one rounding (the float64 product of two f32 values is exact)."""
    if np.dtype(dtype) == np.float64 or (mode == "rn" and np.dtype(dtype) == np.float32):
        with np.errstate(all="ignore"):
            return (a * b).astype(dtype, copy=False)
    with np.errstate(all="ignore"):
        return round_f64(a.astype(np.float64) * b.astype(np.float64), dtype, mode)


_BELOW_F32_LSB = np.uint64((1 << 29) - 1)
"""The float64 fraction bits below an f32's last (52 - 23 = 29)."""
_F32_MIDPOINT = np.uint64(1 << 28)
"""Those bits of a float64 that lies halfway between two f32 neighbours."""
_F32_NORMAL_SUMS = 2.0 ** -125
"""Sums at least this large round to normal f32 values (24 bits: `_F32_MIDPOINT` marks their midpoints)."""


_VELTKAMP = 2.0**27 + 1.0
"""Splits a float64 into two halves of 26 bits whose products are exact (Dekker's product)."""
_F64_SPLIT_LIMIT = 2.0**995
"""|x| below this: the Veltkamp split of x does not overflow."""
_F64_EXACT_PRODUCT = 2.0**-969
"""|a * b| at least this (2^(-1022 + 53)): the rounding error of the float64 product is a float64 itself."""


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fma.rn.f64: a * b + c rounded once. The exact product as p + e (Dekker's product, Veltkamp's split),
    p + c as s + t (TwoSum), then s + RO(t + e), round to odd inside: correctly rounded (Boldo and Melquiond,
    "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd", 2008). Lanes where
    the split could overflow, the product's error could underflow or the result is not finite take NumPy's
    a * b + c (two roundings): nvcc's f64 library code (exp, log, the Payne-Hanek reduction) needs the one
    rounding to stay within its documented ulps."""
    a, b, c = (np.asarray(x, np.float64) for x in (a, b, c))
    with np.errstate(all="ignore"):
        plain = a * b + c
        p = a * b
        big_a, big_b = _VELTKAMP * a, _VELTKAMP * b
        a_hi, b_hi = big_a - (big_a - a), big_b - (big_b - b)
        a_lo, b_lo = a - a_hi, b - b_hi
        e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
        s = p + c
        back = s - p
        t = (p - (s - back)) + (c - back)
        fused = s + sum_to_odd(t, e)
        exact = ((np.abs(p) >= _F64_EXACT_PRODUCT) | (p == 0)) & (np.abs(a) < _F64_SPLIT_LIMIT) & \
            (np.abs(b) < _F64_SPLIT_LIMIT) & np.isfinite(fused) & (np.abs(fused) >= _F64_EXACT_PRODUCT)
    return np.where(exact, fused, plain)


def _cast_into(out: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`out` (f32) = `x` (float64) rounded as `x.astype(np.float32)` rounds it."""
    np.copyto(out, x, casting="same_kind")
    return out


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: np.dtype, mode: str, out=None) -> np.ndarray:
    """a * b + c with a single rounding in `mode` (f64 operands: `fma_f64`); an f32 result written into `out` where
    given (an f32 array the size of the result, which may be an operand: every operand is read before it is written)
    and returned.

    fma.rn.f32 takes a shortcut that gives the same bits: the float64 sum s of the exact product and c,
    rounded to f32, is the correctly rounded f32 of the exact sum unless s is itself an f32 midpoint (an f32
    midpoint strictly between the exact sum and s would be a float64 nearer the exact sum than s), or the sum
    is small enough to round to an f32 subnormal; those lanes take the round-to-odd path."""
    with np.errstate(all="ignore"):
        if np.dtype(dtype) == np.float64:
            return fma_f64(a, b, c)
        product = a.astype(np.float64) * b.astype(np.float64)
        if mode == "rn" and np.dtype(dtype) == np.float32:
            s = product + c
            midpoint = (s.view(np.uint64) & _BELOW_F32_LSB) == _F32_MIDPOINT
            if not (any_set(midpoint) or any_set((np.abs(s) < _F32_NORMAL_SUMS) & (s != 0))):
                return s.astype(np.float32) if out is None else _cast_into(out, s)
            # an exact s (TwoSum's error zero in every lane: a running sum's fma(1, p, l) lands on midpoints, the
            # exact sum of two f32 values needing 25 bits) rounds once by the cast, subnormal results too
            back = s - product
            if not any_set((product - (s - back)) + (c - back)):
                return s.astype(np.float32) if out is None else _cast_into(out, s)
        result = round_f64(sum_to_odd(product, c.astype(np.float64)), dtype, mode)
        if out is not None:
            out[...] = result
            return out
        return result


def divide(a: np.ndarray, b: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    """IEEE a / b: the float64 quotient of f32 values rounded once more is correctly rounded (53 >= 2*24+2)."""
    with np.errstate(all="ignore"):
        if np.dtype(dtype) == np.float64:
            return a / b
        return round_f64(a.astype(np.float64) / b.astype(np.float64), dtype, mode)


def sqrt(a: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if np.dtype(dtype) == np.float64:
            return np.sqrt(a)
        return round_f64(np.sqrt(a.astype(np.float64)), dtype, mode)


APPROX = {
    "ex2": np.exp2,
    "lg2": np.log2,
    "rcp": lambda x: 1.0 / x,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
}
"""The exact functions behind `<name>.approx.f32`, evaluated in float64 and rounded once to f32."""


def approx(name: str, x: np.ndarray, ftz: bool, out=None) -> np.ndarray:
    """`<name>.approx{.ftz}.f32 x`, written into `out` where given (an f32 array the size of the result, which may be
    `x` itself) and returned."""
    x = flush_f32(x) if ftz else np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        wide = APPROX[name](x.astype(np.float64))
    if out is None:
        result = wide.astype(np.float32)
        return flush_f32(result) if ftz else result
    _cast_into(out, wide)
    if ftz:
        flushed = flush_f32(out)
        if flushed is not out:
            out[...] = flushed
    return out


def float_to_int(x: np.ndarray, dtype: np.dtype, rounding) -> np.ndarray:
    """cvt.<rounding>i.<int>.<float>: round to integral, NaN -> 0, saturate to the integer type's range."""
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    with np.errstate(all="ignore"):
        r = rounding(np.asarray(x, np.float64))
        r = np.where(np.isnan(r), 0.0, r)
        low = r <= float(info.min)
        high = r >= float(info.max) + 1.0 if info.max < 2**53 else r >= 2.0 ** (dtype.itemsize * 8 - (dtype.kind == "i"))
        safe = np.where(low | high, 0.0, r)
        out = safe.astype(dtype)
    out = np.where(low, dtype.type(info.min), out)
    return np.where(high, dtype.type(info.max), out).astype(dtype)


def int_to_float(x: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    """cvt.<mode>.<float>.<int>: one correct rounding of the integer value."""
    x = np.asarray(x)
    if x.dtype.itemsize > 4:  # split in 32-bit halves, each exact in float64
        signed = x.dtype.kind == "i"
        high = (x >> 32).astype(np.int64 if signed else np.uint64).astype(np.float64) * 2.0**32
        low = (x.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.float64)
    if np.dtype(dtype) == np.float64:
        if mode == "rn" or x.dtype.itemsize <= 4:
            return x.astype(np.float64)  # exact for 32-bit integers; C's correctly rounded cast for 64-bit
        # cvt.rz/rm/rp.f64.{s,u}64 (__ll2double_rz, ...): the nearest sum, and its exact error (TwoSum)
        # says on which side of it the integer lies
        nearest = high + low
        back = nearest - high
        error = (high - (nearest - back)) + (low - back)
        up = {"rz": nearest < 0, "rm": np.zeros(x.shape, bool), "rp": np.ones(x.shape, bool)}[mode]
        fix = (error != 0) & ((error > 0) == up)
        return np.where(fix, _step(nearest, up), nearest)
    exact = x.astype(np.float64) if x.dtype.itemsize <= 4 else sum_to_odd(high, low)  # to odd: rounds once
    return round_f64(exact, dtype, mode)
