"""d score_mod / d score, traced: the backward's dS = dS_mod * d score_mod / d score (`score_derivative`).

The chain rule over a traced score_mod's graph (`tessera.variants.trace`): comparisons and conditions are
piecewise constant (their derivative is 0 almost everywhere, and so are np.floor, np.ceil, np.rint/np.round,
np.trunc and a float `//`: a score rounded to a grid passes no gradient to the score; `a % b` and np.fmod
pass a' less the quotient times b'), min/max/abs/np.where take the
derivative of the
branch they pick, and i32 values (indices, integer tables) do not depend on the score. Captured arrays need no
gradient. A score_mod whose derivative cannot be traced is refused by name (`ModTraceError`).
"""

from __future__ import annotations

import numpy as np

from tessera.variants.nodes import BOOL, F32, Node
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
    i32 values (indices, integer tables) do not depend on the score. Captured arrays need no gradient.
    ModTraceError names a score_mod whose derivative cannot be traced."""
    memo: dict[int, Node] = {}

    def d(n: Node) -> Node:
        if id(n) in memo:
            return memo[id(n)]
        out = _derivative(n, d, trace)
        memo[id(n)] = out
        return out

    return Trace(trace.function, d(trace.result), list(trace.arrays))


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


def _derivative(n: Node, d, trace: Trace) -> Node:
    op, args = n.op, n.args
    if op == "score":
        return _c(1.0)
    if n.dtype != F32 or op in ("const", "gather", "to_f32"):
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
                            "the score")
    return _mul(local(), inner)


# endregion
