"""FlexAttention-style score and mask modifiers: tracing plain Python functions into an expression graph.

A score modifier `score_mod(score, b, h, q_idx, kv_idx) -> score` and a mask modifier
`mask_mod(b, h, q_idx, kv_idx) -> bool` are plain Python over operators and NumPy functions. They run
unchanged on NumPy index grids (the float64 reference, `tessera.reference_attention.attention_mods`, and the host-side
block mask, `tessera.variants.block_mask`), and `trace_mod` calls them once with `Traced` values to record what
they compute as a graph of `Node`s, which `tessera.kernels.attention_mods` emits as Tile IR in the score tile's
context. Index arguments are i32; the score is f32.

NumPy arrays a modifier reads (closure cells, and module globals it names) become `CapturedArray`s: indexing
one with traced indices is a gather from an extra kernel input (`tile.gather`), one index per dimension
(`slopes[h]`, `doc_ids[q_idx]`, `table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]`). Python numbers it reads
are constants of the kernel.

With PyTorch installed, torch functions, tensor methods and captured tensors are accepted the same way
(`tessera.variants.torch_mods`; torch's activations, `F.gelu`, `F.softplus`, ..., in
`tessera.variants.torch_activations`).

np.searchsorted, np.digitize (and torch.searchsorted / torch.bucketize) of a traced value in a captured sorted
1-D array are counts of compares, unrolled or a binary search.

`&`, `|`, `^`, `~` of a traced integer and a constant and shifts by a constant become `+ - * // %`
(`kv_idx & 7` is `kv_idx % 8`, `q_idx >> 6` is `q_idx // 64`).

`x ** p` and `c ** y` become multiplications, np.sqrt or exp2/log2, `x ** y` exp2/log2 with NumPy's sign
rules; np.floor / np.ceil / np.rint / np.round / np.trunc the `tile.floor` family; `x.astype(dtype)` converts
as NumPy does (a float to an integer truncates toward zero).

What cannot be traced is refused with a `ModTraceError` naming the function, file:line and the construct:
Python control flow on a traced value (`if`, `and`, `or`, `not`, `bool()`), an unsupported NumPy function or
operator (`&`, `|`, `^` of two traced integers, a shift by a traced amount, `**` of two traced integers),
arithmetic on booleans (`==`, `!=` and `^` of two booleans are their logic), `//` and `%` by the constant 0
(`//` and `%` are Python's: floor division, a modulus with the divisor's sign; of floats NumPy's values,
`tessera.variants.float_division`; np.fmod is C's remainder), a slice of a captured array, a NumPy array
indexed by a traced value that is not a captured array of the modifier itself, `math.sqrt`, `math.floor` and
the other math functions of a traced value and `round()` (they take Python numbers, and fail on the
reference's NumPy grids too: write np.floor, np.round, ...), a generator or async function, an assignment into a
captured array, a random draw (`tessera.variants.randomness`).

A modifier may be a function, a functools.partial of one, a bound method, a callable object whose class defines
`__call__` in Python, or a torch module (its `forward`): an instance's arrays are captured by attribute name.

Where each part lives (all in `tessera.variants`):

- `trace` (here): `trace_mod` and the `Trace` it returns;
- `tracing`: the state of one trace, `ModTraceError` and the refusals' locations;
- `traced`: `Traced`, the values' operators and NumPy protocols; `ufuncs` the tables of the ufuncs they read;
  `powers`, `rounding` (with `//`, `%`, np.fmod), `search_calls` and `bitwise` what those become;
- `captured`: the proxies of captured arrays (gathers and their reads);
- `callables`: what a modifier may be and its name; `rebinding`: a copy of it reading its arrays through a
  wrapper (the proxies when traced);
- `randomness`: the random draws a modifier makes while traced, which the tracer refuses;
- `bounds_checks`: a modifier whose array reads are bounds-checked (the reference and the block mask call it so);
- `fingerprint`: the key of what a modifier reads, by which `trace_mod` keeps its traces.

A trace is kept by its function's structure (`fingerprint.structure`: arrays by identity, dtype and shape) and the
digests of just the arrays whose contents it used (`Trace.free` names the others), so that a learned table read
at traced indices and changed in place between calls is neither hashed nor traced again, while an array whose
contents the trace used (a read at constant indices, a search's boundaries, an index array whose values the proof
that reads stay in bounds reads, a table whose largest value sizes a float remainder's steps), and any array of
a mask_mod (whose values make the block lists on the host), changed in place, is traced anew.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from tessera.variants import searches, torch_mods
from tessera.variants.callables import MASK_MOD_ARGS, SCORE_MOD_ARGS, compiled_original, function_name, underlying
from tessera.variants.captured import ArrayProxy, Capture
from tessera.variants.fingerprint import digest, fingerprint, structure
from tessera.variants.nodes import BOOL, F32, I32, CapturedArray, Count, Node, Read
from tessera.variants.randomness import watching_draws
from tessera.variants.rebinding import rebind_arrays
from tessera.variants.traced import Traced
from tessera.variants.tracing import UNCAPTURED, ModTraceError, Tracing

_TRACER = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The tracer's directory: a traceback's frames under it are not the user's (`_user_line`)."""


