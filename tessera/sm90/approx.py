"""Error bounds of the approximate transcendental instructions [P#floating-point-instructions-lg2,
-ex2, -rcp, -rsqrt, -tanh], for tolerances: the simulators compute the correctly rounded value, the hardware is
within these. The PTX ISA's sentences (tests/test_sm90_facts.py derives each bound from them):

`tanh.approx.f32`: "The maximum relative error over the entire floating point range is 2^-11." (sm_75+;
subnormals are kept; 2^-10.987 is the *absolute* bound of the .f16 form, not the f32 one's).
`rsqrt.approx.f32`: "The maximum relative error for rsqrt.f32 over the entire positive finite floating-point
range is 2^-22.9." `rcp.approx.f32`: "The maximum ulp error is 1 across the full range of inputs.", a relative
error of at most 2^-23. `ex2.approx.f32`: "The maximum ulp error is 2 ulp from correctly rounded result across
the full range of inputs.", at most 2^-22 of the correctly rounded result.

`lg2.approx.f32`: "The maximum absolute error is 2^-22 when the input operand is in the range (0.5, 2). For
positive finite inputs outside of this interval, maximum relative error is 2^-22." Special values: -inf,
-normal -> NaN; -0, +0 -> -inf; +inf -> +inf; NaN -> NaN; with `.ftz`, subnormal inputs are flushed to
(sign-preserving) zero first, so they give -inf.

`sin.approx.f32` and `cos.approx.f32` [P#floating-point-instructions-sin, -cos]: "The maximum absolute error over
input range is as follows: [-2pi .. 2pi] 2-20.5, [-100pi .. +100pi] 2-14.7. Outside of the range [-100pi ..
+100pi], only best effort is provided. There are no defined error guarantees." Special values: +-inf, NaN -> NaN;
sin(+-0) = +-0, cos(+-0) = 1; without .ftz subnormals are kept.

CUDA's fast-math intrinsics, which nvcc lowers to these instructions and a few more (`__expf` to a multiply
by log2(e) and `ex2.approx`, `__logf` to `lg2.approx` and a multiply, `__sinf`/`__cosf` to `sin.approx`/
`cos.approx`, `__fdividef` to `div.approx`), are bounded as wholes by the CUDA C++ Programming Guide's table
"Single-Precision Floating-Point Intrinsic Functions" (`intrinsic_error_bound`): "__fdividef(x,y): For |y| in
[2^-126, 2^126], the maximum ulp error is 2."; "__expf(x): The maximum ulp error is 2 + floor(abs(1.173 * x)).";
"__logf(x): For x in [0.5, 2], the maximum absolute error is 2^-21.41, otherwise, the maximum ulp error is 3.";
"__sinf(x): For x in [-pi, pi], the maximum absolute error is 2^-21.41, and larger otherwise."; "__cosf(x): For x
in [-pi, pi], the maximum absolute error is 2^-21.19, and larger otherwise." `rsqrtf` is `rsqrt.approx.f32`.
"""

from __future__ import annotations

import math

import numpy as np

LG2_APPROX_ERROR = 2.0**-22
"""lg2.approx.f32: the absolute error bound on (0.5, 2) and the relative error bound elsewhere."""

LG2_APPROX_ABSOLUTE_RANGE = (0.5, 2.0)
"""The open interval of inputs on which `LG2_APPROX_ERROR` bounds the absolute error."""


def lg2_approx_error_bound(a) -> np.ndarray:
    """The largest |lg2.approx.f32(a) - log2(a)| the PTX ISA allows, per positive finite input a."""
    a = np.asarray(a, np.float64)
    lo, hi = LG2_APPROX_ABSOLUTE_RANGE
    inside = (a > lo) & (a < hi)
    return np.where(inside, LG2_APPROX_ERROR, LG2_APPROX_ERROR * np.abs(np.log2(np.where(inside, 1.0, a))))


TANH_APPROX_RELATIVE_ERROR = 2.0**-11
"""tanh.approx.f32: the maximum relative error over the whole range (the least accurate of the lowerings)."""

RSQRT_APPROX_RELATIVE_ERROR = 2.0**-22.9
"""rsqrt.approx.f32: the maximum relative error over the whole range."""

RCP_APPROX_RELATIVE_ERROR = 2.0**-23
"""rcp.approx.f32: 1 ulp, i.e. a relative error of at most 2^-23."""

EX2_APPROX_RELATIVE_ERROR = 2.0**-22
"""ex2.approx.f32: 2 ulp from the correctly rounded result, i.e. at most 2^-22 of it (for normal f32 results)."""


