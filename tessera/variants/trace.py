"""FlexAttention-style score and mask modifiers: tracing plain Python functions into an expression graph.

A score modifier `score_mod(score, b, h, q_idx, kv_idx) -> score` and a mask modifier
`mask_mod(b, h, q_idx, kv_idx) -> bool` are plain Python over operators and NumPy functions. They run
unchanged on NumPy index grids (the float64 reference, `tessera.reference.attention_mods`, and the host-side
block mask, `tessera.variants.block_mask`), and `trace_mod` calls them once with `Traced` proxies to record what they
compute as a graph of `Node`s, which `tessera.kernels.attention_mods` emits as Tile IR in the score tile's
context. Index arguments are i32; the score is f32.

NumPy arrays a modifier reads (closure cells, and module globals it names) become `CapturedArray`s: indexing
one with traced indices is a gather from an extra kernel input (`tile.gather`), one index per dimension
(`slopes[h]`, `doc_ids[q_idx]`, `table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]`). Python numbers it reads
are constants of the kernel.

With PyTorch installed, torch functions, tensor methods and captured tensors are accepted the same way
(`tessera.variants.torch_mods`).

np.searchsorted, np.digitize (and torch.searchsorted / torch.bucketize) of a traced value in a captured sorted
1-D array are counts of compares, unrolled or a binary search (`Traced._search`, `tessera.variants.searches`).

`&`, `|`, `^`, `~` of a traced integer and a constant and shifts by a constant become `+ - * // %`
(`tessera.variants.bitwise`: `kv_idx & 7` is `kv_idx % 8`, `q_idx >> 6` is `q_idx // 64`).

`x ** p` and `c ** y` become multiplications, np.sqrt or exp2/log2 (`Traced._power`), `x ** y` exp2/log2 with
NumPy's sign rules (`_traced_power`); np.floor / np.ceil / np.rint / np.round / np.trunc the `tile.floor`
family (`Traced._round`); `x.astype(dtype)` converts as NumPy does (`Traced.astype`: a float to an integer
truncates toward zero).

What cannot be traced is refused with a `ModTraceError` naming the function, file:line and the construct:
Python control flow on a traced value (`if`, `and`, `or`, `not`, `bool()`), an unsupported NumPy function or
operator (`&`, `|`, `^` of two traced integers, a shift by a traced amount, `**` of two traced integers),
arithmetic on booleans (`==`, `!=` and `^` of two booleans are their logic), `//` and `%` by the constant 0
(`//` and `%` are Python's: floor division, a modulus with the divisor's sign; of floats NumPy's values,
`tessera.variants.float_division`; np.fmod is C's remainder), a slice of a captured array, a NumPy array
indexed by a traced value that is not a captured array of the modifier itself, `math.sqrt`, `math.floor` and
the other math functions of a traced value and `round()` (they take Python numbers, and fail on the
reference's NumPy grids too: write np.floor, np.round, ...), a generator or async function, an assignment into a
captured array.

A modifier may be a function, a functools.partial of one, a bound method, a callable object whose class defines
`__call__` in Python, or a torch module (its `forward`): an instance's arrays are captured by attribute name
(`rebind_arrays`, `_rebound_instance`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tessera.numerics import BF16, FP8_DTYPES
from tessera.variants import bitwise, searches, torch_mods
from tessera.variants.nodes import BOOL, F32, I32, I32_RANGE, CapturedArray, Count, Node, Read

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The tessera package's directory: frames under it are not the user's (`_Tracing.read_site`)."""
SCORE_MOD_ARGS = ("score", "b", "h", "q_idx", "kv_idx")
MASK_MOD_ARGS = ("b", "h", "q_idx", "kv_idx")


class ModTraceError(ValueError):
    """A score_mod or mask_mod that cannot be traced: the message names the function, file:line and the
    construct."""


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


class _Tracing:
    """The state of one `trace_mod` call: the function (for messages) and the arrays seen so far."""

    def __init__(self, fn: Callable, kind: str):
        self.fn, self.kind = fn, kind
        self.arrays: dict[int, CapturedArray] = {}
        self.names: set[str] = set()
        self.searched: dict[tuple, CapturedArray] = {}
        self.searches: dict[int, tuple[searches.Search, Callable, bool]] = {}
        self.reads: list[Read] = []
        self.counts: dict[int, Count] = {}

    def unique_name(self, name: str) -> str:
        """A kernel input's name for an array the user calls `name`: `{kind}_{name}`, then _2, _3, ..."""
        unique, n = f"{self.kind}_{name}", 1
        while unique in self.names:
            n += 1
            unique = f"{self.kind}_{name}_{n}"
        self.names.add(unique)
        return unique

    def where(self) -> str:
        """file:line of the innermost frame running the modifier's code (or the function's first line)."""
        code = _underlying(self.fn).__code__
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is code:
                return f"{code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return f"{code.co_filename}:{code.co_firstlineno}"

    def read_site(self) -> str:
        """file:line of the innermost frame outside Tessera, NumPy and torch (the line of the user's code that
        reads an array, in the modifier or in a function it calls)."""
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not (name.startswith(_PACKAGE) or any(f"{os.sep}{lib}{os.sep}" in name for lib in ("numpy", "torch"))):
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return self.where()

    def refuse(self, construct: str) -> ModTraceError:
        name = function_name(self.fn)
        return ModTraceError(f"{self.kind} '{name}' at {self.where()}: cannot trace {construct}")


_UNARY = {np.negative: "neg", np.absolute: "abs", np.exp: "exp", np.exp2: "exp2", np.log2: "log2", np.log: "log",
          np.tanh: "tanh", np.sqrt: "sqrt", np.reciprocal: "reciprocal", np.logical_not: "not", np.invert: "not",
          np.positive: "pos"}
_BINARY = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div", np.minimum: "min",
           np.maximum: "max", np.fmin: "min", np.fmax: "max", np.logical_and: "and", np.logical_or: "or",
           np.bitwise_and: "and", np.bitwise_or: "or", np.less: "lt", np.less_equal: "le", np.greater: "gt",
           np.greater_equal: "ge", np.equal: "eq", np.not_equal: "ne", np.floor_divide: "floordiv",
           np.remainder: "mod", np.logical_xor: "xor", np.bitwise_xor: "xor"}
_LOGICAL = (np.logical_and, np.logical_or, np.logical_xor, np.logical_not)
"""NumPy's logical ufuncs: of numbers, their truth (`Traced._truth`)."""
_ROUNDING = {np.floor: "floor", np.ceil: "ceil", np.rint: "rint", np.trunc: "trunc"}
"""NumPy's rounding ufuncs (`Traced._round`): of f32 values the `tile.floor/ceil/rint/trunc` ops; of i32 values
the value itself (NumPy 2 keeps an integer array's dtype), except np.rint, which gives floats."""
_UNCAPTURED = ("indexing with a traced value an array that is not a captured NumPy array of the function (a "
               "closure variable or a module global it names, or one of the functions it calls)")
