"""Proving a modifier's reads of captured arrays in bounds for a launch, before any kernel runs.

A score_mod or mask_mod reads the arrays it captures at indices computed from its arguments (`slopes[h]`,
`doc_ids[kv_idx]`, `table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]`). Every read (`nodes.Read`, recorded by
`tessera.variants.trace`) must stay inside its array for every position of the launch: b in [0, batch),
h in [0, heads), q_idx in [0, seq_q), kv_idx in [0, seq_k) (`LaunchDims`). `check_reads` proves it:

1. interval arithmetic over the index's graph: the arguments' ranges, constants, `+ - *`, `//` and `%`
   (Python's: `x % n` of a positive n is in [0, n)), min / max / np.clip, abs, np.where (the union of its arms,
   or one arm where the condition's compare is decided by the intervals), `.astype(int)`, reads of integer
   arrays (the values of the part of the array the indices reach), searches' counts (in [0, n]) and f32
   arithmetic of those; the score's range is unknown;
2. where the intervals are too coarse (`np.where(n < 8, n, log_bucket)`), the index is evaluated exactly, as
   the kernel computes it (i32 arithmetic, NumPy's float32 for f32 values), over its index domain: the
   arguments it depends on, each on its own axis, with `q_idx - kv_idx` (or `kv_idx - q_idx`) one axis of
   seq_q + seq_k - 1 differences where the index reads q_idx and kv_idx only through it (a relative
   position), as long as the domain has at most `EXACT_EVALUATION_LIMIT` positions;
3. otherwise (an index computed from the score, or from q_idx and kv_idx over a larger grid) the read is
   refused by name: Tessera cannot prove it in bounds; wrap the index in np.clip.

An index that does reach outside its array is refused with `IndexRangeError` naming the modifier, the line of
the read, the array's name and shape, the index expression, the range it reaches and the launch's dims.
Negative indices are refused too (NumPy would wrap them, and torch; the kernel's gather reads 0 there): write
`i % n` for a wrap, or np.clip.

A kernel built with `flash_attention(score_mod=, mask_mod=)` or `attention_backward(score_mod=, mask_mod=)`
knows no shapes; its builder registers its traces (`check_at_launch`), and `tessera.launch` / `tessera.interpret`
prove them for the launch's batch, heads, seq_q and seq_k (`check_launch`) before running it, with the captured
arrays' traced values (a read's range through an integer array, `offsets[doc_ids[q_idx]]`, is that of the
values traced). The kernels stay safe without this check: `tile.gather` is a bounds-checked read (0 outside the table, a
predicated `ld.global` at every level below Tile IR), so a kernel launched with other shapes than those checked
never reads another buffer.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.variants.nodes import BOOL, F32, Count, Node, Read
from tessera.variants.trace import ModTraceError, trace_mod

EXACT_EVALUATION_LIMIT = 1 << 24
"""The most positions of an index's domain that `check_reads` evaluates exactly (about a second of NumPy at
the largest): a 4096 x 4096 (q_idx, kv_idx) grid, or any relative position (seq_q + seq_k - 1 differences)."""

_CHUNK = 1 << 20
"""Positions evaluated at once (a few MB per temporary)."""

_I32 = (-2**31, 2**31 - 1)
_INF = math.inf


class IndexRangeError(ModTraceError):
    """A read of a captured array that reaches outside it for a launch, or that cannot be proved inside it:
    the message names the modifier, the line, the array, the index and the range it reaches, and the launch.
    A `ModTraceError` (a ValueError), as the reference's refusal of the same read is."""


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


# region intervals


class _Intervals:
    """Interval bounds [lo, hi] of a traced graph's values for a launch (module docstring, step 1), memoized
    by node. i32 values are Python ints (the whole i32 range where an operation could wrap), f32 values floats
    (-inf, inf where unknown or possibly NaN); booleans True, False or None (undecided)."""

    def __init__(self, dims: LaunchDims, counts: dict[int, Count]):
        self.dims, self.counts = dims, counts
        self.memo: dict[int, tuple] = {}

    def of(self, node: Node):
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._of(node)
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
                return _I32
            result = (math.trunc(lo), math.trunc(hi))
        else:
            result = _arithmetic(op, args)
        if dtype == F32:
            return result
        lo, hi = result
        if not (_I32[0] <= lo and hi <= _I32[1]):  # i32 arithmetic wraps: anything
            return _I32
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


