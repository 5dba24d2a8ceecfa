"""Proving a modifier's reads of captured arrays in bounds for a launch, before any kernel runs.

A score_mod or mask_mod reads the arrays it captures at indices computed from its arguments (`slopes[h]`,
`doc_ids[kv_idx]`, `table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]`). Every read (`nodes.Read`, recorded by
`tessera.variants.trace`) must stay inside its array for every position of the launch: b in [0, batch),
h in [0, heads), q_idx in [0, seq_q), kv_idx in [0, seq_k) (`LaunchDims`). `check_trace` proves it:

1. interval arithmetic over the index's graph (`tessera.variants.index_intervals`): the arguments' ranges,
   constants, `+ - *`, `//` and `%` (Python's: `x % n` of a positive n is in [0, n)), min / max / np.clip,
   abs, np.where (the union of its arms, or one arm where the condition's compare is decided by the
   intervals), `.astype(int)`, reads of integer arrays (the values of the part of the array the indices
   reach), searches' counts (in [0, n]) and f32 arithmetic of those; the score's range is unknown;
2. where the intervals are too coarse (`np.where(n < 8, n, log_bucket)`), the index is evaluated exactly, as
   the kernel computes it (i32 arithmetic, NumPy's float32 for f32 values), over its index domain: the
   arguments it depends on, each on its own axis, with `q_idx - kv_idx` (or `kv_idx - q_idx`) one axis of
   seq_q + seq_k - 1 differences where the index reads q_idx and kv_idx only through it (a relative
   position), as long as the domain has at most `EXACT_EVALUATION_LIMIT` positions;
3. otherwise (an index computed from the score, or from q_idx and kv_idx over a larger grid) the read is
   refused by name: Tessera cannot prove it in bounds; wrap the index in np.clip.

Before the reads, every integer value of the graph is checked against i32 (`wrap_problem`): the kernel's
i32 arithmetic wraps and its float-to-i32 conversion saturates where the reference's NumPy int64 does neither,
so a value whose interval (from bounded operands) leaves i32 is refused naming it (`q_idx * kv_idx` past 46,341
tokens, `(q_idx * 1e9).astype(int)`); what is made from the score is not bounded and not checked.

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

import weakref
from collections.abc import Callable

import numpy as np

from tessera.variants.index_intervals import Intervals, LaunchDims
from tessera.variants.nodes import BOOL, F32, I32_RANGE, Count, Node, Read
from tessera.variants.trace import trace_mod
from tessera.variants.tracing import ModTraceError, Tracing

EXACT_EVALUATION_LIMIT = 1 << 24
"""The most positions of an index's domain that `check_trace` evaluates exactly (a third of a second of NumPy
at the largest, measured on this project's machine): a 4096 x 4096 (q_idx, kv_idx) grid, or any relative
position (seq_q + seq_k - 1 differences)."""

_CHUNK = 1 << 20
"""Positions evaluated at once (a few MB per temporary)."""


class IndexRangeError(ModTraceError):
    """A read of a captured array that reaches outside it for a launch, or that cannot be proved inside it:
    the message names the modifier, the line, the array, the index and the range it reaches, and the launch.
    A `ModTraceError` (a ValueError), as the reference's refusal of the same read is."""


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
                return np.trunc(np.clip(x, *I32_RANGE)).astype(np.int32)
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


def read_problem(read: Read, dims: LaunchDims, intervals: Intervals, names: dict[int, str],
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


def wrap_problem(trace, dims: LaunchDims, intervals: Intervals, names: dict[int, str]) -> str | None:
    """Why an integer value of `trace` may leave i32 for a launch of `dims` (the message's tail), or None. The
    kernel's i32 arithmetic wraps and its float-to-i32 conversion saturates where the reference's NumPy int64
    does neither (`(q_idx * 50_000_000 + kv_idx) % 7` masked other keys than the reference at 70 queries):
    every i32 value is bounded by the intervals (`Intervals.wrapped`), exact for each operation and loose only
    for operands that share a variable."""
    intervals.of(trace.result)
    if not intervals.wrapped:
        return None
    node, (lo, hi) = intervals.wrapped[0]
    extreme = hi if hi > I32_RANGE[1] else lo
    how = ("the kernel's conversion saturates at the i32 range where NumPy's to int64 does not" if node.op == "to_i32"
           else "the kernel's index arithmetic is 32-bit and would wrap where NumPy's int64 does not; compute it in "
           "floats, e.g. q_idx.astype(float), or keep it below 2^31")
    return (f"cannot trace the integer value {render(node, names, trace.counts)}: it reaches {extreme} at {dims}, "
            f"outside i32 ({how})")


def trace_site(trace) -> str:
    """file:line of a traced modifier's function (a partial's or a callable object's)."""
    return Tracing(trace.function, "").where()


def check_trace(trace, kind: str, dims: LaunchDims) -> None:
    """Raise `IndexRangeError` for the first integer value of `trace` (a `tessera.variants.trace.Trace`) that
    may leave i32 for a launch of `dims` (`wrap_problem`), else for the first read that leaves its array or that
    cannot be proved inside it (module docstring)."""
    intervals = Intervals(dims, trace.counts)
    names = {id(r.array): r.name for r in trace.reads}
    problem = wrap_problem(trace, dims, intervals, names)
    if problem:
        raise IndexRangeError(f"{kind} '{trace.name}' at {trace_site(trace)}: {problem}")
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
            trace = trace_mod(fn, kind)
            key = (id(trace), kind, dims, EXACT_EVALUATION_LIMIT)
            if _PROVED.get(key) is not trace:
                check_trace(trace, kind, dims)
                if len(_PROVED) >= 256:
                    _PROVED.clear()
                _PROVED[key] = trace


_PROVED: dict[tuple, object] = {}
"""The traces `check_index_ranges` proved, by (the trace's id, kind, dims, `EXACT_EVALUATION_LIMIT`), beside the
trace (an id is only trusted while that trace is the one kept): at most 256, all dropped when full. `trace_mod`
returns a kept trace only while the arrays whose values it used are unchanged, the index arrays the proof reads
among them (`Trace.free`, the others, are those the proof's outcome does not depend on): its proof holds while it
is returned."""


# endregion


_AT_LAUNCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per kernel module a builder made from modifiers, their (trace, kind)s (`check_at_launch`)."""

LAUNCH_DIMS = ("batch", "heads", "seq_q", "seq_k")
"""The kernel dims (`tessera.kernel_abi`) a launch's positions are read from."""


def check_at_launch(module, traces: list) -> None:
    """Have every launch of `module` through `tessera.launch` or `tessera.interpret` prove the reads of
    `traces` ((Trace, "score_mod" or "mask_mod") pairs) for its sizes first (`check_launch`)."""
    _AT_LAUNCH[module] = list(traces)


def registered_traces(module) -> list:
    """The (Trace, kind) pairs a builder registered for `module` (`check_at_launch`); [] for any other module."""
    return list(_AT_LAUNCH.get(module, ()))


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
