"""Captured integer arrays narrower than NumPy's default integer (int8, int16, uint8, uint16, uint32, uint64): the
values read from them keep their dtype in NumPy and torch, so arithmetic among them, or with a Python int, is
computed in that dtype and wraps (`U16[q_idx] - U16[kv_idx]` of positions is 65531 for -5 in uint16), where the
kernel computes every integer in i32. The reference runs the hooks on NumPy grids, so the two would disagree.

A value read from such an array is a `Narrow`: its NumPy dtype and the interval of its values (the array's
least and largest, known when traced: integer arrays are never free, `tessera.variants.captured`). An op on
narrow values whose NumPy result is again a narrow integer type (`result`) is traced when the interval of its
result fits that type (then i32 computes the same values: `U8[kv_idx] + 3` of small ids) and is refused by name
otherwise, naming the dtype and the conversion to write. An index grid (int64 in NumPy and torch), an int32 or
int64 array, a NumPy integer scalar of 64 bits or a float beside a narrow value promotes it to a wide type, where
nothing wraps at these sizes (the i32 bounds are proved apart). A cast to int8 or int16 (`cast`) is traced only
where it cannot wrap either: of a boolean, or of a narrow value whose interval fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

WIDE = (np.dtype(np.int32), np.dtype(np.int64))
"""The integer dtypes whose arithmetic the kernel's i32 computes as NumPy does (within i32, proved apart)."""
_INTERVAL_OPS = ("add", "sub", "mul", "neg", "abs", "min", "max", "floordiv", "mod", "pos", "where", "pow",
                 "lshift", "rshift", "and", "or", "xor", "not")
"""The ops whose result interval `_interval` bounds; on narrow values any other op that stays narrow is refused."""


@dataclass(frozen=True)
class Narrow:
    """A traced integer value of a narrow NumPy dtype, whose values lie in [lo, hi]."""

    dtype: np.dtype
    lo: int
    hi: int


def of_array(array: np.ndarray) -> Narrow | None:
    """What a read of `array` (a non-empty captured array, as the kernel takes it) gives: a Narrow for an integer
    dtype other than int32 and int64, else None."""
    if array.dtype.kind not in "iu" or array.dtype in WIDE:
        return None
    return Narrow(array.dtype, int(array.min()), int(array.max()))


def result(op: str, operands: tuple, narrow_of: Callable[[object], Narrow | None], dtype_of: Callable[[object], str],
           refuse: Callable[[str], Exception]) -> Narrow | None:
    """The Narrow of `op` on `operands` (traced values and numbers), or None where NumPy's result is not a narrow
    integer (no operand narrow, a float or a wide integer beside them, a compare). `narrow_of(x)` is a traced
    operand's Narrow, `dtype_of(x)` its traced dtype ("f32", "i32", "bool"). Refuses (`refuse`) an op whose NumPy
    result wraps for the operands' values, or one whose wrapping is not modelled here."""
    narrows = [narrow_of(x) for x in operands]
    if not any(narrows) or op in ("lt", "le", "gt", "ge", "eq", "ne"):
        return None
    dtypes = []
    for x, n in zip(operands, narrows):
        if n is not None:
            dtypes.append(n.dtype)
        elif isinstance(x, np.integer):  # a NumPy scalar keeps its dtype (np.int64(2) * U8[h] is int64)
            dtypes.append(x.dtype)
        elif isinstance(x, (float, np.floating)) or (not isinstance(x, (bool, int, np.bool_))
                                                     and dtype_of(x) in ("f32", "i32")):
            return None  # a float, an index grid or a wide array's value: NumPy's result is not narrow
        # a Python int or bool, a traced boolean: takes the narrow operand's dtype (NEP 50), as in torch
    dtype = np.result_type(*dtypes)
    if dtype.kind not in "iu" or dtype in WIDE or op in ("div", "exp", "exp2", "log", "log2", "tanh", "sqrt",
                                                         "reciprocal"):
        return None
    info = np.iinfo(dtype)
    intervals = [(n.lo, n.hi) if n is not None else (int(x), int(x)) if not _traced_bool(x, dtype_of) else (0, 1)
                 for x, n in zip(operands, narrows)]
    lo, hi = _interval(op, intervals) if op in _INTERVAL_OPS else (None, None)
    if lo is None:
        raise refuse(f"'{op}' of {dtype} values read from a captured array (NumPy and torch compute it in {dtype}, "
                     "which may wrap, and the kernel in i32: convert the array to np.int32 or np.int64 first)")
    if lo < info.min or hi > info.max:
        raise refuse(f"'{op}' of {dtype} values read from a captured array, which reaches [{lo}, {hi}]: NumPy and "
                     f"torch compute it in {dtype}, where it wraps (the kernel computes in i32); convert the array "
                     "to np.int32 or np.int64 first, or the value read with .astype(np.int64) (torch: .long())")
    return Narrow(dtype, lo, hi)