def approx_relative_error(instruction: str) -> float:
    """The documented relative error bound of `<instruction>.approx.f32` (ex2, rcp, rsqrt, tanh; lg2's bound
    is mixed absolute/relative: `lg2_approx_error_bound`). Raises ValueError for another name."""
    bounds = {"ex2": EX2_APPROX_RELATIVE_ERROR, "rcp": RCP_APPROX_RELATIVE_ERROR,
              "rsqrt": RSQRT_APPROX_RELATIVE_ERROR, "tanh": TANH_APPROX_RELATIVE_ERROR}
    if instruction not in bounds:
        raise ValueError(f"no documented relative error bound for {instruction}.approx.f32 (known: {', '.join(bounds)})")
    return bounds[instruction]


SIN_COS_APPROX_ABSOLUTE_ERROR = ((2 * np.pi, 2.0**-20.5), (100 * np.pi, 2.0**-14.7))
"""sin.approx.f32 / cos.approx.f32: (r, the maximum absolute error for inputs in [-r, r]); none beyond 100 pi."""

SIN_COS_REDUCED_LIMIT = 2.0**24
"""The largest |x| whose reduction x - rint(x / 2 pi) 2 pi (`tessera.numerics.TWO_PI_HIGH`, two fmas) stays in
[-2 pi, 2 pi]: the f32 quotient x (1 / 2 pi) is within |x| 2^-23 / 2 pi of x / 2 pi, so the remainder is within
pi + |x| 2^-23 (pi + 2 at 2^24)."""


def sin_cos_error_bound(x) -> np.ndarray:
    """The largest |result - sin(x)| (or cos) of Tessera's lowering of `tile.sin` / `tile.cos`: `sin.approx.f32`
    of x - n 2 pi, n = rint(f32(x (1 / 2 pi))), the remainder formed by two fmas with 2 pi = C1 + C2 + e (C1, C2
    f32, |e| <= 2^-47). For |x| <= 2^24 the remainder lies in [-2 pi, 2 pi] (`SIN_COS_REDUCED_LIMIT`), each fma
    rounds it by at most half an ulp of a value below 8 (2^-22), and e contributes |n| 2^-47 with |n| <=
    |x| / 2 pi + 1; sin and cos are 1-Lipschitz, so the bound is 2^-20.5 + 2^-21 + (|x| / 2 pi + 1) 2^-47. Beyond
    2^24 nothing is guaranteed: 2, the most two values in [-1, 1] differ by. Per input x (any shape)."""
    x = np.abs(np.asarray(x, np.float64))
    reduced = SIN_COS_APPROX_ABSOLUTE_ERROR[0][1] + 2.0**-21 + (x / (2 * np.pi) + 1) * 2.0**-47
    return np.where(x <= SIN_COS_REDUCED_LIMIT, reduced, 2.0)


def erf_error_bound(x) -> np.ndarray:
    """The largest |result - erf(x)| of Tessera's lowering of `tile.erf`, per input x (any shape), from the
    f32 unit roundoff U = 2^-24, `RCP_APPROX_RELATIVE_ERROR`, `EX2_APPROX_RELATIVE_ERROR` and the series' and the
    fit's own errors (`tessera.numerics.ERF_SERIES`, `ERFC_FIT`), by running the error analysis on x:
    - |x| < 1: x Q(x^2), Q the series' Horner polynomial in f32 fmas: the truncation (1.5e-8 of |x|), the
      coefficients' rounding to f32 (U sum |a_i| u^i), Horner's rounding (gamma_9 sum |a_i| u^i, Higham 5.3),
      u = x^2's rounding through Q' (U u sum i |a_i| u^(i-1)), and the product's rounding (2^-150 where it is
      subnormal);
    - |x| >= 1: sign(x) (1 - t e), t = rcp.approx(1 + |x| / 2), e = ex2.approx((P(t) - x^2) log2 e): erfc(|x|)
      times the relative error of t e (the fit's, t's, ex2's, the exponent's absolute error: P's coefficients and
      Horner as above, P' times t's error, the fma and the multiply by log2 e each U |arg|) and the final
      subtraction's rounding; a result ex2.approx.ftz flushes below 2^-126 adds 2^-126."""
    from tessera.numerics import ERF_SERIES, ERFC_FIT, ERFC_FIT_RELATIVE_ERROR, LOG2E

    unit = 2.0**-24
    gamma9 = 9 * unit / (1 - 9 * unit)
    x = np.abs(np.asarray(x, np.float64))
    with np.errstate(all="ignore"):
        u = np.minimum(x * x, 1.0)
        series = sum(abs(a) * u**i for i, a in enumerate(ERF_SERIES))
        slope = sum(i * abs(a) * u ** (i - 1) for i, a in enumerate(ERF_SERIES) if i)
        q = sum(a * u**i for i, a in enumerate(ERF_SERIES))
        small = x * (1.5e-8 + (unit + gamma9) * series + unit * u * slope) + unit * x * q * (1 + 2 * unit) \
            + np.where(x > 0, 2.0**-150, 0.0)  # a subnormal product's rounding: absolute, half of 2^-149
        z = np.maximum(x, 1.0)
        t = 1.0 / (1.0 + 0.5 * z)
        t_rel = RCP_APPROX_RELATIVE_ERROR + 2 * unit
        fit = sum(abs(c) * t**i for i, c in enumerate(ERFC_FIT))
        fit_slope = sum(i * abs(c) * t ** (i - 1) for i, c in enumerate(ERFC_FIT) if i)
        argument = np.abs(sum(c * t**i for i, c in enumerate(ERFC_FIT)) - z * z)
        exponent = (unit + gamma9) * fit + fit_slope * t * t_rel * 1.01 + 2 * unit * argument \
            + abs(float(np.float32(LOG2E)) - LOG2E) / LOG2E * argument
        relative = ERFC_FIT_RELATIVE_ERROR + t_rel + EX2_APPROX_RELATIVE_ERROR + unit + np.expm1(np.minimum(exponent, 700))
        erfc = np.asarray(np.frompyfunc(math.erfc, 1, 1)(z), np.float64)
        large = erfc * relative * 1.01 + unit + 2.0**-126
    return np.where(x < 1.0, small, large)


