"""Element types as NumPy sees them, and the rounding Tessera's interpreters apply.

bf16 comes from `ml_dtypes`; conversions to bf16/f16 round to nearest even, as `cvt.rn` does on the GPU.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, IndexType, IntegerType
from xdsl.ir import Attribute

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)

DTYPE_NAMES = {"bf16": BF16, "f16": F16, "f32": F32}


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """The NumPy dtype that holds elements of a Tile IR element type."""
    if isinstance(element_type, BFloat16Type):
        return BF16
    if isinstance(element_type, Float16Type):
        return F16
    if isinstance(element_type, Float32Type):
        return F32
    if isinstance(element_type, IndexType):
        return np.dtype(np.int64)
    if isinstance(element_type, IntegerType):
        return np.dtype({1: np.bool_, 8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[element_type.width.data])
    raise ValueError(f"no NumPy dtype for element type {element_type}")


def dtype_from_name(name: str) -> np.dtype:
    """'bf16' / 'f16' / 'f32' to a NumPy dtype; refuses other names."""
    try:
        return DTYPE_NAMES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype '{name}' (supported: {', '.join(DTYPE_NAMES)})") from None


def round_to(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert to `dtype`: round to nearest even for floats, truncate toward zero for integers."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(np.asarray(x).dtype, np.integer):
        return np.trunc(np.asarray(x, np.float64)).astype(dtype)
    return np.asarray(x).astype(dtype)


def batched_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over a leading batch axis, one BLAS call per matrix.

    NumPy's stacked `matmul` does not reach BLAS for 3-D operands here and runs ~50x slower than a loop of
    2-D products, which is why the interpreter loops."""
    out = np.empty(a.shape[:-1] + b.shape[-1:], np.result_type(a, b))
    for i in range(a.shape[0]):
        np.matmul(a[i], b[i], out=out[i])
    return out
