"""d score_mod / d score, traced: the backward's dS = dS_mod * d score_mod / d score (`score_derivative`); and
d score_mod / d (a captured array's value), for the gradient of a learned table the score_mod reads
(`captured_derivatives`).

The chain rule over a traced score_mod's graph (`tessera.variants.trace`): comparisons and conditions are
piecewise constant (their derivative is 0 almost everywhere, and so are np.floor, np.ceil, np.rint/np.round,
np.trunc and a float `//`: a score rounded to a grid passes no gradient to the score; `a % b` and np.fmod
pass a' less the quotient times b'), min/max/abs/np.where take the
derivative of the
branch they pick, and i32 values (indices, integer tables) do not depend on the score. A score_mod whose
derivative cannot be traced is refused by name (`ModTraceError`).

A captured float array's gradient (FlexAttention's gradient of a captured buffer that requires grad) is, per
element, the scatter-add of dS_mod * d score_mod / d g over every score whose score_mod read it, for each gather g
of it the function wrote (`rel[h, q_idx - kv_idx]` read twice: two gathers, two additions). The same chain rule
takes g as the variable (the score and the other gathers held constant). Refused by name: an array the mask_mod
reads, an integer or boolean array, one used as an index (its gather reaches an i32 value: an index, a
conversion to an integer), and one whose values are constants of the kernel (read at constant indices, or a
search's boundaries): no gradient reaches those (`captured_derivatives`).
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from tessera.variants.nodes import BOOL, F32, CapturedArray, Node
from tessera.variants.trace import Trace
from tessera.variants.tracing import ModTraceError

_LN2 = float(np.log(2.0))


def _c(value: float) -> Node:
    return Node("const", (), F32, float(value))


def _is_const(node: Node, value: float) -> bool:
    return node.op == "const" and node.dtype == F32 and float(node.value) == value


def _mul(a: Node, b: Node) -> Node:
    if _is_const(a, 0.0) or _is_const(b, 0.0):
        return _c(0.0)
    if _is_const(a, 1.0):
        return b
    if _is_const(b, 1.0):
        return a
    return Node("mul", (a, b), F32)


def _add(a: Node, b: Node) -> Node:
    if _is_const(a, 0.0):
        return b
    if _is_const(b, 0.0):
        return a
    return Node("add", (a, b), F32)


def _neg(a: Node) -> Node:
    return _c(0.0) if _is_const(a, 0.0) else Node("neg", (a,), F32)


def _select(c: Node, a: Node, b: Node) -> Node:
    if a is b or (a.op == b.op == "const" and a.dtype == b.dtype and a.value == b.value):
        return a  # both arms the same (np.where(c, score + 1, score - d): the derivative is 1 either way)
    return Node("select", (c, a, b), F32)


def score_derivative(trace: Trace) -> Trace:
    """d score_mod / d score as a traced graph over the same arguments (a Trace of the same function and
    arrays): the chain rule over the traced ops; comparisons and conditions are piecewise constant (their
    derivative is 0 almost everywhere), min/max/abs/np.where take the derivative of the branch they pick, and
    i32 values (indices, integer tables) do not depend on the score. ModTraceError names a score_mod whose
    derivative cannot be traced."""
    return Trace(trace.function, _differentiate(trace, lambda n: n.op == "score", "the score"), list(trace.arrays))


@dataclass(frozen=True)
class CapturedDerivative:
    """One gather of a captured float array the score_mod wrote, `array[indices]`, and d score_mod / d (the
    value it read) as a graph over the modifier's arguments (`derivative`; a constant 0 where no gradient flows):
    the backward adds dS_mod times it into the array's gradient at `indices`."""

    array: CapturedArray
    name: str
    """The array as the user calls it."""
    indices: tuple[Node, ...]
    derivative: Node


def captured_derivatives(trace: Trace, arrays: list[str], mask_mod: Trace | None = None) -> list[CapturedDerivative]:
    """For the captured arrays named `arrays` (kernel input names, `CapturedArray.name`), each gather of them
    in the score_mod `trace`, with d score_mod / d (its value) (`CapturedDerivative`). ModTraceError names an
    array that gets no gradient this way (module docstring): one the `mask_mod` reads, one the score_mod does
    not read at traced indices, an integer or boolean one, one read at constant indices or searched, one used
    as an index."""
    wanted = set(arrays)
    users = _users(trace.result)
    gathers = [n for n in _nodes(trace.result) if n.op == "gather" and n.value.name in wanted]
    names = {read.array.name: read.name for read in trace.reads}
    ids = {unique: key for key, unique in trace.sources.items()}  # the arrays themselves, by identity
    mask_reads = set() if mask_mod is None else {
        key for key, unique in mask_mod.sources.items()
        if unique in mask_mod.opaque or any(a.name == unique for a in mask_mod.arrays)}
    for name in arrays:
        shown = names.get(name, name)
        if mask_mod is not None and ids.get(name) in mask_reads:
            raise ModTraceError(f"mask_mod '{mask_mod.name}' reads {shown}, whose gradient is asked for: a mask "
                                "passes no gradient (read it only in the score_mod, or pass it detached)")
        if name in trace.opaque:
            raise ModTraceError(f"score_mod '{trace.name}': no gradient for {shown}: {trace.opaque[name]} makes its "
                                "values constants of the kernel (index it with traced values)")
        array = next((a for a in trace.arrays if a.name == name), None)
        if array is None:
            raise ModTraceError(f"score_mod '{trace.name}' does not read the captured array {name} at traced "
                                "indices: no gradient for it")
        if array.dtype != F32 or array.boolean:
            raise ModTraceError(f"score_mod '{trace.name}': no gradient for {shown}, an integer or boolean array")
    out = []
    for g in gathers:
        shown = names.get(g.value.name, g.value.name)
        if _reaches_integer(g, users):
            raise ModTraceError(f"score_mod '{trace.name}' uses {shown} as an index (its value reaches an integer): "
                                "no gradient for it")
        if not any(read.array is g.value and read.indices == g.args for read in trace.reads):
            raise ModTraceError(f"score_mod '{trace.name}': no gradient for {shown}, read by a search")
        out.append(CapturedDerivative(g.value, shown, g.args,
                                      _differentiate(trace, lambda n, g=g: n is g, f"the value of {shown}")))
    return out