@dataclass
class Trace:
    """A traced modifier: its result node, the arrays it gathers from (in first-use order), and its name;
    `reads`, the reads of captured arrays the function wrote (each with its line), and `counts`, the searches'
    counts by their node's id (`tessera.variants.index_ranges` proves the reads in bounds for a launch)."""

    function: Callable
    result: Node
    arrays: list[CapturedArray] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    counts: dict[int, Count] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)
    """The kernel input's name (`CapturedArray.name`) of each array the function names, by the id of the array
    (or torch tensor) itself: the autograd finds a tensor's gradient by it (`tessera.runtime.autograd`). Valid
    while the trace is kept: its key holds the arrays (`tessera.variants.fingerprint`)."""
    opaque: dict[str, str] = field(default_factory=dict)
    """By kernel input name, the first use of an array other than a gather at traced indices (`Capture.opaque`):
    no gradient reaches it (`tessera.variants.derivative.captured_derivatives` refuses it)."""
    inputs: dict[str, object] = field(default_factory=dict)
    """By kernel input name, the array (or torch tensor) the function names, whose values the launch passes
    (`kernel_inputs`); absent for an input the tracer made (a search's boundaries)."""
    free: frozenset[int] = frozenset()
    """The ids of the arrays (or torch tensors) the function names whose contents the trace did not use: score_mod
    arrays read only at traced indices (f32 or narrower floats, not booleans), outside any integer value (the
    bounds proof reads those) and any float remainder (whose steps a table's largest value sizes). The trace
    holds for any contents of these (module docstring)."""
    key: Hashable | None = None
    """What the trace was made from: its kind, its function's structure, the tracer's settings and the digests of
    the arrays not `free`; None for a function whose fingerprint cannot be told (`trace_mod`). Kernels built from
    the trace are kept by it (`tessera.runtime.flex`)."""

    @property
    def name(self) -> str:
        return function_name(self.function)

    def uses(self, op: str) -> bool:
        """Whether any node of the graph is `op` (e.g. "b", "h", "score")."""
        seen, stack = set(), [self.result]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.op == op:
                return True
            stack.extend(n.args)
        return False

    def kernel_inputs(self) -> list[np.ndarray]:
        """`kernel_input` of each of `arrays`, in order."""
        return [self.kernel_input(captured) for captured in self.arrays]

    def kernel_input(self, captured: CapturedArray) -> np.ndarray:
        """The values of the captured array as the kernel takes them (f32 for floats, i32 for integers and
        booleans, contiguous): a `free` array (or tensor) the function names read now (a learned table changed
        in place since the trace: its new values), any other as traced (its contents are the trace's:
        `trace_mod`)."""
        source = self.learned(captured)
        if source is None:
            array = captured.array
        else:
            array = torch_mods.as_numpy(source) if torch_mods.is_tensor(source) else source
        return np.ascontiguousarray(array, np.float32 if captured.dtype == F32 else np.int32)

    def learned(self, captured: CapturedArray):
        """The array (or tensor) the function names that `captured` reads, where the trace holds for any of its
        contents (`free`: the kernel input is its current values); else None."""
        source = self.inputs.get(captured.name)
        return source if source is not None and id(source) in self.free else None


