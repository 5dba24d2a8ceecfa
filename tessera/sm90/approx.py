"""Error bounds of the approximate transcendental instructions [P#floating-point-instructions-lg2,
-ex2, -rcp], for tolerances: the simulators compute the correctly rounded value, the hardware is within these.

`lg2.approx.f32 a`: absolute error at most 2^-22 when a is in (0.5, 2); relative error at most 2^-22 for
other positive finite a. Special values: -inf, -normal -> NaN; -0, +0 -> -inf; +inf -> +inf; NaN -> NaN;
with `.ftz`, subnormal inputs are flushed to (sign-preserving) zero first, so they give -inf.
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
