"""NumPy arrays and PyTorch tensors on the host: telling them apart and exchanging them bit for bit (bf16 and
FP8 through integers of their width, since NumPy holds them only through ml_dtypes). The bottom layer every
module that takes either kind uses: the runtime (`tessera.runtime.launch`) and the references' checks
(`tessera.reference`). PyTorch is never imported here: a tensor is recognised only if the caller's torch is
already loaded.
"""

from __future__ import annotations

import sys

import numpy as np

from tessera.numerics import BF16, F8E4M3, F8E5M2, F16, F32

_DTYPES_BY_NAME = {"bfloat16": BF16, "float16": F16, "float32": F32, "float8_e4m3fn": F8E4M3, "float8_e5m2": F8E5M2,
                   "int32": np.dtype(np.int32)}
"""PyTorch element type names (as `dtype_name` gives them) with the NumPy dtype of their kernel inputs (int32: the
integer arrays a modifier reads and the block lists, which `tessera.runtime.flex.as_inputs_of` passes as tensors;
without it a launch on tensors refused them as "must be int32, got int32")."""
_THROUGH_BITS = {BF16: "int16", F8E4M3: "uint8", F8E5M2: "uint8"}
"""Types NumPy holds only through ml_dtypes: exchanged with PyTorch as integers of their width, bit for bit."""


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_name(x) -> str:
    """The element type's name ("bfloat16", "float16", ...) of a NumPy array or a PyTorch tensor."""
    if is_torch_tensor(x):
        return str(x.dtype).removeprefix("torch.")
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype).name if dtype is not None else type(x).__name__


def element_dtype(x) -> np.dtype | None:
    """The NumPy dtype of a NumPy array's or tensor's elements, None for a type kernels do not take."""
    if is_torch_tensor(x):
        return _DTYPES_BY_NAME.get(dtype_name(x))
    return np.dtype(x.dtype) if isinstance(x, np.ndarray) else None


def torch_to_numpy(x) -> np.ndarray:
    """A CPU tensor's values as a NumPy array; bf16 and FP8 (float8_e4m3fn, float8_e5m2) through their bits,
    exactly (NumPy has them only through ml_dtypes)."""
    torch = _torch()
    x = x.detach().contiguous()
    dtype = _DTYPES_BY_NAME.get(dtype_name(x))
    if dtype in _THROUGH_BITS:
        return x.view(getattr(torch, _THROUGH_BITS[dtype])).numpy().view(dtype)
    return x.numpy()


def numpy_to_torch(a: np.ndarray):
    """A NumPy array as a CPU tensor (bf16 and FP8 through their bits)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if a.dtype in _THROUGH_BITS:
        return torch.from_numpy(a.view(_THROUGH_BITS[a.dtype]).copy()).view(_torch_dtype(a.dtype))
    return torch.from_numpy(a.copy())


def _torch_dtype(dtype: np.dtype):
    return getattr(_torch(), _NAMES_BY_DTYPE[np.dtype(dtype)])


_NAMES_BY_DTYPE = {dtype: name for name, dtype in _DTYPES_BY_NAME.items()}



def host_numpy(x):
    """`x` as NumPy: a PyTorch tensor (on any device) through `torch_to_numpy`, a tuple or list element by
    element, anything else unchanged (NumPy's own conversions apply where it is used)."""
    if is_torch_tensor(x):
        return torch_to_numpy(x.detach().cpu())
    if isinstance(x, (tuple, list)):
        return type(x)(host_numpy(item) for item in x)
    return x