# endregion
# region exact evaluation


def _leaves(node: Node, memo: dict) -> frozenset:
    """The arguments (b, h, q_idx, kv_idx, score, and "d" for q_idx - kv_idx read as one) `node` depends on."""
    if id(node) not in memo:
        if _difference(node):
            memo[id(node)] = frozenset({"d"})
        elif node.op in ("b", "h", "q_idx", "kv_idx", "score"):
            memo[id(node)] = frozenset({node.op})
        else:
            memo[id(node)] = frozenset().union(*(_leaves(a, memo) for a in node.args))
    return memo[id(node)]


def _difference(node: Node) -> int:
    """1 for q_idx - kv_idx, -1 for kv_idx - q_idx, 0 for any other node."""
    if node.op != "sub" or {a.op for a in node.args} != {"q_idx", "kv_idx"}:
        return 0
    return 1 if node.args[0].op == "q_idx" else -1


_NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
          "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log2": np.log2, "log": np.log,
          "tanh": np.tanh, "sqrt": np.sqrt, "reciprocal": np.reciprocal, "div": np.true_divide, "floor": np.floor,
          "ceil": np.ceil, "rint": np.rint, "trunc": np.trunc, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and,
          "or": np.logical_or, "not": np.logical_not, "select": np.where, "fmod": np.fmod}


