"""np.searchsorted / np.digitize / torch.searchsorted / torch.bucketize in a score_mod or mask_mod, traced.

A modifier that searches a captured 1-D array of boundaries (`doc = torch.searchsorted(offsets, q_idx,
right=True)`, relative-position buckets `torch.bucketize(abs(q_idx - kv_idx), boundaries)`, a piecewise bias
of the score `np.digitize(score, bins)`) is traced (`tessera.variants.trace`, `torch_mods`) into a graph of
the ops every modifier uses: compares, selects, i32 adds and gathers of the captured array.

The value searched for is the count of boundaries before it: `side="left"` (torch's `right=False`) counts
b[j] < v, `side="right"` counts b[j] <= v; torch.bucketize(v, b, right=r) is torch.searchsorted(b, v, right=r),
and np.digitize(x, bins, right=r) is np.searchsorted(bins, x, side="left" if r else "right") for increasing
bins, n less that of the reversed bins for decreasing ones (NumPy's definition). A NaN value counts every
boundary, as both libraries give it. Each count is that of P(j) = not (v OP c[j]) (OP `le` for the left side,
`lt` for the right one: the negation makes a NaN value true everywhere), and the boundaries are sorted
(checked at capture: `boundaries_problem`), so P holds on a prefix of them and the count is where it stops:

- up to `UNROLLED_SEARCH_MAX` boundaries, unrolled: acc = select(v OP c[j], acc, j + 1) for j = 0, 1, ... (a
  compare against an immediate and a select a boundary; the boundaries are constants of the kernel, as a
  captured array's read at a constant index is);
- more, a branch-free binary search (the lower bound of "Array layouts for comparison-based searching"): with
  base = 0 and length = n, while length > 1: half = length // 2, base = select(v OP c[base + half], base,
  base + half), length -= half; then the count is base + (1 if P(base) else 0). Every index is in [0, n - 1];
  ceil(log2 n) steps, each an add, a gather of the captured array (`tile.gather`, bounds-checked like any),
  a compare and a select; the first step's base is 0, so its boundary is a constant.

Both compute the same count, so they agree bit for bit at every level.

Two counts of the same boundaries compared for equality (`doc(q_idx) == doc(kv_idx)`, `SearchedEqual`) are
emitted as one search and two compares (`same_count`): the kernel searches the operand that is a row vector and
compares the other against bounds gathered at that count (a window's two compares, for integers).

The compares are of the value's type: for an i32 value the boundaries as i32, a float boundary b taken as
floor(b) against `le` (v <= b iff v <= floor(b) for an integer v) and ceil(b) against `lt`, each clipped to the
i32 range, so an index is compared exactly as the libraries compare it (bar i32's two extreme values); for an
f32 value (the score) the boundaries rounded to f32 (monotone: still sorted). Such converted boundaries are a
kernel input of their own where the binary search gathers them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.variants.nodes import BOOL, F32, I32, CapturedArray, Node

UNROLLED_SEARCH_MAX = 16
"""Searches of at most this many boundaries are unrolled compares; longer ones a binary search with gathers."""

SIDES = ("left", "right")

_I32_MIN, _I32_MAX = -2**31, 2**31 - 1


def boundaries_problem(array: np.ndarray, decreasing: bool = False) -> str | None:
    """Why `array` cannot be searched (not 1-D, empty, not numbers, NaN, not sorted), or None. `decreasing`:
    np.digitize's bins may also be non-increasing."""
    if array.ndim != 1 or array.size == 0:
        return f"its shape {array.shape} is not that of a non-empty 1-D array of sorted boundaries"
    if array.dtype.kind not in "iuf":
        return f"its dtype {array.dtype} is not a number type"
    if array.dtype.kind == "f" and np.isnan(array).any():
        return f"it holds NaN at index {int(np.flatnonzero(np.isnan(array))[0])} (NumPy and torch order NaN " \
               "differently)"
    steps = np.diff(array.astype(np.float64) if array.dtype.kind == "f" else array.astype(object))
    if (steps >= 0).all() or (decreasing and (steps <= 0).all()):
        return None
    first = int(np.flatnonzero(steps < 0)[0])
    order = "increasing or decreasing" if decreasing else "increasing"
    return (f"it is not sorted in {order} order ({array[first].item()!r} at index {first} before "
            f"{array[first + 1].item()!r}); "
            "a search needs sorted boundaries")