def _nodes(result: Node) -> list[Node]:
    """Every node of the graph of `result`, each once."""
    seen, stack, out = set(), [result], []
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        stack.extend(n.args)
    return out


def _users(result: Node) -> dict[int, list[Node]]:
    """By a node's id, the nodes of `result`'s graph that take it as an operand."""
    users: dict[int, list[Node]] = {}
    for n in _nodes(result):
        for a in n.args:
            users.setdefault(id(a), []).append(n)
    return users


def _reaches_integer(node: Node, users: dict[int, list[Node]]) -> bool:
    """Whether a value computed from `node` is an i32 (an index, a conversion to an integer)."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n is not node and n.dtype not in (F32, BOOL):
            return True
        stack.extend(users.get(id(n), ()))
    return False


def _differentiate(trace: Trace, variable, what: str) -> Node:
    """d trace.result / d (the node `variable` holds for), by the chain rule (`_derivative`)."""
    memo: dict[int, Node] = {}

    def d(n: Node) -> Node:
        if id(n) in memo:
            return memo[id(n)]
        out = _c(1.0) if variable(n) else _derivative(n, d, trace, what)
        memo[id(n)] = out
        return out

    return d(trace.result)


UNBOUNDED = ("reciprocal", "log", "log2", "sqrt", "exp", "exp2")
"""Ops whose value may be infinite (or NaN) at a finite operand: 1/0, log 0, an overflowing exp."""


def may_be_unbounded(derivative: Trace) -> bool:
    """Whether a derivative graph (`score_derivative`) may be infinite or NaN at a finite score: it holds one
    of `UNBOUNDED` or a division (or a float `//`) by something other than a constant (a power's |x| ** y at x = 0, a
    logarithm's 1 / x). The backward then keeps P times it only where that is finite: a hidden or padded score
    (P = 0) gets a gradient of 0, not 0 * inf = NaN."""
    seen, stack = set(), [derivative.result]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in UNBOUNDED or (n.op in ("div", "floordiv") and n.dtype == F32 and n.args[1].op != "const"):
            return True
        stack.extend(n.args)
    return False


def _derivative(n: Node, d, trace: Trace, what: str) -> Node:
    """d n / d (the variable), `n` not the variable itself, from its operands' (`d`)."""
    op, args = n.op, n.args
    if n.dtype != F32 or op in ("score", "const", "gather", "to_f32"):
        return _c(0.0)
    if op == "add":
        return _add(d(args[0]), d(args[1]))
    if op == "sub":
        return _add(d(args[0]), _neg(d(args[1])))
    if op == "mul":
        return _add(_mul(d(args[0]), args[1]), _mul(args[0], d(args[1])))
    if op == "div":  # (a/b)' = a'/b - a b' / b^2
        a, b = args
        first = _c(0.0) if _is_const(d(a), 0.0) else Node("div", (d(a), b), F32)
        db = d(b)
        second = _c(0.0) if _is_const(db, 0.0) else Node("div", (_mul(n, db), b), F32)
        return _add(first, _neg(second))
    if op == "neg":
        return _neg(d(args[0]))
    if op == "abs":
        negative = Node("lt", (args[0], _c(0.0)), BOOL)
        return _select(negative, _neg(d(args[0])), d(args[0]))
    if op in ("min", "max"):
        picks_a = Node("le" if op == "min" else "ge", args, BOOL)
        return _select(picks_a, d(args[0]), d(args[1]))
    if op == "select":
        return _select(args[0], d(args[1]), d(args[2]))
    if op in ("floor", "ceil", "rint", "trunc", "floordiv"):  # step functions: 0 almost everywhere
        return _c(0.0)
    if op in ("mod", "fmod"):  # a - b n with n = a // b, or the quotient truncated: a' - n b'
        a, b = args
        db = d(b)
        if _is_const(db, 0.0):
            return d(a)
        quotient = Node("floordiv", args, F32) if op == "mod" else Node("div", (Node("sub", (a, n), F32), b), F32)
        return _add(d(a), _neg(_mul(quotient, db)))
    inner = d(args[0]) if args else _c(0.0)
    if _is_const(inner, 0.0):
        return inner
    local = {
        "exp": lambda: n,
        "exp2": lambda: _mul(n, _c(_LN2)),
        "log": lambda: Node("reciprocal", (args[0],), F32),
        "log2": lambda: Node("reciprocal", (_mul(args[0], _c(_LN2)),), F32),
        "tanh": lambda: Node("sub", (_c(1.0), _mul(n, n)), F32),
        "sqrt": lambda: Node("div", (_c(0.5), n), F32),
        "reciprocal": lambda: _neg(_mul(n, n)),
    }.get(op)
    if local is None:
        raise ModTraceError(f"score_mod '{trace.name}': cannot trace the derivative of '{op}' with respect to "
                            f"{what}")
    return _mul(local(), inner)


# endregion