class _Evaluation:
    """A graph's values as the kernel computes them (i32 arithmetic wrapping, NumPy's float32 for f32 values, a
    zero integer divisor giving 0, a gather reading 0 outside its table) over a domain of the arguments (each
    an array broadcasting on its own axis)."""

    def __init__(self, grids: dict[str, np.ndarray]):
        self.grids = grids
        self.memo: dict[int, np.ndarray] = {}

    def of(self, node: Node) -> np.ndarray:
        if id(node) not in self.memo:
            self.memo[id(node)] = self._of(node)
        return self.memo[id(node)]

    def _of(self, node: Node) -> np.ndarray:
        op = node.op
        sign = _difference(node)
        if sign and "d" in self.grids:
            return (self.grids["d"] * sign).astype(np.int32)
        if op in self.grids:
            return self.grids[op]
        if op == "const":
            return np.asarray(node.value, {F32: np.float32, BOOL: bool}.get(node.dtype, np.int32))
        args = [self.of(a) for a in node.args]
        with np.errstate(all="ignore"):
            if op == "gather":
                return _gather(node.value.array, args)
            if op == "to_f32":
                return args[0].astype(np.float32)
            if op == "to_i32":
                x = np.nan_to_num(args[0].astype(np.float64), nan=0.0)
                return np.trunc(np.clip(x, *_I32)).astype(np.int32)
            if op in ("floordiv", "mod") and node.dtype != F32:
                a, b = (x.astype(np.int64) for x in args)
                safe = np.where(b == 0, 1, b)
                out = np.where(b == 0, 0, a // safe if op == "floordiv" else a % safe)
                return out.astype(np.int64).astype(np.int32)
            if op in ("floordiv", "mod"):
                return (np.floor_divide if op == "floordiv" else np.remainder)(*args).astype(np.float32)
            out = _NUMPY[op](*args)
        if node.dtype == BOOL:
            return np.asarray(out, bool)
        if node.dtype == F32:
            return np.asarray(out, np.float32)
        return np.asarray(out, np.int64).astype(np.int32)  # i32's wrap-around


def _gather(array: np.ndarray, indices: list[np.ndarray]) -> np.ndarray:
    shape = np.broadcast_shapes(*(i.shape for i in indices))
    coords = [np.broadcast_to(i, shape).astype(np.int64) for i in indices]
    inside = np.ones(shape, bool)
    for i, n in zip(coords, array.shape):
        inside &= (i >= 0) & (i < n)
    values = array[tuple(np.clip(i, 0, n - 1) for i, n in zip(coords, array.shape))]
    return np.where(inside, values, np.zeros((), array.dtype))


def _domain(leaves: frozenset, dims: LaunchDims) -> list[tuple[str, np.ndarray]]:
    """(argument, values) per axis of an index's domain: the difference q_idx - kv_idx is one axis only where the
    index reads neither q_idx nor kv_idx otherwise (else the two are axes of their own)."""
    if "d" in leaves and leaves & {"q_idx", "kv_idx"}:
        leaves = (leaves - {"d"}) | {"q_idx", "kv_idx"}
    axes = []
    for leaf in ("b", "h", "q_idx", "kv_idx"):
        if leaf in leaves:
            axes.append((leaf, np.arange(dims.extent(leaf), dtype=np.int32)))
    if "d" in leaves:
        axes.append(("d", np.arange(-(dims.seq_k - 1), dims.seq_q, dtype=np.int32)))
    return axes


def _exact_range(index: Node, axes: list[tuple[str, np.ndarray]]) -> tuple[int, int]:
    """The index's smallest and largest values over the domain, evaluated `_CHUNK` positions at a time along
    the largest axis."""
    big = max(range(len(axes)), key=lambda i: axes[i][1].size) if axes else None
    rest = int(np.prod([v.size for i, (_, v) in enumerate(axes) if i != big]))
    step = max(1, _CHUNK // max(rest, 1))
    lo, hi = None, None
    starts = range(0, axes[big][1].size, step) if axes else (0,)
    for start in starts:
        grids = {}
        for i, (name, values) in enumerate(axes):
            chunk = values[start:start + step] if i == big else values
            shape = [1] * len(axes)
            shape[i] = chunk.size
            grids[name] = chunk.reshape(shape)
        values = _Evaluation(grids).of(index)
        lo = int(values.min()) if lo is None else min(lo, int(values.min()))
        hi = int(values.max()) if hi is None else max(hi, int(values.max()))
    return lo, hi


# endregion
# region the check


def render(node: Node, names: dict[int, str], counts: dict[int, Count] | None = None) -> str:
    """`node` as the Python expression it was traced from, near enough to read in a message (np.clip for a
    min of a max with constants, np.where for a select, a search by its function)."""
    counts = counts or {}

    def r(n: Node, outer: int = 0) -> str:
        if id(n) in counts:
            c = counts[id(n)]
            return f"{c.function}({c.boundaries}, {r(c.value)})"
        op = n.op
        if op == "const":
            return repr(n.value)
        if op in ("b", "h", "q_idx", "kv_idx", "score"):
            return op
        if op in ("to_f32",):
            return r(n.args[0], outer)
        if op == "to_i32":
            return f"({r(n.args[0])}).astype(int)"
        if op == "gather":
            return f"{names.get(id(n.value), n.value.name)}[{', '.join(r(a) for a in n.args)}]"
        if op == "min" and n.args[0].op == "max" and n.args[1].op == "const" and n.args[0].args[1].op == "const":
            x, lo = n.args[0].args
            return f"np.clip({r(x)}, {r(lo)}, {r(n.args[1])})"
        if op in ("min", "max", "abs", "select") or op in _NUMPY and len(n.args) == 1 and op not in ("neg", "not"):
            name = {"min": "minimum", "max": "maximum", "select": "where"}.get(op, op)
            return f"np.{name}({', '.join(r(a) for a in n.args)})"
        infix = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2), "floordiv": ("//", 2),
                 "mod": ("%", 2), "lt": ("<", 0), "le": ("<=", 0), "gt": (">", 0), "ge": (">=", 0),
                 "eq": ("==", 0), "ne": ("!=", 0), "and": ("&", 0), "or": ("|", 0)}
        if op in infix:
            symbol, level = infix[op]
            text = f"{r(n.args[0], level)} {symbol} {r(n.args[1], level + 1)}"
            return f"({text})" if level < outer or (level == 0 and outer) else text
        if op == "neg":
            return f"-{r(n.args[0], 3)}"
        if op == "not":
            return f"~{r(n.args[0], 3)}"
        return f"{op}({', '.join(r(a) for a in n.args)})"

    return r(node)


