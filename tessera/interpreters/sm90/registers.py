"""Per-thread register values of the CTA simulator.

Every SSA value of Target IR is held for all T threads of the CTA at once: a scalar of type T is a NumPy array
[T], a `vector<N x T>` (N registers of one thread) is [T, N]. The NumPy dtype follows the IR type, so that
arithmetic rounds and wraps as the machine does: f32 stays float32 (every op rounds to f32), i32 and `index`
(a `.s32` register) are int32 and wrap at 32 bits, i64 wraps at 64, i1 is bool. A tensor map is a Python
object shared by all threads (it is a kernel parameter).
"""

from __future__ import annotations

from functools import lru_cache

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    VectorType,
)
from xdsl.ir import Attribute

WORD_BYTES = 4
"""Loads, stores and shuffles move 32-bit registers."""

INDEX_DTYPE = np.dtype(np.int32)
"""`index` values are 32-bit signed registers (`.s32`), per the sm90 dialect."""

_INT_DTYPES = {1: np.dtype(np.bool_), 8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32),
               64: np.dtype(np.int64)}
UNSIGNED = {np.dtype(np.int8): np.dtype(np.uint8), np.dtype(np.int16): np.dtype(np.uint16),
            np.dtype(np.int32): np.dtype(np.uint32), np.dtype(np.int64): np.dtype(np.uint64),
            np.dtype(np.bool_): np.dtype(np.uint8)}


def element_type(ty: Attribute) -> Attribute:
    return ty.element_type if isinstance(ty, VectorType) else ty


def lanes(ty: Attribute) -> int | None:
    """N for vector<N x T> (registers per thread), None for a scalar."""
    if isinstance(ty, VectorType):
        shape = ty.get_shape()
        if len(shape) != 1:
            raise ValueError(f"per-thread registers are 1-D vectors, got {ty}")
        return shape[0]
    return None


_DTYPES: dict[int, tuple[Attribute, np.dtype]] = {}
"""`dtype_of` by the id of the type object (kept with it, so the id stays its own): the implementations ask at
every run of an op, and xDSL's attribute `isinstance` checks cost microseconds each."""


def dtype_of(ty: Attribute) -> np.dtype:
    """The NumPy dtype of one register of IR type `ty` (or of a vector's elements)."""
    cached = _DTYPES.get(id(ty))
    if cached is not None and cached[0] is ty:
        return cached[1]
    dtype = _dtype_of(ty)
    if len(_DTYPES) > 4096:
        _DTYPES.clear()
    _DTYPES[id(ty)] = (ty, dtype)
    return dtype


def _dtype_of(ty: Attribute) -> np.dtype:
    ty = element_type(ty)
    if isinstance(ty, IndexType):
        return INDEX_DTYPE
    if isinstance(ty, IntegerType):
        return _INT_DTYPES[ty.width.data]
    if isinstance(ty, Float32Type):
        return np.dtype(np.float32)
    if isinstance(ty, Float16Type):
        return np.dtype(np.float16)
    if isinstance(ty, BFloat16Type):
        return np.dtype(ml_dtypes.bfloat16)
    if isinstance(ty, Float64Type):
        return np.dtype(np.float64)
    raise ValueError(f"the CTA simulator has no registers of type {ty}")


def bit_width(ty: Attribute) -> int:
    ty = element_type(ty)
    if isinstance(ty, IndexType):
        return 32
    if isinstance(ty, IntegerType):
        return ty.width.data
    return dtype_of(ty).itemsize * 8


def thread_shape(ty: Attribute, threads: int) -> tuple[int, ...]:
    n = lanes(ty)
    return (threads,) if n is None else (threads, n)


def full(ty: Attribute, threads: int, value) -> np.ndarray:
    """A value of type `ty` equal to `value` in every thread (wrapping integers to the type's width)."""
    dtype = dtype_of(ty)
    if dtype.kind in "iu":
        value = np.asarray(value, np.int64).astype(dtype)  # two's-complement wrap
    elif dtype.kind == "b":
        value = np.asarray(value).astype(bool)
    return filled(thread_shape(ty, threads), value, dtype)


def filled(shape, value, dtype) -> np.ndarray:
    """`np.full(shape, value, dtype)` (the same cast of `value`) without its Python-level dispatch, a few
    microseconds at each of the hundreds of small arrays a launch fills."""
    array = np.empty(shape, dtype)
    array.fill(value)
    return array


def row_mask(mask: np.ndarray, value: np.ndarray) -> np.ndarray:
    """A [T] thread mask shaped to broadcast against `value` ([T] or [T, N])."""
    return mask.reshape((-1,) + (1,) * (value.ndim - 1))


def unsigned(values: np.ndarray) -> np.ndarray:
    """The same bits as unsigned integers."""
    return values.view(UNSIGNED[values.dtype]) if values.dtype != np.bool_ else values.astype(np.uint8)


def as_signed64(value: int) -> int:
    """A 64-bit pattern as the int64 NumPy holds it."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def as_unsigned64(value) -> int:
    return int(value) & ((1 << 64) - 1)


@lru_cache(maxsize=None)
def _lanes_dtype(nbytes: int) -> np.dtype:
    """A void dtype of `nbytes` bytes: one thread's lanes of a register value as one item (`concatenated_lanes`)."""
    return np.dtype((np.void, nbytes))


def concatenated_lanes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """`np.concatenate([first, second], axis=1)` of [T, a] and [T, b] registers of one dtype, each thread's lanes
    of each operand moved as one void item: the same bytes, while NumPy's concatenation copies thread by thread
    (two inner-loop calls per thread; a vector built four lanes at a time, as flash attention's rows are, pays
    them at every step). Operands whose lanes are not contiguous, or of different dtypes, take NumPy's."""
    a, b, size = first.shape[1], second.shape[1], first.itemsize
    if (first.dtype != second.dtype or not a or not b or (a > 1 and first.strides[1] != size)
            or (b > 1 and second.strides[1] != size)):
        return np.concatenate([first, second], axis=1)
    out = np.empty((len(first), a + b), first.dtype)
    out[:, :a].view(_lanes_dtype(a * size))[...] = first.view(_lanes_dtype(a * size))
    out[:, a:].view(_lanes_dtype(b * size))[...] = second.view(_lanes_dtype(b * size))
    return out