def effective_boundaries(value_dtype: str, array: np.ndarray, side: str) -> tuple[np.ndarray, str]:
    """(c, OP): the boundaries as the kernel compares them with a value of `value_dtype` ("i32" or "f32"), and the
    compare whose negation counts (module docstring)."""
    op = "le" if side == "left" else "lt"
    if value_dtype == F32:
        with np.errstate(over="ignore"):
            return array.astype(np.float32), op
    if array.dtype.kind == "f":
        array = np.floor(array) if op == "le" else np.ceil(array)
    return np.clip(array.astype(np.float64) if array.dtype.kind == "f" else array, _I32_MIN, _I32_MAX).astype(
        np.int32), op


def _const(value, dtype: str) -> Node:
    return Node("const", (), dtype, float(value) if dtype == F32 else int(value))


def _index(value: int) -> Node:
    return Node("const", (), I32, int(value))


def unrolled_count(value: Node, c: np.ndarray, op: str) -> Node:
    """The count of j with not (value OP c[j]) over sorted constants c: one compare and one select each."""
    count = _index(0)
    for j, boundary in enumerate(c):
        holds = Node(op, (value, _const(boundary, value.dtype)), BOOL)
        count = Node("select", (holds, count, _index(j + 1)), I32)
    return count


def binary_count(value: Node, c: np.ndarray, op: str, table: CapturedArray) -> Node:
    """The same count by a branch-free binary search, gathering c from the kernel input `table` (module
    docstring); the first probe, at base 0, compares against the constant c[n // 2]."""
    base, length = None, len(c)
    while length > 1:
        half = length // 2
        if base is None:
            holds = Node(op, (value, _const(c[half], value.dtype)), BOOL)
            base = Node("select", (holds, _index(0), _index(half)), I32)
        else:
            probe = Node("add", (base, _index(half)), I32)
            holds = Node(op, (value, Node("gather", (probe,), table.dtype, table)), BOOL)
            base = Node("select", (holds, base, probe), I32)
        length -= half
    last = _const(c[0], value.dtype) if base is None else Node("gather", (base,), table.dtype, table)
    past = Node("select", (Node(op, (value, last), BOOL), _index(0), _index(1)), I32)
    return past if base is None else Node("add", (base, past), I32)


@dataclass(frozen=True, eq=False)
class Search:
    """A traced search: `count` (the node) is the number of j with not (`value` OP c[j]) over the sorted
    boundaries `c`; `table` the kernel input c is gathered from (by the binary search, and by `same_count`'s
    lookups; None where nothing gathers it)."""

    value: Node
    c: np.ndarray
    op: str
    table: CapturedArray | None
    count: Node

    def same_boundaries(self, other: Search) -> bool:
        return self.op == other.op and self.c.dtype == other.c.dtype and np.array_equal(self.c, other.c)


def search_count(value: Node, array: np.ndarray, side: str, table: Callable[[np.ndarray], CapturedArray]) -> Search:
    """np.searchsorted(array, value, side) of a traced i32 or f32 `value` and sorted host boundaries `array`:
    unrolled up to `UNROLLED_SEARCH_MAX` boundaries, else a binary search gathering the kernel input `table(c)`
    gives for the compared boundaries c."""
    c, op = effective_boundaries(value.dtype, array, side)
    if len(c) <= UNROLLED_SEARCH_MAX:
        return Search(value, c, op, None, unrolled_count(value, c, op))
    kept = table(c)
    return Search(value, c, op, kept, binary_count(value, c, op, kept))