def _traced_bool(x: object, dtype_of: Callable[[object], str]) -> bool:
    return not isinstance(x, (bool, int, np.integer, np.bool_)) and dtype_of(x) == "bool"


def _interval(op: str, intervals: list[tuple[int, int]]) -> tuple[int | None, int | None]:
    """The interval of `op` over the operands' intervals (None, None where it is not modelled)."""
    if op == "pos":
        return intervals[0]
    if op in ("neg", "not"):  # ~x is -x - 1 in two's complement (an unsigned type's wraps: refused)
        lo, hi = intervals[0]
        return (-hi, -lo) if op == "neg" else (-hi - 1, -lo - 1)
    if op == "abs":
        lo, hi = intervals[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    (alo, ahi), (blo, bhi) = intervals
    if op == "add":
        return alo + blo, ahi + bhi
    if op == "sub":
        return alo - bhi, ahi - blo
    if op == "where":  # the two branches (np.where(c, a, b), torch.where)
        return min(alo, blo), max(ahi, bhi)
    if op in ("and", "or", "xor"):  # of non-negative values: below the next power of two of the larger
        return (0, (1 << max(ahi, bhi).bit_length()) - 1) if min(alo, blo) >= 0 else (None, None)
    if op in ("pow", "lshift", "rshift") and (blo != bhi or blo < 0):
        return None, None  # a traced or negative exponent or shift
    if op == "pow":
        ends = [alo ** blo, ahi ** blo] + ([0] if alo <= 0 <= ahi else [])
        return min(ends), max(ends)
    if op in ("lshift", "rshift"):
        return (alo << blo, ahi << blo) if op == "lshift" else (alo >> blo, ahi >> blo)
    if op in ("mul", "floordiv"):
        if op == "floordiv" and blo <= 0 <= bhi:  # NumPy's x // 0 is 0; a divisor of either sign near 0
            bound = max(abs(alo), abs(ahi))
            return -bound, bound
        corners = [a * b if op == "mul" else a // b for a in (alo, ahi) for b in (blo, bhi)]
        return min(corners), max(corners)
    if op == "mod":  # the divisor's sign, below its magnitude (0 for a zero divisor)
        return min(0, blo + 1), max(0, bhi - 1)
    return (min(alo, blo), min(ahi, bhi)) if op == "min" else (max(alo, blo), max(ahi, bhi))


def cast(target: np.dtype, narrow: Narrow | None, dtype: str, refuse: Callable[[str], Exception]) -> Narrow | None:
    """`.astype(target)` of a traced value of traced dtype `dtype` ("f32", "i32", "bool"), marked `narrow` or
    not, to a signed integer type: the Narrow of the result for int8 or int16, None for a wide type. NumPy and
    torch wrap a value outside int8 / int16 (a float's conversion is undefined there), where the kernel keeps
    i32: allowed of a boolean (0 or 1) and of a narrow value whose interval fits, refused by name otherwise."""
    if target in WIDE or target.itemsize >= 4:
        return None
    info = np.iinfo(target)
    lo, hi = (0, 1) if dtype == "bool" else (narrow.lo, narrow.hi) if narrow is not None else (None, None)
    if lo is None or lo < info.min or hi > info.max:
        raise refuse(f".astype({target}) of a value that may leave {target} (NumPy and torch wrap it there, the "
                     "kernel computes in i32: convert to np.int32 or np.int64, in torch .int() or .long())")
    return Narrow(target, lo, hi)