def read_problem(read: Read, dims: LaunchDims, intervals: _Intervals, names: dict[int, str],
                 counts: dict[int, Count]) -> str | None:
    """Why `read` may leave its array for a launch of `dims` (the message's tail), or None when it cannot."""
    shape = read.array.array.shape
    for axis, (index, n) in enumerate(zip(read.indices, shape)):
        lo, hi = intervals.of(index)
        if 0 <= lo and hi < n:
            continue
        where = (f"{read.name}[{', '.join(render(i, names, counts) for i in read.indices)}]"
                 + (f" (dimension {axis}: {render(index, names, counts)})" if len(shape) > 1 else ""))
        leaves = _leaves(index, {})
        if "score" in leaves:
            return (f"cannot prove {where} inside the array of shape {shape} for the launch ({dims}): the index is "
                    f"computed from the score (its bounds [{lo}, {hi}] by interval arithmetic); wrap it in "
                    f"np.clip(..., 0, {n - 1})")
        axes = _domain(leaves, dims)
        size = int(np.prod([v.size for _, v in axes]))
        if size > EXACT_EVALUATION_LIMIT:
            return (f"cannot prove {where} inside the array of shape {shape} for the launch ({dims}): its bounds "
                    f"[{lo}, {hi}] by interval arithmetic, and its {size} positions are more than the "
                    f"{EXACT_EVALUATION_LIMIT} Tessera evaluates exactly; wrap it in np.clip(..., 0, {n - 1})")
        lo, hi = _exact_range(index, axes)
        if 0 <= lo and hi < n:
            continue
        negative = (" (negative indices are refused: NumPy and torch would wrap them, the kernel reads 0 there; "
                    "write % or np.clip)") if lo < 0 else ""
        return (f"reads {where}, which reaches [{lo}, {hi}] for the launch ({dims}), outside [0, {n}) of the array "
                f"of shape {shape}{negative}")
    return None


def check_trace(trace, kind: str, dims: LaunchDims) -> None:
    """Raise `IndexRangeError` for the first read of `trace` (a `tessera.variants.trace.Trace`) that leaves its
    array for a launch of `dims`, or that cannot be proved inside it (module docstring)."""
    intervals = _Intervals(dims, trace.counts)
    names = {id(r.array): r.name for r in trace.reads}
    for read in trace.reads:
        problem = read_problem(read, dims, intervals, names, trace.counts)
        if problem:
            raise IndexRangeError(f"{kind} '{trace.name}' at {read.where}: {problem}")


def check_index_ranges(score_mod: Callable | None = None, mask_mod: Callable | None = None, *, batch: int,
                       heads: int, seq_q: int, seq_k: int) -> None:
    """Prove every read of a captured array by `score_mod` and `mask_mod` inside its array for a launch of
    these dims (module docstring); `IndexRangeError` names the first that is not. A modifier that cannot be
    traced raises its `ModTraceError`. `tessera.attention`, `tessera.attention_backward` and
    `create_block_mask` call it; call it before launching a kernel built with `flash_attention(score_mod=,
    mask_mod=)` by hand."""
    dims = LaunchDims(batch, heads, seq_q, seq_k)
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            check_trace(trace_mod(fn, kind), kind, dims)


# endregion


_AT_LAUNCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per kernel module a builder made from modifiers, their (trace, kind)s (`check_at_launch`)."""

LAUNCH_DIMS = ("batch", "heads", "seq_q", "seq_k")
"""The kernel dims (`tessera.kernel_abi`) a launch's positions are read from."""


def check_at_launch(module, traces: list) -> None:
    """Have every launch of `module` through `tessera.launch` or `tessera.interpret` prove the reads of
    `traces` ((Trace, "score_mod" or "mask_mod") pairs) for its sizes first (`check_launch`)."""
    _AT_LAUNCH[module] = list(traces)


def check_launch(where: str, module, sizes: dict[str, int]) -> None:
    """`check_trace` of the modifiers registered for `module` (`check_at_launch`) at the launch's `sizes`
    (the kernel's dims bound by the inputs); nothing for any other module. `where` names the entry point."""
    traces = _AT_LAUNCH.get(module)
    if not traces or not all(name in sizes for name in LAUNCH_DIMS):
        return
    dims = LaunchDims(*(int(sizes[name]) for name in LAUNCH_DIMS))
    try:
        for trace, kind in traces:
            check_trace(trace, kind, dims)
    except IndexRangeError as error:
        raise IndexRangeError(f"{where}: {error}") from None