F32_ULP_RELATIVE = 2.0**-23
"""One ulp of an f32 value v is at most 2^-23 |v|: an n-ulp bound is at most n 2^-23 |v|."""

FDIVIDEF_ULPS, FDIVIDEF_DIVISOR_RANGE = 2, (2.0**-126, 2.0**126)
"""__fdividef(x, y): 2 ulp for |y| in [2^-126, 2^126]."""

EXPF_ULPS = (2, 1.173)
"""__expf(x): 2 + floor(|1.173 x|) ulp."""

LOGF_ABSOLUTE_ERROR, LOGF_ABSOLUTE_RANGE, LOGF_ULPS = 2.0**-21.41, (0.5, 2.0), 3
"""__logf(x): absolute 2^-21.41 for x in [0.5, 2], else 3 ulp."""

SINF_ABSOLUTE_ERROR, COSF_ABSOLUTE_ERROR, SINCOS_RANGE = 2.0**-21.41, 2.0**-21.19, (-np.pi, np.pi)
"""__sinf(x), __cosf(x): absolute 2^-21.41 and 2^-21.19 for x in [-pi, pi]; unbounded ("larger") elsewhere."""


STANDARD_FUNCTION_ULPS = {"expf": 2, "logf": 1, "log1pf": 1, "sinf": 2, "tanhf": 2, "erff": 2, "powf": 4, "exp": 1}
"""The CUDA C++ Programming Guide's maximum ulp errors of the standard functions (its tables "Single-Precision
Mathematical Standard Library Functions with Maximum ULP Error" and the double-precision one), which nvcc's
math library and Triton's libdevice (`erf`, `log1p`) implement in full-precision arithmetic; x / y and sqrt are
IEEE (0 ulp) as nvcc compiles them by default (-prec-div, -prec-sqrt)."""


def intrinsic_error_bound(name: str, operand, exact) -> np.ndarray:
    """The largest |result - exact| the CUDA guide allows the fast-math intrinsic `name` (__expf, __logf,
    __sinf, __cosf, __fdividef, rsqrtf) per element: `operand` is the argument its range names (x; y, the
    divisor, for __fdividef), `exact` the exact value. Outside a stated range the bound is inf (none stated)."""
    x, exact = np.asarray(operand, np.float64), np.abs(np.asarray(exact, np.float64))
    inside = lambda low, high: (x >= low) & (x <= high)  # noqa: E731
    if name == "__fdividef":
        low, high = FDIVIDEF_DIVISOR_RANGE
        return np.where(inside(low, high) | inside(-high, -low), FDIVIDEF_ULPS * F32_ULP_RELATIVE * exact, np.inf)
    if name == "__expf":
        base, slope = EXPF_ULPS
        return (base + np.floor(np.abs(slope * x))) * F32_ULP_RELATIVE * exact
    if name == "__logf":
        return np.where(inside(*LOGF_ABSOLUTE_RANGE), LOGF_ABSOLUTE_ERROR, LOGF_ULPS * F32_ULP_RELATIVE * exact)
    if name in ("__sinf", "__cosf"):
        bound = SINF_ABSOLUTE_ERROR if name == "__sinf" else COSF_ABSOLUTE_ERROR
        return np.where(inside(*SINCOS_RANGE), bound, np.inf)
    if name == "rsqrtf":
        return RSQRT_APPROX_RELATIVE_ERROR * exact
    raise ValueError(f"no documented error bound for {name} (known: __expf, __logf, __sinf, __cosf, __fdividef, "
                     "rsqrtf)")
