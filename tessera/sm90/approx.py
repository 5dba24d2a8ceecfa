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
"""

from __future__ import annotations

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
