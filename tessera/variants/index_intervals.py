"""Interval bounds of a traced modifier's values for a launch (`tessera.variants.index_ranges`, step 1).

Each value of a traced graph (`tessera.variants.nodes.Node`) is bounded by [lo, hi] over every position of a
launch (`LaunchDims`: b in [0, batch), h in [0, heads), q_idx in [0, seq_q), kv_idx in [0, seq_k)): constants,
`+ - *`, true division by an interval without 0, `//` and `%` (Python's; a zero divisor gives 0, as the kernel's
and NumPy's integer division), min / max, abs, np.where (the union of its arms, or the one a decided compare
picks), conversions, the monotone functions (exp, exp2, log, log2, sqrt, tanh, the roundings), a gather (the
values of the part of its array the indices reach, 0 too where they may leave it) and a search's count (in
[0, n]). The score, and what these do not bound, is (-inf, inf); an i32 value that could wrap is the whole i32
range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.variants.nodes import BOOL, F32, I32_RANGE, Count, Node

_INF = math.inf


@dataclass(frozen=True)
class LaunchDims:
    """The positions a launch evaluates its modifiers at: b < batch, h < heads (query heads), q_idx < seq_q,
    kv_idx < seq_k."""

    batch: int
    heads: int
    seq_q: int
    seq_k: int

    def __str__(self) -> str:
        return f"batch {self.batch}, heads {self.heads}, seq_q {self.seq_q}, seq_k {self.seq_k}"

    def extent(self, leaf: str) -> int:
        return {"b": self.batch, "h": self.heads, "q_idx": self.seq_q, "kv_idx": self.seq_k}[leaf]




class Intervals:
    """Interval bounds [lo, hi] of a traced graph's values for a launch (module docstring, step 1), memoized
    by node. i32 values are Python ints (the whole i32 range where an operation could wrap), f32 values floats
    (-inf, inf where unknown or possibly NaN); booleans True, False or None (undecided)."""

    def __init__(self, dims: LaunchDims, counts: dict[int, Count]):
        self.dims, self.counts = dims, counts
        self.memo: dict[int, tuple] = {}
        self.wrapped: list[tuple[Node, tuple]] = []
        """The i32 values whose interval, computed from operands that are all bounded, leaves i32 (the kernel's
        arithmetic wraps or its conversion saturates where NumPy's int64 does not), with that interval."""
        self.unbounded: set[int] = set()
        """The values (by node id) whose interval is no bound of theirs: the score and what is made from it, a
        conversion of an infinite or NaN value, a wrapped value, and what is computed from those."""

    def of(self, node: Node):
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._of(node)
            if node.op == "score" or any(id(a) in self.unbounded for a in node.args):
                self.unbounded.add(key)
        return self.memo[key]

    def _of(self, node: Node):
        op, dtype = node.op, node.dtype
        if id(node) in self.counts:
            return (0, self.counts[id(node)].n)
        if op in ("b", "h", "q_idx", "kv_idx"):
            return (0, self.dims.extent(op) - 1)
        if op == "score":
            return (-_INF, _INF)
        if op == "const":
            return node.value if dtype == BOOL else (node.value, node.value)
        if dtype == BOOL:
            return self._truth(node)
        args = [self.of(a) for a in node.args]
        if op == "select":
            decided = args[0]
            if decided is not None:
                return args[1] if decided else args[2]
            result = (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]))
        elif op == "gather":
            result = _gathered(node.value.array, args)
        elif op == "to_f32":
            result = (float(args[0][0]), float(args[0][1]))
        elif op == "to_i32":
            lo, hi = args[0]
            if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or infinities: 0 or i32's ends
                self.unbounded.add(id(node))
                return I32_RANGE
            result = (math.trunc(lo), math.trunc(hi))
        else:
            result = _arithmetic(op, args)
        if dtype == F32:
            return result
        lo, hi = result
        if not (I32_RANGE[0] <= lo and hi <= I32_RANGE[1]):  # i32 arithmetic wraps: anything
            if not any(id(a) in self.unbounded for a in node.args):
                self.wrapped.append((node, (lo, hi)))
            self.unbounded.add(id(node))
            return I32_RANGE
        return (int(lo), int(hi))

    def _truth(self, node: Node):
        """True / False where the intervals decide a boolean, else None."""
        args = [self.of(a) for a in node.args]
        op = node.op
        if op == "not":
            return None if args[0] is None else not args[0]
        if op in ("and", "or"):
            a, b = args
            if op == "and":
                return False if False in (a, b) else (True if a is True and b is True else None)
            return True if True in (a, b) else (False if a is False and b is False else None)
        if op in ("lt", "le", "gt", "ge") and node.args[0].dtype != BOOL:
            (alo, ahi), (blo, bhi) = args
            if op in ("gt", "ge"):
                (alo, ahi), (blo, bhi), op = (blo, bhi), (alo, ahi), {"gt": "lt", "ge": "le"}[op]
            if (ahi < blo) if op == "lt" else (ahi <= blo):
                return True
            if (alo >= bhi) if op == "lt" else (alo > bhi):
                return False
        return None