_TRACES: dict[Hashable, list[tuple[Trace, tuple[int, ...]]]] = {}
"""Traces kept by (kind, `structure` of the function, `tracer_settings`): for each, the traces of its last
`TRACES_PER_STRUCTURE` contents, each with the positions (in the structure's arrays) of the arrays whose digests
its key holds (a weight read at a constant index that alternates between two values keeps both); at most
`KEPT_TRACES` structures, all dropped when full."""
KEPT_TRACES = 64
TRACES_PER_STRUCTURE = 4


def trace_mod(fn: Callable, kind: str) -> Trace:
    """Trace `fn`, a "score_mod" (5 arguments, returns a number) or a "mask_mod" (4 arguments, returns a
    boolean), into a `Trace`; raises ModTraceError for what cannot be traced (module docstring).

    A trace is kept by the function's `tessera.variants.fingerprint.structure` (its code and the values it reads,
    arrays by identity, dtype and shape) and the digests of the arrays whose contents the trace used (all but
    `Trace.free`): a call with a function whose structure is kept and whose digests match returns that trace
    (shared: it is not to be changed) without tracing, digesting only those arrays; a closure cell rebound, a
    global reassigned or an array whose contents the trace used changed in place is traced anew. A function whose
    fingerprint cannot be told is traced on every call."""
    if kind not in ("score_mod", "mask_mod"):
        raise ValueError(f"kind must be score_mod or mask_mod; got {kind!r}")
    if not callable(fn):
        raise TypeError(f"{kind} must be a function; got {type(fn).__name__}")
    fn = compiled_original(fn)  # @torch.compile: the function the user wrote
    found = structure(fn)
    if found is None:
        return _trace(fn, kind)
    shape, arrays, unwrapped = found
    key = (kind, shape, tracer_settings())
    kept = _TRACES.get(key)
    digests: dict[int, bytes] = {}  # by position: an array digested once a call
    for trace, watched in kept or ():
        if trace.key[1] == tuple(digests.get(i) or digests.setdefault(i, digest(arrays[i])) for i in watched):
            return trace
    trace = _trace(fn, kind)
    trace.free -= unwrapped  # (a proxy's reads are not all the function's reads of these)
    watched = tuple(i for i, array in enumerate(arrays) if id(array) not in trace.free)
    trace.key = (key, tuple(digests.get(i) or digest(arrays[i]) for i in watched))
    if kept is None:
        if len(_TRACES) >= KEPT_TRACES:
            _TRACES.clear()
        kept = _TRACES[key] = []
    kept.insert(0, (trace, watched))
    del kept[TRACES_PER_STRUCTURE:]
    return trace


def modifier_key(fn: Callable, kind: str) -> Hashable | None:
    """The key of what kernels and block masks made from `fn` depend on: its trace's (`Trace.key`); for a function
    that cannot be traced, its `fingerprint` (a mask only the host evaluates); None where neither can be told."""
    try:
        return trace_mod(fn, kind).key
    except ModTraceError:
        key = fingerprint(compiled_original(fn))
        return None if key is None else ("untraced", kind, key, tracer_settings())


def tracer_settings() -> tuple:
    """The module settings a trace depends on besides the function (`searches.UNROLLED_SEARCH_MAX`), for the
    keys of what is kept."""
    return (searches.UNROLLED_SEARCH_MAX,)


