"""The canonical NaN: the one NaN bit pattern the hardware's floating-point arithmetic produces, for the
simulators (a NaN result carries no payload of its inputs). tests/test_sm90_nan.py checks the table against
the sentences quoted here.

f32: the CUDA C++ Programming Guide's section on the floating-point standard gives an operation with a NaN
input the quiet NaN 0x7fffffff (single precision has one NaN, no payloads); math_constants.h (CUDA 13.5) defines
`CUDART_NAN_F` as `__int_as_float(0x7fffffffU)`. f16 and bf16: cuda_fp16.h and cuda_bf16.h, on `__hmax`/`__hmin`
and their bf16 forms: "If both inputs are NaNs, then canonical NaN is returned."; on `__hmax_nan`/`__hmin_nan`:
"If either of inputs is NaN, then canonical NaN is returned."; cuda_fp16.hpp and cuda_bf16.hpp define
`CUDART_NAN_FP16` as `__ushort_as_half((unsigned short)0x7FFFU)` and `CUDART_NAN_BF16` as
`__ushort_as_bfloat16((unsigned short)0x7FFFU)`; `fma.relu` [P#half-precision-floating-point-instructions-fma]
gives that canonical NaN for a NaN result. f64 arithmetic is not covered: the simulators keep NumPy's NaN there.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

CANONICAL_NAN_BITS = {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF}
"""The bit pattern of a NaN result, by PTX float type: f32 arithmetic (add, sub, mul, div, fma, min, max) and
the 16-bit min/max (`__hmax`, `__hmin_nan`, ...; packed types per half)."""


_CANONICAL_NANS = {np.dtype(np.float32): np.array(CANONICAL_NAN_BITS["f32"], np.uint32).view(np.float32),
                   np.dtype(np.float16): np.array(CANONICAL_NAN_BITS["f16"], np.uint16).view(np.float16),
                   np.dtype(ml_dtypes.bfloat16): np.array(CANONICAL_NAN_BITS["bf16"], np.uint16).view(ml_dtypes.bfloat16)}


_BY_MAXIMUM = (np.dtype(np.float32), np.dtype(np.float16))
"""Types whose NumPy maximum propagates NaN in its vector loop (ml_dtypes' bfloat16 has none: its NaN is found by
`np.isnan`)."""


def with_canonical_nans(x: np.ndarray) -> np.ndarray:
    """`x` (f32, f16 or bf16) with every NaN its type's canonical NaN, as an operation with a NaN result gives it
    on the hardware; one pass where no NaN is (the usual: f32 and f16 by one maximum, which a NaN anywhere makes
    NaN). Other dtypes as they are."""
    nan = _CANONICAL_NANS.get(x.dtype)
    if nan is None:
        return x
    if x.dtype in _BY_MAXIMUM:
        if x.size == 0:
            return x
        peak = np.maximum.reduce(x, axis=None)
        if peak == peak:  # not NaN (the one value unequal to itself: np.isnan on a scalar costs 40x more)
            return x
    where = np.isnan(x)
    return np.where(where, nan, x) if np.count_nonzero(where) else x