def _arithmetic(op: str, args: list[tuple]) -> tuple:
    """Interval arithmetic of one numeric op; (-inf, inf) for what it does not bound."""
    if op in ("add", "sub", "mul", "min", "max"):
        (alo, ahi), (blo, bhi) = args
        if op == "add":
            return (alo + blo, ahi + bhi)
        if op == "sub":
            return (alo - bhi, ahi - blo)
        if op == "min":
            return (min(alo, blo), min(ahi, bhi))
        if op == "max":
            return (max(alo, blo), max(ahi, bhi))
        products = [_times(x, y) for x in (alo, ahi) for y in (blo, bhi)]
        return (min(products), max(products))
    if op == "neg":
        lo, hi = args[0]
        return (-hi, -lo)
    if op == "abs":
        lo, hi = args[0]
        return (max(lo, -hi, 0), max(-lo, hi))
    if op == "div" and not args[1][0] <= 0 <= args[1][1]:
        quotients = [x / y for x in args[0] for y in args[1] if math.isfinite(x) or math.isfinite(y)]
        return (min(quotients), max(quotients)) if len(quotients) == 4 else (-_INF, _INF)
    if op == "floordiv" and isinstance(args[0][0], int):
        return _floordiv(*args)
    if op == "mod" and isinstance(args[0][0], int):
        return _mod(*args)
    if op in ("floor", "ceil", "rint", "trunc"):
        lo, hi = args[0]
        return (math.floor(lo) if math.isfinite(lo) else lo, math.ceil(hi) if math.isfinite(hi) else hi)
    if op in ("exp", "exp2", "tanh", "sqrt", "log", "log2"):
        lo, hi = args[0]
        if op in ("sqrt", "log", "log2") and lo <= 0:
            return (-_INF, _INF)  # NaN below 0, -inf at 0
        f = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "tanh": math.tanh, "sqrt": math.sqrt, "log": math.log,
             "log2": math.log2}[op]
        return (_monotone(f, lo), _monotone(f, hi))
    return (-_INF, _INF)


def _times(x, y):
    if 0 in (x, y):
        return 0  # 0 * inf: the interval's end is a limit, 0 the value
    return x * y


def _monotone(f: Callable, x: float) -> float:
    try:
        return f(x)
    except OverflowError:
        return _INF if x > 0 else 0.0


def _floordiv(a: tuple, b: tuple) -> tuple:
    """a // b of i32 intervals; a zero divisor gives 0 (NumPy's integer division, the kernel's guard)."""
    parts = [(b[0], min(b[1], -1)), (max(b[0], 1), b[1])]
    values = [0] if b[0] <= 0 <= b[1] else []
    for lo, hi in parts:
        if lo <= hi:
            values += [x // y for x in a for y in (lo, hi)]
    return (min(values), max(values))


def _mod(a: tuple, b: tuple) -> tuple:
    """a % b of i32 intervals (Python's: the divisor's sign); a zero divisor gives 0."""
    lo, hi = (0, 0) if b[0] <= 0 <= b[1] else (None, None)

    def join(x, y):
        nonlocal lo, hi
        lo, hi = (x, y) if lo is None else (min(lo, x), max(hi, y))

    if b[1] > 0:
        if a[0] >= 0 and a[1] < max(b[0], 1):  # below every divisor: a itself
            join(*a)
        else:
            join(0, b[1] - 1)
    if b[0] < 0:
        if a[1] <= 0 and a[0] > min(b[1], -1):
            join(*a)
        else:
            join(b[0] + 1, 0)
    return (lo, hi)


def _gathered(array: np.ndarray, indices: list[tuple]) -> tuple:
    """The values of `array` over the box the index intervals reach (clipped to the array; the kernel reads 0
    outside it, so 0 too where the box leaves it)."""
    box, outside = [], False
    for (lo, hi), n in zip(indices, array.shape):
        outside |= not (0 <= lo and hi < n)
        first = max(int(lo), 0) if math.isfinite(lo) else 0
        last = min(int(hi), n - 1) if math.isfinite(hi) else n - 1
        if first > last:
            return (0, 0)
        box.append(slice(first, last + 1))
    part = array[tuple(box)]
    if part.dtype.kind == "f":
        if np.isnan(part).any():
            return (-_INF, _INF)
        lo, hi = float(part.min()), float(part.max())
    else:
        lo, hi = int(part.min()), int(part.max())
    return (min(lo, 0), max(hi, 0)) if outside else (lo, hi)