def _trace(fn: Callable, kind: str) -> Trace:
    """`trace_mod` without the kept traces."""
    tracing = Tracing(fn, kind)
    inner = underlying(fn)
    for test, what in ((inspect.isgeneratorfunction, "a generator function (it yields)"),
                       (inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator function")):
        if test(inner):
            raise tracing.refuse(f"{what}: a modifier returns its value")
    used: dict[int, Capture] = {}

    def wrap(name: str, array) -> ArrayProxy:
        if id(array) not in used:  # one input per array; two arrays of one name get _2, _3, ...
            used[id(array)] = Capture(name, tracing.unique_name(name),
                                       torch_mods.as_numpy(array) if torch_mods.is_tensor(array) else array, array)
        return ArrayProxy(tracing, used[id(array)])

    traced_fn = rebind_arrays(fn, wrap)
    names = SCORE_MOD_ARGS if kind == "score_mod" else MASK_MOD_ARGS
    args = [Traced(tracing, Node(n, (), F32 if n == "score" else I32)) for n in names]
    try:
        inspect.signature(traced_fn).bind(*args)
    except TypeError as error:
        raise ModTraceError(f"{kind} '{function_name(fn)}' cannot be called with a {kind}'s {len(names)} arguments "
                            f"({', '.join(names)}): {error}") from None
    draws: list[tuple[str, str]] = []
    try:
        with watching_draws(fn, tracing.where) as draws:
            result = traced_fn(*args)
    except ModTraceError:
        _refuse_draws(kind, fn, draws)  # refused first: what follows a draw may fail on its value
        raise
    except Exception as error:  # e.g. NumPy refusing a traced index: name where it happened
        _refuse_draws(kind, fn, draws)
        what = (UNCAPTURED if isinstance(error, IndexError) and "valid indices" in str(error)
                else f"it: {type(error).__name__}: {error}")
        raise ModTraceError(f"{kind} '{function_name(fn)}' at {_user_line(error)}: cannot trace {what}") from None
    _refuse_draws(kind, fn, draws)
    node = args[0]._lift(result) if not isinstance(result, Traced) else result.node
    if kind == "mask_mod" and node.dtype != BOOL:
        raise ModTraceError(f"mask_mod '{function_name(fn)}' at {tracing.where()}: returns a {node.dtype} value; a "
                            "mask_mod returns a boolean (True: the key is visible)")
    if kind == "score_mod":
        if node.dtype == BOOL:
            raise ModTraceError(f"score_mod '{function_name(fn)}' at {tracing.where()}: returns a boolean; a score_mod "
                                "returns the new score")
        node = args[0]._convert(node, F32)
    arrays = list(tracing.arrays.values())
    return Trace(fn, node, arrays, tracing.reads, tracing.counts, {key: c.unique for key, c in used.items()},
                 {c.unique: c.opaque for c in used.values() if c.opaque},
                 {c.unique: c.source for c in used.values()}, _free(kind, node, used))


def _free(kind: str, result: Node, used: dict) -> frozenset[int]:
    """`Trace.free`: the ids, among `used` (the Captures by their source's id), of the arrays whose contents the
    trace of `result` did not use."""
    if kind != "score_mod":
        return frozenset()
    read = _valued(result)
    return frozenset(key for key, c in used.items()
                     if c.captured is not None and c.opaque is None and not c.captured.boolean
                     and c.captured.dtype == F32 and c.array.dtype.itemsize <= 4 and id(c.captured) not in read)


_VALUED_OPS = ("floordiv", "mod", "fmod")
"""Float operations whose construction reads the largest value of the tables under their operands
(`tessera.variants.float_division.magnitude_bound`)."""


def _valued(result: Node) -> set[int]:
    """The ids of the CapturedArrays gathered under an i32 value (whose intervals, and so a gather's values, the
    bounds proof reads: `tessera.variants.index_ranges`) or a float division of `result`'s graph."""
    found, seen, stack = set(), set(), [(result, False)]
    while stack:
        node, under = stack.pop()
        under = under or node.dtype == I32 or node.op in _VALUED_OPS
        if (id(node), under) in seen:
            continue
        seen.add((id(node), under))
        if under and node.op == "gather":
            found.add(id(node.value))
        stack.extend((arg, under) for arg in node.args)
    return found


def _refuse_draws(kind: str, fn: Callable, draws: list[tuple[str, str]]) -> None:
    """The ModTraceError refusing the first random draw the modifier made while traced, if it made one."""
    if draws:
        source, where = draws[0]
        raise ModTraceError(f"{kind} '{function_name(fn)}' at {where}: cannot trace a random draw ({source}): the "
                            "kernel would hold the one value drawn while tracing; draw a table outside the "
                            "modifier and read it")


def _user_line(error: BaseException) -> str:
    """file:line of the innermost traceback frame outside NumPy and the tracer's modules."""
    where = "?"
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "numpy" not in name and not name.startswith(_TRACER):
            where = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where