COMPARES = ("lt", "le", "gt", "ge", "eq", "ne")
FLOORED = ("floordiv", "mod")
FLOAT_ONLY = ("exp", "exp2", "log2", "log", "tanh", "sqrt", "reciprocal", "div")


class Traced:
    """A traced value: Python operators and NumPy ufuncs/functions on it record nodes (module docstring)."""

    __array_priority__ = 1000

    def __init__(self, tracing: _Tracing, node: Node):
        self._tracing, self.node = tracing, node

    # -- building --------------------------------------------------------------------------------------
    def _wrap(self, node: Node) -> Traced:
        return Traced(self._tracing, node)

    def _lift(self, value: object) -> Node:
        if isinstance(value, Traced):
            return value.node
        if isinstance(value, (bool, np.bool_)):
            return Node("const", (), BOOL, bool(value))
        if isinstance(value, (int, np.integer)):
            if not -2**31 <= int(value) < 2**31:
                raise self._tracing.refuse(f"the integer constant {value} (outside i32)")
            return Node("const", (), I32, int(value))
        if isinstance(value, (float, np.floating)):
            return Node("const", (), F32, float(value))
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return self._lift(value[()])
        if torch_mods.is_tensor(value) and value.dim() == 0:
            return self._lift(value.item())
        if isinstance(value, _ArrayProxy):  # a captured array named without an index
            return self._lift(value.whole())
        raise self._tracing.refuse(f"an operand of type {type(value).__name__} (only traced values and numbers)")

    def _convert(self, node: Node, dtype: str) -> Node:
        if node.dtype == dtype:
            return node
        if node.op == "const":
            return Node("const", (), dtype, float(node.value) if dtype == F32 else node.value)
        return Node("to_f32", (node,), F32)

    def _apply(self, op: str, *operands: object) -> Traced:
        nodes = [self._lift(o) for o in operands]
        t = self._tracing
        if op in ("and", "or", "not", "xor") and any(n.dtype != BOOL for n in nodes):
            return self._bitwise(op, nodes)
        if op in ("and", "or", "not"):
            if any(n.dtype != BOOL for n in nodes):
                raise t.refuse(f"'{op}' (&, |, ~) of non-boolean values (bitwise integer ops are not supported)")
            return self._wrap(Node(op, tuple(nodes), BOOL))
        if op == "pos":
            return self._wrap(nodes[0])
        if op in ("eq", "ne", "xor") and all(n.dtype == BOOL for n in nodes):  # (a == b), a != b, a ^ b
            a, b = nodes
            differ = Node("or", (Node("and", (a, Node("not", (b,), BOOL)), BOOL),
                                 Node("and", (Node("not", (a,), BOOL), b), BOOL)), BOOL)
            return self._wrap(Node("not", (differ,), BOOL) if op == "eq" else differ)
        if op in ("add", "mul") and len(nodes) == 2 and all(n.dtype == BOOL for n in nodes):  # as NumPy's bools
            return self._wrap(Node("or" if op == "add" else "and", tuple(nodes), BOOL))
        if any(n.dtype == BOOL for n in nodes):
            if len(nodes) < 2 or all(n.dtype == BOOL for n in nodes):
                raise t.refuse(f"'{op}' of a boolean value (use np.where to turn a condition into numbers)")
            # NumPy's promotion: beside a number a boolean is 1 or 0 (`score + 0.5 * (kv_idx == 0)`)
            one, zero = Node("const", (), I32, 1), Node("const", (), I32, 0)
            nodes = [Node("select", (n, one, zero), I32) if n.dtype == BOOL else n for n in nodes]
        if op in FLOORED:
            return self._wrap(self._floored_division(op, nodes))
        if op in ("eq", "ne") and all(id(n) in t.searches for n in nodes):  # searchsorted(a, q) == ...(a, kv)
            (first, table, flipped), (second, _, flipped_too) = (t.searches[id(n)] for n in nodes)
            if first.same_boundaries(second) and flipped == flipped_too:  # bounds gathered at one count
                bounds = searches.count_bounds(first)
                if bounds is None:
                    kept = first.table or table(first.c)
                    first, second = (dataclasses.replace(x, table=kept) for x in (first, second))
                kept_bounds = None if bounds is None else table(bounds)
                equal = Node("eq", tuple(nodes), BOOL, searches.SearchedEqual(first, second, kept_bounds))
                return self._wrap(equal if op == "eq" else Node("not", (equal,), BOOL))
        dtype = F32 if op in FLOAT_ONLY or any(n.dtype == F32 for n in nodes) else I32
        nodes = [self._convert(n, dtype) for n in nodes]
        return self._wrap(Node(op, tuple(nodes), BOOL if op in COMPARES else dtype))

    def _truth(self, x: object) -> Traced:
        """x as a boolean: itself, or x != 0 of a number."""
        node = self._lift(x)
        if node.dtype == BOOL:
            return self._wrap(node)
        return self._wrap(Node("ne", (node, Node("const", (), node.dtype, 0.0 if node.dtype == F32 else 0)), BOOL))

    def _integers(self, symbol: str, nodes: list[Node]) -> list[object]:
        """The operands of a bitwise op as `bitwise` takes them: a constant as a Python int, a traced value as
        a Traced, a boolean as 1 or 0 (as NumPy promotes it); a float is refused, as NumPy refuses it."""
        if any(n.dtype == F32 for n in nodes):
            raise self._tracing.refuse(f"'{symbol}' of a float value (bitwise ops take integers and booleans)")
        one, zero = Node("const", (), I32, 1), Node("const", (), I32, 0)
        nodes = [Node("select", (n, one, zero), I32) if n.dtype == BOOL and n.op != "const" else n for n in nodes]
        return [int(n.value) if n.op == "const" else self._wrap(n) for n in nodes]

    def _bitwise(self, op: str, nodes: list[Node]) -> Traced:
        """&, |, ^, ~ of integers (`tessera.variants.bitwise`: each of the kernel's arithmetic ops)."""
        operands = self._integers(bitwise.SYMBOLS.get(op, "~"), nodes)
        if op == "not":
            return bitwise.invert(operands[0])
        a, b = operands
        if isinstance(a, int):
            a, b = b, a
        if isinstance(a, int):  # two constants (a constant traced value beside a number)
            return self._wrap(self._lift({"and": a & b, "or": a | b, "xor": a ^ b}[op]))
        result = bitwise.binary(op, a, b, self._tracing.refuse)
        return result if isinstance(result, Traced) else self._wrap(self._lift(result))

    def _shift(self, op: str, x: object, n: object) -> Traced:
        """x << n, x >> n (np.left_shift, np.right_shift) of integers by a constant (`bitwise.shift`)."""
        a, b = self._integers(bitwise.SYMBOLS[op], [self._lift(x), self._lift(n)])
        if isinstance(a, int) and isinstance(b, int):
            return self._wrap(self._lift(a << b if op == "lshift" else a >> b))
        if isinstance(a, int):
            a = self._wrap(self._lift(a))
        return bitwise.shift(op, a, b, self._tracing.refuse)

    def _floored_division(self, op: str, nodes: list[Node]) -> Node:
        """a // b or a % b, Python's and NumPy's: floor division and a modulus with the divisor's sign. Of i32
        values the `tile.floordiv` / `tile.mod` ops; with a float operand an f32 "floordiv" / "mod" node,
        which `tessera.variants.float_division` emits as NumPy computes it (from an exact fmod: 1.0 // 0.1 is
        9.0). A constant divisor 0 is refused by name."""
        symbol = {"floordiv": "//", "mod": "%"}[op]
        if nodes[1].op == "const" and nodes[1].value == 0:
            raise self._tracing.refuse(f"'{symbol}' by the constant 0 (division by zero)")
        if any(n.dtype == F32 for n in nodes):
            return Node(op, tuple(self._convert(n, F32) for n in nodes), F32)
        return Node(op, tuple(nodes), I32)

    def _fmod(self, a: object, b: object) -> Traced:
        """np.fmod(a, b), C's remainder (the dividend's sign): of i32 values Python's a % b less b where it is
        not 0 and a and b differ in sign (a zero divisor gives 0, as NumPy's); with a float operand an f32
        "fmod" node, emitted exactly (`tessera.variants.float_division`)."""
        x, y = self._lift(a), self._lift(b)
        if BOOL in (x.dtype, y.dtype):
            raise self._tracing.refuse("np.fmod of a boolean value (use np.where to turn a condition into numbers)")
        if y.op == "const" and y.value == 0:
            raise self._tracing.refuse("np.fmod by the constant 0 (division by zero)")
        if F32 in (x.dtype, y.dtype):
            return self._wrap(Node("fmod", (self._convert(x, F32), self._convert(y, F32)), F32))
        r = Node("mod", (x, y), I32)
        zero = Node("const", (), I32, 0)
        negative = [self._wrap(Node("lt", (v, zero), BOOL)) for v in (x, y)]
        signs_differ = self._apply("ne", *negative)
        fix = Node("and", (Node("ne", (r, zero), BOOL), signs_differ.node), BOOL)
        return self._wrap(Node("select", (fix, Node("sub", (r, y), I32), r), I32))

    def _round(self, op: str, x: object, decimals: object = 0) -> Traced:
        """np.floor / np.ceil / np.rint / np.trunc (`_ROUNDING`), and np.round(x, decimals) ("round") as NumPy
        computes it: rint(x * 10^d) / 10^d (for d < 0, rint(x / 10^-d) * 10^-d), d a Python integer. Of an i32 value
        floor, ceil, trunc and round are the value itself (NumPy keeps integers), rint its f32 conversion.
        Their derivative is 0 almost everywhere (step functions: `derivative.score_derivative`)."""
        t = self._tracing
        node = self._lift(x)
        if node.dtype == BOOL:
            raise t.refuse(f"np.{op} of a boolean value (use np.where to turn a condition into numbers)")
        if isinstance(decimals, Traced) or not isinstance(decimals, (int, np.integer)):
            raise t.refuse(f"np.round with decimals={decimals!r} (a Python integer)")
        if node.dtype == I32:
            if op == "rint":
                return self._wrap(self._convert(node, F32))
            if decimals >= 0:
                return self._wrap(node)
            node = self._convert(node, F32)  # np.round(int, -1): NumPy rounds to tens and keeps the integer
            scale = Node("const", (), F32, float(10 ** -decimals))
            rounded = Node("mul", (Node("rint", (Node("div", (node, scale), F32),), F32), scale), F32)
            return self._wrap(Node("to_i32", (rounded,), I32))
        if decimals == 0:
            return self._wrap(Node("rint" if op == "round" else op, (node,), F32))
        scale = Node("const", (), F32, float(10 ** abs(decimals)))
        if decimals > 0:
            return self._wrap(Node("div", (Node("rint", (Node("mul", (node, scale), F32),), F32), scale), F32))
        return self._wrap(Node("mul", (Node("rint", (Node("div", (node, scale), F32),), F32), scale), F32))

    def _where(self, cond: object, a: object, b: object) -> Traced:
        c = self._lift(cond)
        if c.dtype != BOOL:
            raise self._tracing.refuse("np.where with a condition that is not boolean")
        x, y = self._lift(a), self._lift(b)
        if BOOL in (x.dtype, y.dtype):
            if x.dtype != y.dtype:
                raise self._tracing.refuse("np.where mixing a boolean with a number")
            picked = Node("and", (c, x), BOOL), Node("and", (Node("not", (c,), BOOL), y), BOOL)
            return self._wrap(Node("or", picked, BOOL))
        dtype = F32 if F32 in (x.dtype, y.dtype) else I32
        return self._wrap(Node("select", (c, self._convert(x, dtype), self._convert(y, dtype)), dtype))

    def _search(self, function: str, boundaries: object, value: object, side: object = "left",
                sorter: object = None, digitize: bool = False) -> Traced:
        """`function` (np.searchsorted, torch.searchsorted, torch.bucketize; with `digitize` np.digitize, `side`
        its `right`) of a traced value in sorted boundaries: a captured array or one made in the function,
        checked here (`searches.boundaries_problem`), searched as `tessera.variants.searches` builds it. A
        sorter=, a traced side, boundaries computed from traced values and a boolean value are refused."""
        t = self._tracing
        if sorter is not None:
            raise t.refuse(f"{function} with sorter= (sort the boundaries on the host: a search needs them sorted)")
        if digitize and not isinstance(side, (bool, np.bool_)):
            raise t.refuse(f"{function} with right={side!r} (True or False)")
        if not digitize and side not in searches.SIDES:
            raise t.refuse(f"{function} with side={side!r} ('left' or 'right')")
        capture = None
        if isinstance(boundaries, _ArrayProxy):
            capture = boundaries._captured()
            name, array = boundaries._capture.name, boundaries._capture.array
        elif isinstance(boundaries, Traced):
            raise t.refuse(f"{function} in boundaries computed from traced values (search a captured array)")
        else:
            name = "the boundaries made in the function"
            array = torch_mods.as_numpy(boundaries) if torch_mods.is_tensor(boundaries) else np.asarray(boundaries)
        node = self._lift(value)
        if node.dtype == BOOL:
            raise t.refuse(f"{function} of a boolean value (use np.where to turn a condition into numbers)")
        problem = searches.boundaries_problem(array, decreasing=digitize)
        if problem:
            raise t.refuse(f"{function} of {name}: {problem}")

        def table(c: np.ndarray) -> CapturedArray:
            """The kernel input the binary search gathers the compared boundaries c from: the captured array
            itself where the kernel reads c from it, else an input of its own."""
            kept = capture is not None and capture.dtype == (F32 if c.dtype.kind == "f" else I32)
            found = capture if kept and np.array_equal(capture.array, c) else None
            if found is None:
                key = (capture.name if capture is not None else "", c.dtype.str, c.tobytes())
                if key not in t.searched:
                    stem = f"{boundaries._capture.name}_searched" if capture is not None else "boundaries"
                    t.searched[key] = CapturedArray(t.unique_name(stem), c)
                found = t.searched[key]
            t.arrays.setdefault(id(found), found)
            return found

        if digitize:
            count, search = searches.digitize_count(node, array, bool(side), table)
        else:
            search = searches.search_count(node, array, str(side), table)
            count = search.count
        t.searches[id(count)] = (search, table, count is not search.count)  # n - count: decreasing bins
        t.counts[id(count)] = Count(len(array), function, name, node)
        return self._wrap(count)

    def _power(self, base: object, exponent: object) -> Traced:
        """base ** exponent (np.power, np.float_power) in the ops the kernel has:

        - a constant integer exponent n: x * x * ... by squaring (NumPy's x ** 2 is x * x), then 1 / that for
          n < 0 (an i32 base with n < 0 is refused, as NumPy refuses it); x ** 0.5 is np.sqrt(x); another
          constant p is exp2(p log2 x) (NaN for x < 0, as NumPy gives for a non-integer p);
        - a positive constant base c with a traced exponent y: exp2(y log2 c), log2 c computed on the host
          (ALiBi's `2 ** (-8 * (h + 1) / H)` is exp2 of the exponent itself); an integer base needs a float
          exponent (an i32 power of a traced exponent is refused);
        - a traced base x and a traced exponent y (not both integers: an integer power is refused, as for a
          constant base): `_traced_power`."""
        t = self._tracing
        x, y = self._lift(base), self._lift(exponent)
        if BOOL in (x.dtype, y.dtype):
            raise t.refuse("'**' of a boolean value (use np.where to turn a condition into numbers)")
        if y.op == "const":
            p = y.value
            if float(p).is_integer() and abs(p) <= 2**16:
                n = int(p)
                if x.dtype == I32 and y.dtype == I32 and n < 0:
                    raise t.refuse(f"'**' of an integer by the negative power {n} (NumPy refuses it too; write a "
                                   "float base such as 2.0)")
                dtype = F32 if F32 in (x.dtype, y.dtype) else x.dtype
                x = self._convert(x, dtype)
                result, square, m = None, x, abs(n)
                while m:
                    if m & 1:
                        result = square if result is None else Node("mul", (result, square), dtype)
                    m >>= 1
                    if m:
                        square = Node("mul", (square, square), dtype)
                if result is None:  # x ** 0 is 1 (NaN ** 0 too)
                    return self._wrap(Node("const", (), dtype, 1.0 if dtype == F32 else 1))
                if n < 0:
                    result = Node("div", (Node("const", (), F32, 1.0), result), F32)
                return self._wrap(result)
            x = self._convert(x, F32)
            if p == 0.5:
                return self._wrap(Node("sqrt", (x,), F32))
            log2x = Node("log2", (x,), F32)
            return self._wrap(Node("exp2", (Node("mul", (Node("const", (), F32, float(p)), log2x), F32),), F32))
        if x.op == "const":
            c = x.value
            if x.dtype == I32 and y.dtype == I32:
                raise t.refuse(f"'**' of the integer {c} by a traced integer exponent (an integer power; write a "
                               f"float base such as {float(c)!r})")
            if not c > 0:
                raise t.refuse(f"'**' with the base {c} and a traced exponent (only a positive constant base: "
                               "c ** y is exp2(y log2 c))")
            y = self._convert(y, F32)
            if float(c) != 2.0:
                y = Node("mul", (y, Node("const", (), F32, float(np.log2(float(c))))), F32)
            return self._wrap(Node("exp2", (y,), F32))
        if x.dtype == I32 and y.dtype == I32:
            raise t.refuse("'**' of a traced integer base by a traced integer exponent (an integer power; write a "
                           "float base such as x.astype(float))")
        return self._wrap(_traced_power(self._convert(x, F32), self._convert(y, F32)))

    def _expanded(self, name: str, x: object) -> Traced:
        """np.<name>(x) for one of the NumPy functions traced as a few ops (`_EXPANDED`: square, sign, log1p,
        expm1), for `torch_mods`."""
        return _EXPANDED[getattr(np, name)](self, x)

    def clip(self, lo=None, hi=None) -> Traced:
        """x.clip(lo, hi) as np.clip (either bound may be None)."""
        out = self if lo is None else self._apply("max", self, lo)
        return out if hi is None else out._apply("min", out, hi)

    def astype(self, dtype, *args, **kwargs) -> Traced:
        """x.astype(dtype) as NumPy converts: a float to an integer truncates toward zero (`tile.cast`,
        cvt.rzi), an integer to a float converts (exact below 2^24), a boolean to a number is 1 or 0, a number
        to a boolean is x != 0. Every float type is traced as f32 and every signed integer as i32; float16,
        unsigned integers (except from a boolean) and other kinds are refused by name."""
        t = self._tracing
        try:
            target = np.dtype(dtype)
        except TypeError:
            raise t.refuse(f".astype({dtype!r}) (a NumPy dtype: int, float, bool, np.int32, np.float32, ...)") \
                from None
        node = self.node
        kind = {"f": F32, "i": I32, "b": BOOL}.get(target.kind)
        if target.kind == "u" and node.dtype == BOOL:
            kind = I32
        if kind is None or (kind == F32 and target.itemsize < 4):
            raise t.refuse(f".astype({target}) (traced as f32, i32 or bool: float32/64, signed integers, bool)")
        if kind == node.dtype:
            return self
        if node.dtype == BOOL:
            one, zero = (Node("const", (), kind, 1.0 if kind == F32 else 1),
                         Node("const", (), kind, 0.0 if kind == F32 else 0))
            return self._wrap(Node("select", (node, one, zero), kind))
        if kind == BOOL:
            return self._wrap(Node("ne", (node, Node("const", (), node.dtype, 0.0 if node.dtype == F32 else 0)),
                                   BOOL))
        if kind == F32:
            return self._wrap(self._convert(node, F32))
        return self._wrap(Node("to_i32", (node,), I32))

    # -- NumPy protocols -------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise self._tracing.refuse(f"np.{ufunc.__name__}.{method}" if method != "__call__" else
                                       f"np.{ufunc.__name__} with keyword arguments {sorted(kwargs)}")
        if ufunc in (np.power, np.float_power) and len(inputs) == 2:
            return self._power(*inputs)
        if ufunc in _EXPANDED:
            return _EXPANDED[ufunc](self, inputs[0])
        if ufunc in _ROUNDING and len(inputs) == 1:
            return self._round(_ROUNDING[ufunc], inputs[0])
        if ufunc is np.fmod and len(inputs) == 2:
            return self._fmod(*inputs)
        if ufunc in _LOGICAL:  # of numbers, their truth (x != 0), as NumPy takes it; &, |, ^ of them are bitwise
            inputs = tuple(self._truth(x) for x in inputs)
        if ufunc in (np.left_shift, np.right_shift) and len(inputs) == 2:
            return self._shift("lshift" if ufunc is np.left_shift else "rshift", *inputs)
        op = _UNARY.get(ufunc) or _BINARY.get(ufunc)
        if op is None:
            raise self._tracing.refuse(f"np.{ufunc.__name__} (supported: {', '.join(sorted(_ufunc_names()))}, "
                                       "np.where, np.clip)")
        return self._apply(op, *inputs)

    def __array_function__(self, func, types_, args, kwargs):
        if func is np.where and len(args) == 3 and not kwargs:
            return self._where(*args)
        if func is np.clip and not kwargs and len(args) == 3:
            x, lo, hi = args
            return self._apply("min", self._apply("max", x, lo), hi)
        if func in (np.round, np.around) and set(kwargs) <= {"decimals"} and 1 <= len(args) <= 2:
            return self._round("round", args[0], args[1] if len(args) == 2 else kwargs.get("decimals", 0))
        if func is np.fix and not kwargs and len(args) == 1:
            return self._round("trunc", args[0])
        if func in (np.searchsorted, np.digitize):
            try:
                bound = inspect.signature(func).bind(*args, **kwargs).arguments
            except TypeError as error:
                raise self._tracing.refuse(f"np.{func.__name__} with these arguments ({error})") from None
            if func is np.digitize:
                return self._search("np.digitize", bound["bins"], bound["x"], bound.get("right", False),
                                    digitize=True)
            return self._search("np.searchsorted", bound["a"], bound["v"], bound.get("side", "left"),
                                bound.get("sorter"))
        raise self._tracing.refuse(f"np.{func.__name__} (supported: np.where(c, a, b), np.clip(x, lo, hi), "
                                   "np.round(x, decimals), np.fix, np.searchsorted, np.digitize and the ufuncs)")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        """torch calls on traced values (`tessera.variants.torch_mods`)."""
        everything = list(args) + list((kwargs or {}).values())
        traced = next(a for a in everything if isinstance(a, Traced))
        return torch_mods.dispatch(traced, func, tuple(args), dict(kwargs or {}))

    # -- operators -------------------------------------------------------------------------------------
    def __add__(self, o): return self._apply("add", self, o)
    def __radd__(self, o): return self._apply("add", o, self)
    def __sub__(self, o): return self._apply("sub", self, o)
    def __rsub__(self, o): return self._apply("sub", o, self)
    def __mul__(self, o): return self._apply("mul", self, o)
    def __rmul__(self, o): return self._apply("mul", o, self)
    def __truediv__(self, o): return self._apply("div", self, o)
    def __rtruediv__(self, o): return self._apply("div", o, self)
    def __neg__(self): return self._apply("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self._apply("abs", self)
    def __lt__(self, o): return self._apply("lt", self, o)
    def __le__(self, o): return self._apply("le", self, o)
    def __gt__(self, o): return self._apply("gt", self, o)
    def __ge__(self, o): return self._apply("ge", self, o)
    def __eq__(self, o): return self._apply("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return self._apply("ne", self, o)  # type: ignore[override]
    def __and__(self, o): return self._apply("and", self, o)
    def __rand__(self, o): return self._apply("and", o, self)
    def __or__(self, o): return self._apply("or", self, o)
    def __ror__(self, o): return self._apply("or", o, self)
    def __invert__(self): return self._apply("not", self)
    def __floordiv__(self, o): return self._apply("floordiv", self, o)
    def __rfloordiv__(self, o): return self._apply("floordiv", o, self)
    def __mod__(self, o): return self._apply("mod", self, o)
    def __rmod__(self, o): return self._apply("mod", o, self)
    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self
    __hash__ = None  # type: ignore[assignment]

    def _refuse_op(name: str):  # noqa: N805 - builds methods
        def method(self, *args):
            raise self._tracing.refuse(f"the operator {name} on a traced value")
        return method

    def __pow__(self, o): return self._power(self, o)
    def __rpow__(self, o): return self._power(o, self)

    def __xor__(self, o): return self._apply("xor", self, o)
    def __rxor__(self, o): return self._apply("xor", o, self)

    def __lshift__(self, o): return self._shift("lshift", self, o)
    def __rlshift__(self, o): return self._shift("lshift", o, self)
    def __rshift__(self, o): return self._shift("rshift", self, o)
    def __rrshift__(self, o): return self._shift("rshift", o, self)

    __matmul__ = __rmatmul__ = _refuse_op("@")

    def __bool__(self):
        raise self._tracing.refuse("Python control flow on a traced value (if, and, or, not, bool(): "
                                   "data-dependent branches; use np.where, &, |, ~)")

    def __index__(self):
        raise self._tracing.refuse(_UNCAPTURED)

    def __int__(self):
        raise self._tracing.refuse("int() of a traced value (write x.astype(int))")

    def __float__(self):
        raise self._tracing.refuse("float() of a traced value (math.sqrt, math.log, math.exp, ... take Python "
                                   "numbers: on a traced value write np.sqrt, np.log, np.exp, ...)")

    def _math_rounding(self, name: str):
        raise self._tracing.refuse(f"math.{name} of a traced value (it takes one Python number, and fails on the "
                                   f"NumPy index grids of the reference too: write np.{name})")

    def __floor__(self): return self._math_rounding("floor")
    def __ceil__(self): return self._math_rounding("ceil")
    def __trunc__(self): return self._math_rounding("trunc")

    def __round__(self, ndigits=None):
        raise self._tracing.refuse("round() of a traced value (NumPy arrays have no round(): write np.round)")

    def __iter__(self):
        raise self._tracing.refuse("iteration over a traced value")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        torch = torch_mods.torch_module()
        if torch is not None and name in torch_mods.TRACED_METHODS:  # a tensor method: (q_idx - kv_idx).abs()
            method = getattr(torch.Tensor, name)
            return lambda *args, **kwargs: torch_mods.dispatch(self, method, (self, *args), kwargs)
        if torch is not None and name in torch_mods.TRACED_ATTRIBUTES:  # torch.tensor(2.0, dtype=score.dtype)
            return torch_mods.TRACED_ATTRIBUTES[name](self)
        raise self._tracing.refuse(f"the attribute .{name} of a traced value")


def _traced_power(x: Node, y: Node) -> Node:
    """x ** y of two traced f32 values with NumPy's sign rules: |x| ** y = exp2(y log2 |x|) (`lg2.approx` and
    `ex2.approx`: a relative error of about |y log2 x| 2^-22 ln 2 beside ex2's 2 ulp, within a soft-cap's tanh
    bound while |y log2 x| < 2^10); for x < 0 that with the sign of (-1)^y where y is an integer (its parity
    from y - 2 floor(y / 2)), NaN where it is not; x ** 0 = 1 and 1 ** y = 1 (NaN included); 0 ** y is 0 for
    y > 0 and inf for y < 0 (-0 ** -1 gives +inf where NumPy gives -inf)."""
    def c(v: float) -> Node:
        return Node("const", (), F32, v)

    magnitude = Node("exp2", (Node("mul", (y, Node("log2", (Node("abs", (x,), F32),), F32)), F32),), F32)
    whole = Node("eq", (Node("floor", (y,), F32), y), BOOL)
    half = Node("floor", (Node("mul", (y, c(0.5)), F32),), F32)
    odd = Node("eq", (Node("sub", (y, Node("mul", (half, c(2.0)), F32)), F32), c(1.0)), BOOL)
    nan = Node("sqrt", (x,), F32)  # NaN where it is read (x < 0): Tile IR fills no NaN constant
    negative_base = Node("select", (whole, Node("select", (odd, Node("neg", (magnitude,), F32), magnitude), F32),
                                    nan), F32)
    signed = Node("select", (Node("lt", (x, c(0.0)), BOOL), negative_base, magnitude), F32)
    one = Node("or", (Node("eq", (y, c(0.0)), BOOL), Node("eq", (x, c(1.0)), BOOL)), BOOL)
    return Node("select", (one, c(1.0), signed), F32)


def _sign(t: Traced, x: object) -> Traced:
    """np.sign: 1 / -1 / x * 0 (0 keeps its sign, NaN stays NaN; a derivative of 0)."""
    return t._where(t._apply("gt", x, 0), 1, t._where(t._apply("lt", x, 0), -1, t._apply("mul", x, 0)))


_EXPANDED = {
    np.square: lambda t, x: t._apply("mul", x, x),
    np.sign: _sign,
    np.log1p: lambda t, x: t._apply("log", t._apply("add", 1.0, x)),
    np.expm1: lambda t, x: t._apply("sub", t._apply("exp", x), 1.0),
}
"""NumPy functions traced as a few of the ops (np.log1p and np.expm1 without their accuracy near 0)."""


def _ufunc_names() -> list[str]:
    return [f"np.{u.__name__}" for u in (*_UNARY, *_BINARY, *_EXPANDED, *_ROUNDING, np.power, np.float_power,
                                         np.fmod, np.left_shift, np.right_shift)]


@dataclass
class _Capture:
    """An array a modifier names, until it is indexed with a traced value: `name` as the user wrote it,
    `unique` the kernel input's name, `array` the NumPy array (a torch tensor's copy); `captured` once checked."""

    name: str
    unique: str
    array: np.ndarray
    captured: CapturedArray | None = None


class _ArrayProxy:
    """A captured NumPy array while tracing: indexing with traced values (and numbers) records a gather."""

    def __init__(self, tracing: _Tracing, capture: _Capture):
        self._tracing, self._capture = tracing, capture

    def _captured(self) -> CapturedArray:
        """The kernel input, checked at its first traced read (so a refusal names that line)."""
        c = self._capture
        if c.captured is None:
            if c.array.dtype in (BF16, *FP8_DTYPES):  # a bf16 or 8-bit table: f32 holds its values exactly
                c.array = c.array.astype(np.float32)
            problem = _array_problem(c.array)
            if problem:
                raise self._tracing.refuse(f"the captured array {c.name}: {problem}")
            boolean = c.array.dtype.kind == "b"
            c.captured = CapturedArray(c.unique, c.array.astype(np.int32) if boolean else c.array, boolean)
        return c.captured

    def __getitem__(self, index) -> Traced:
        t, arr, name = self._tracing, self._capture.array, self._capture.name
        index = index if isinstance(index, tuple) else (index,)
        if not any(isinstance(i, Traced) for i in index):  # a constant read: the value itself
            return arr[index if len(index) != 1 else index[0]]
        captured = self._captured()
        if len(index) != arr.ndim:
            raise t.refuse(f"{name}[...] with {len(index)} indices: a captured array of shape {arr.shape} takes "
                           "exactly one index per dimension")
        lifter = next(i for i in index if isinstance(i, Traced))
        nodes = []
        for i in index:
            if isinstance(i, slice) or i is Ellipsis or i is None:
                raise t.refuse(f"a slice of the captured array {name} (index it with one value per dimension)")
            n = lifter._lift(i)
            if n.dtype != I32:
                raise t.refuse(f"{name}[...] with a {n.dtype} index (indices are integers)")
            nodes.append(n)
        t.arrays.setdefault(id(captured), captured)
        node = Node("gather", tuple(nodes), captured.dtype, captured)
        t.reads.append(Read(captured, name, tuple(nodes), t.read_site()))
        if captured.boolean:
            node = Node("ne", (node, Node("const", (), I32, 0)), BOOL)
        return Traced(t, node)

    def whole(self):
        """The array used as a value without an index: a 0-d array's number (a constant, as a constant index's
        read is); any other array is refused by name (it has no one value per score)."""
        arr, name = self._capture.array, self._capture.name
        if arr.ndim == 0:
            return arr[()]
        raise self._tracing.refuse(f"the captured array {name} of shape {arr.shape} used as a whole (index it with "
                                   f"one value per dimension, such as {name}[{', '.join(MASK_MOD_ARGS[-arr.ndim:])}])")

    def searchsorted(self, v, side="left", sorter=None) -> Traced:
        """`array.searchsorted(v, side)`, NumPy's method: np.searchsorted (`Traced._search`)."""
        if not isinstance(v, Traced):
            return self._capture.array.searchsorted(v, side, sorter)
        return v._search("np.searchsorted", self, v, side, sorter)

    def __getattr__(self, name: str):
        raise self._tracing.refuse(f"the attribute .{name} of the captured array {self._capture.name}")

    def __setitem__(self, index, value):
        raise self._tracing.refuse(f"an assignment into the captured array {self._capture.name} (a modifier reads "
                                   "its arrays; it may not change them)")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        """A torch function of a captured tensor: torch.searchsorted / torch.bucketize of a traced value
        (`torch_mods.dispatch`); any other is refused by name."""
        everything = list(args) + list((kwargs or {}).values())
        proxy = next(a for a in everything if isinstance(a, _ArrayProxy))
        traced = next((a for a in everything if isinstance(a, Traced)), None)
        if traced is not None and torch_mods.is_search(func):
            return torch_mods.dispatch(traced, func, tuple(args), dict(kwargs or {}))
        raise proxy._tracing.refuse(torch_mods.captured_call(func, proxy._capture.name))


def _array_problem(array: np.ndarray) -> str | None:
    """Why `array` cannot be a kernel input (f32 for floats, i32 for integers and booleans), or None."""
    if array.dtype.kind not in "fiub":
        return f"its dtype {array.dtype} is not a number or a boolean"
    if array.ndim == 0 or array.size == 0:
        return f"its shape {array.shape} is empty (a non-empty array of at least one dimension)"
    if array.dtype.kind in "iu" and (int(array.min()) < I32_RANGE[0] or int(array.max()) > I32_RANGE[1]):
        return (f"its values [{int(array.min())}, {int(array.max())}] do not fit i32 (the kernel reads integer "
                "arrays as i32)")
    if array.dtype.kind == "f" and array.dtype.itemsize > 4:  # (narrower floats all fit f32: no pass over them)
        finite = np.isfinite(array)
        largest = float(np.max(np.abs(array), where=finite, initial=0.0))
        if largest > float(np.finfo(np.float32).max):
            return f"its value {largest!r} overflows f32 (the kernel reads float arrays as f32)"
    return None


def _underlying(fn: Callable) -> Callable:
    """The function a functools.partial (of a partial ...), a bound method or a callable object calls; `fn`
    itself otherwise."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif _method_parts(fn) is not None:
            fn = _method_parts(fn)[0]
        else:
            return fn


def _method_parts(fn: object) -> tuple[types.FunctionType, object] | None:
    """(function, instance) of a bound method of a Python function, of a callable object whose class defines
    `__call__` in Python (`class Bias: def __call__(self, score, b, h, q_idx, kv_idx)`), or of a torch module
    (its class's `forward`; hooks are not run); None otherwise."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return fn.__func__, fn.__self__
    torch = torch_mods.torch_module()
    if torch is not None and isinstance(fn, torch.nn.Module):  # a module is called through its forward
        forward = getattr(type(fn), "forward", None)
        return (forward, fn) if isinstance(forward, types.FunctionType) else None
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType) and not isinstance(fn, type):
        return call, fn
    return None


def _rebound_value(name: str, value: object, wrap: Callable, memo: dict) -> object:
    """`value`, a variable a modifier reads, as `rebind_arrays` rebinds it: an array of at least one dimension
    wrapped, a user's function rebound, a tuple or list of them each rebound; anything else itself."""
    if (isinstance(value, np.ndarray) or torch_mods.is_tensor(value)) and value.ndim:  # 0-d: a constant
        return wrap(name, value)
    if _is_user_function(value):
        return rebind_arrays(value, wrap, memo)
    if isinstance(value, (tuple, list)) and any(_is_user_function(v) or isinstance(v, np.ndarray)
                                                or torch_mods.is_tensor(v) for v in value):
        return type(value)(_rebound_value(name, v, wrap, memo) for v in value)
    if isinstance(value, dict) and any(_is_user_function(v) or isinstance(v, np.ndarray) or torch_mods.is_tensor(v)
                                       for v in value.values()):  # by key: a torch module's buffers, parameters
        return {key: _rebound_value(str(key), v, wrap, memo) for key, v in value.items()}
    return value


def _rebound_instance(obj: object, wrap: Callable, memo: dict) -> object:
    """A copy of `obj` (a callable object's instance, or a bound method's) whose attributes read as
    `_rebound_value` makes them: its arrays (its own and its class's) wrapped, its Python methods bound to the
    copy with their arrays rebound too (`self.table[h]`, `self.helper(q_idx)` trace; a dict attribute of arrays
    is rebound by key: a torch module's buffers and parameters). A class whose instances cannot be made without
    its constructor (one of C) is refused by name."""
    cls, key = type(obj), ("instance", id(obj))
    if key in memo:
        return memo[key]
    try:
        clone = object.__new__(cls)
    except TypeError:
        raise ModTraceError(f"a score_mod or mask_mod's instance of {cls.__qualname__} cannot be copied for "
                            "tracing (write the modifier as a function, or a class defined in Python)") from None
    memo[key] = clone
    state: dict[str, object] = {}
    for klass in reversed(cls.__mro__[:-1]):  # class attributes: arrays and methods
        for name, value in vars(klass).items():
            if isinstance(value, types.FunctionType) and not name.startswith("__"):
                state[name] = types.MethodType(rebind_arrays(value, wrap, memo), clone)
            elif isinstance(value, np.ndarray) or torch_mods.is_tensor(value):
                state[name] = _rebound_value(name, value, wrap, memo)
    own = dict(getattr(obj, "__dict__", {}))
    for klass in cls.__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(obj, name) and name not in ("__dict__", "__weakref__"):
                own[name] = getattr(obj, name)
    state.update({name: _rebound_value(name, value, wrap, memo) for name, value in own.items()})
    for name, value in state.items():
        try:
            object.__setattr__(clone, name, value)
        except AttributeError:  # a method name on a class with __slots__: the class's own method is used
            pass
    return clone


def function_name(fn: Callable) -> str:
    """How messages name a modifier: its qualified name (a functools.partial's function's)."""
    inner = _underlying(fn)
    return getattr(inner, "__qualname__", repr(inner))


def _is_user_function(value: object) -> bool:
    if isinstance(value, functools.partial) or _method_parts(value) is not None:
        return _is_user_function(_underlying(value))
    module = getattr(value, "__module__", None) or ""
    return isinstance(value, types.FunctionType) and not module.split(".")[0] in ("numpy", "tessera", "builtins")


def _global_names(code: types.CodeType) -> set[str]:
    """The global names `code` reads, and those of the code it nests (a def, a lambda, a generator expression or,
    before Python 3.12, a comprehension inside the modifier: each runs with the modifier's globals)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def rebind_arrays(fn: Callable, wrap: Callable[[str, np.ndarray], object], _memo: dict | None = None) -> Callable:
    """A copy of `fn` whose captured NumPy arrays and torch tensors (closure cells, argument defaults, and the
    module globals its code names) read as `wrap(name, array)`, except 0-d ones (constants, left as they are);
    Python functions it captures (a helper, the parts of a composed mask, also in a tuple or list) are rebound
    the same way, so compositions trace; a functools.partial is rebound as its function and the arguments it
    binds; a callable object (a class with a Python `__call__`) or a bound method as its function given a copy
    of the instance whose arrays are wrapped (`_rebound_instance`). Everything else is unchanged."""
    if not isinstance(_underlying(fn), types.FunctionType):
        raise ModTraceError(f"a score_mod or mask_mod must be a Python function (def, lambda, functools.partial "
                            f"of one, or an object whose class defines __call__ in Python); got "
                            f"{type(_underlying(fn)).__name__}")
    memo = {} if _memo is None else _memo
    if id(fn) in memo:
        return memo[id(fn)]

    def rebound(name: str, value: object) -> object:
        return _rebound_value(name, value, wrap, memo)

    parts = _method_parts(fn)
    if parts is not None:
        function, instance = parts
        memo[id(fn)] = bound = functools.partial(rebind_arrays(function, wrap, memo),
                                                 _rebound_instance(instance, wrap, memo))
        return bound
    if isinstance(fn, functools.partial):
        inner = rebind_arrays(fn.func, wrap, memo)
        args = [rebound(f"{function_name(fn)}_arg{i}", v) for i, v in enumerate(fn.args)]
        return functools.partial(inner, *args, **{k: rebound(k, v) for k, v in fn.keywords.items()})
    code = fn.__code__
    closure = None
    if fn.__closure__:
        cells = []
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell: leave it for Python to report
                cells.append(cell)
                continue
            cells.append(types.CellType(rebound(name, value)))
        closure = tuple(cells)
    glb = dict(fn.__globals__)
    defaults = fn.__defaults__
    if defaults:  # def mod(..., doc_ids=DOC): an argument's default is captured as a closure cell is
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
        defaults = tuple(rebound(name, value) for name, value in zip(names, defaults))
    copy = types.FunctionType(code, glb, fn.__name__, defaults, closure)
    memo[id(fn)] = copy  # before the globals: a recursive reference finds the copy
    for name in _global_names(code):
        if name in glb:
            glb[name] = rebound(name, glb[name])
    copy.__kwdefaults__ = ({name: rebound(name, value) for name, value in fn.__kwdefaults__.items()}
                           if fn.__kwdefaults__ else fn.__kwdefaults__)
    copy.__qualname__ = fn.__qualname__
    return copy


def trace_mod(fn: Callable, kind: str) -> Trace:
    """Trace `fn`, a "score_mod" (5 arguments, returns a number) or a "mask_mod" (4 arguments, returns a
    boolean), into a `Trace`; raises ModTraceError for what cannot be traced (module docstring)."""
    if kind not in ("score_mod", "mask_mod"):
        raise ValueError(f"kind must be score_mod or mask_mod; got {kind!r}")
    if not callable(fn):
        raise TypeError(f"{kind} must be a function; got {type(fn).__name__}")
    tracing = _Tracing(fn, kind)
    inner = _underlying(fn)
    for test, what in ((inspect.isgeneratorfunction, "a generator function (it yields)"),
                       (inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator function")):
        if test(inner):
            raise tracing.refuse(f"{what}: a modifier returns its value")
    used: dict[int, _Capture] = {}

    def wrap(name: str, array) -> _ArrayProxy:
        if id(array) not in used:  # one input per array; two arrays of one name get _2, _3, ...
            used[id(array)] = _Capture(name, tracing.unique_name(name),
                                       torch_mods.as_numpy(array) if torch_mods.is_tensor(array) else array)
        return _ArrayProxy(tracing, used[id(array)])

    traced_fn = rebind_arrays(fn, wrap)
    names = SCORE_MOD_ARGS if kind == "score_mod" else MASK_MOD_ARGS
    args = [Traced(tracing, Node(n, (), F32 if n == "score" else I32)) for n in names]
    try:
        inspect.signature(traced_fn).bind(*args)
    except TypeError as error:
        raise ModTraceError(f"{kind} '{function_name(fn)}' cannot be called with a {kind}'s {len(names)} arguments "
                            f"({', '.join(names)}): {error}") from None
    try:
        result = traced_fn(*args)
    except ModTraceError:
        raise
    except Exception as error:  # e.g. NumPy refusing a traced index: name where it happened
        what = (_UNCAPTURED if isinstance(error, IndexError) and "valid indices" in str(error)
                else f"it: {type(error).__name__}: {error}")
        raise ModTraceError(f"{kind} '{function_name(fn)}' at {_user_line(error)}: cannot trace {what}") from None
    node = args[0]._lift(result) if not isinstance(result, Traced) else result.node
    if kind == "mask_mod" and node.dtype != BOOL:
        raise ModTraceError(f"mask_mod '{function_name(fn)}' returns a {node.dtype} value; a mask_mod returns a "
                            "boolean (True: the key is visible)")
    if kind == "score_mod":
        if node.dtype == BOOL:
            raise ModTraceError(f"score_mod '{function_name(fn)}' returns a boolean; a score_mod returns the new score")
        node = args[0]._convert(node, F32)
    return Trace(fn, node, list(tracing.arrays.values()), tracing.reads, tracing.counts)


def _user_line(error: BaseException) -> str:
    """file:line of the innermost traceback frame outside NumPy and this module."""
    where = "?"
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "numpy" not in name and name != __file__:
            where = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def bounds_checked(fn: Callable, kind: str) -> Callable:
    """`fn` with its captured arrays bounds-checked: an integer index outside an array (negative ones too,
    which NumPy would wrap) raises ModTraceError naming the function and the array, as the kernel's gathers
    would read 0 there. The reference and the host-side block mask call modifiers through this."""

    def wrap(name: str, array):
        check = _index_check(fn, kind, name)
        if torch_mods.is_tensor(array):
            return torch_mods.CheckedTensor(array, check)
        return array.view(_make_checked(check))

    rebound = rebind_arrays(fn, wrap)
    if _holds_tensors(fn):  # an object holding tensors (a torch module) is written for tensors
        return lambda *args: torch_mods.call_with_tensors(rebound, *args)
    return torch_mods.host_callable(rebound, _underlying(fn))  # torch functions take the grids as tensors


def _holds_tensors(fn: Callable) -> bool:
    """Whether the instance a modifier is called on (a callable object's, a bound method's, through partials)
    holds a torch tensor: as an attribute, or in a dict attribute (a torch module's buffers and parameters)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    parts = _method_parts(fn)
    if parts is None or torch_mods.torch_module() is None:
        return False
    values = list(getattr(parts[1], "__dict__", {}).values())
    values += [v for d in values if isinstance(d, dict) for v in d.values()]
    return any(torch_mods.is_tensor(v) for v in values)


def _index_check(fn: Callable, kind: str, name: str) -> Callable:
    """A check of one index per dimension against an array's shape, raising ModTraceError naming the array. A
    constant index (a Python or NumPy integer, `slopes[-1]`) is NumPy's, as the tracer reads it: in [-n, n)."""
    def check(idx: tuple, shape: tuple) -> None:
        if not all(isinstance(i, (np.ndarray, int, np.integer)) for i in idx):
            return
        for axis, (i, n) in enumerate(zip(idx, shape)):
            if not isinstance(i, np.ndarray) and -n <= i < n:
                continue
            i = np.asarray(i)
            if i.size and (i.min() < 0 or i.max() >= n):
                bad = int(i.min()) if i.min() < 0 else int(i.max())
                raise ModTraceError(f"{kind} '{function_name(fn)}' reads {name} at index {bad} of dimension "
                                    f"{axis}, outside its shape {shape}")
    return check


def _make_checked(check: Callable) -> type:
    class Checked(np.ndarray):
        def __getitem__(self, index):
            idx = index if isinstance(index, tuple) else (index,)
            base = self.view(np.ndarray)
            if len(idx) == base.ndim:
                check(idx, base.shape)
            return np.asarray(base[index])

    return Checked