def digitize_count(value: Node, bins: np.ndarray, right: bool,
                   table: Callable[[np.ndarray], CapturedArray]) -> tuple[Node, Search]:
    """np.digitize(value, bins, right) of monotonic `bins`: a search of the increasing bins, or n less that of
    the reversed decreasing ones (NumPy's definition); the node and the search."""
    side = "left" if right else "right"
    if len(bins) > 1 and bins[0] > bins[-1]:
        search = search_count(value, bins[::-1].copy(), side, table)
        return Node("sub", (_index(len(bins)), search.count), I32), search
    search = search_count(value, bins, side, table)
    return search.count, search


@dataclass(frozen=True, eq=False)
class SearchedEqual:
    """The `value` of an "eq" node between the counts of two searches of the same boundaries (a document mask's
    `searchsorted(offsets, q_idx) == searchsorted(offsets, kv_idx)`): the node means that equality, and the
    kernel emits it as `same_count` of the search of the operand that is a row vector (a search of a column vector
    would broadcast against the constants, row vectors, to the whole tile) and the other's value; `bounds` holds
    `count_bounds` of integer searches."""

    first: Search
    second: Search
    bounds: CapturedArray | None = None


def count_bounds(search: Search) -> np.ndarray | None:
    """For an i32 search, L padded: [i32 min, L[0], ..., L[n - 1], i32 max] where P(j) is y >= L[j] (L = c + 1 for
    `le`, c for `lt`, clipped to i32), so that count(y) = d is L'[d] <= y < L'[d + 1] with no case for d = 0 or n
    (bar i32's two extreme values); None for an f32 search (a NaN or infinite value has no such bound)."""
    if search.value.dtype != I32:
        return None
    lower = search.c.astype(np.int64) + (1 if search.op == "le" else 0)
    return np.clip(np.concatenate([[_I32_MIN], lower, [_I32_MAX]]), _I32_MIN, _I32_MAX).astype(np.int32)


def _lookup(search: Search, index: Node) -> Node:
    """c[index] for an index in [0, n - 1]: a gather of the search's table."""
    assert search.table is not None, "same_count gathers the boundaries"
    return Node("gather", (index,), search.table.dtype, search.table)


def same_count(search: Search, other: Node, bounds: CapturedArray | None = None) -> Node:
    """Whether `other` counts as many boundaries as `search`'s value, d: P(d - 1) and not P(d) at `other`
    (P(j) = not (other OP c[j]) holds on a prefix; P(-1) holds, P(n) does not), from bounds gathered once for
    `search`'s value (a row vector's: two loads a row): two compares per element of `other` instead of its
    whole search. With `bounds` (`count_bounds`, integers) L'[d] <= other < L'[d + 1], a window's compares
    applied one after the other; else from c[d - 1] and c[d], with the cases d = 0 and d = n."""
    d, n, op = search.count, len(search.c), search.op
    if bounds is not None:
        low = Node("gather", (d,), I32, bounds)
        high = Node("gather", (Node("add", (d, _index(1)), I32),), I32, bounds)
        return Node("and", (Node("ge", (other, low), BOOL), Node("lt", (other, high), BOOL)), BOOL)
    below = _lookup(search, Node("max", (Node("sub", (d, _index(1)), I32), _index(0)), I32))
    above = _lookup(search, Node("min", (d, _index(n - 1)), I32))
    if other.dtype == I32:  # not (y <= c) is y > c, not (y < c) is y >= c
        past = Node({"le": "gt", "lt": "ge"}[op], (other, below), BOOL)
    else:  # NaN: only the negation counts it
        past = Node("not", (Node(op, (other, below), BOOL),), BOOL)
    first = Node("or", (Node("eq", (d, _index(0)), BOOL), past), BOOL)
    last = Node("or", (Node("eq", (d, _index(n)), BOOL), Node(op, (other, above), BOOL)), BOOL)
    return Node("and", (first, last), BOOL)
