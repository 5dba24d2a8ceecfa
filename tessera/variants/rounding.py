"""Rounding and the divisions that round, of traced values: np.floor / np.ceil / np.rint / np.trunc / np.round
(`round_value`), Python's `//` and `%` (`floored_division`) and C's np.fmod (`fmod`), each as NumPy computes it.

The functions take the traced value (`tessera.variants.traced.Traced`, whose operators record the ops). Of f32
values they record the `floor` family and the f32 "floordiv" / "mod" / "fmod" nodes, which
`tessera.variants.float_division` emits exactly; of i32 values the integer ops. A boolean operand, a constant
divisor 0 and a `decimals` that is not a Python integer are refused by name."""

from __future__ import annotations

import numpy as np

from tessera.variants.nodes import BOOL, F32, I32, Node


def floored_division(t, op: str, nodes: list[Node]) -> Node:
    """a // b or a % b, Python's and NumPy's: floor division and a modulus with the divisor's sign. Of i32
    values the `tile.floordiv` / `tile.mod` ops; with a float operand an f32 "floordiv" / "mod" node,
    which `tessera.variants.float_division` emits as NumPy computes it (from an exact fmod: 1.0 // 0.1 is
    9.0). A constant divisor 0 is refused by name."""
    symbol = {"floordiv": "//", "mod": "%"}[op]
    if nodes[1].op == "const" and nodes[1].value == 0:
        raise t._tracing.refuse(f"'{symbol}' by the constant 0 (division by zero)")
    if any(n.dtype == F32 for n in nodes):
        return Node(op, tuple(t._convert(n, F32) for n in nodes), F32)
    return Node(op, tuple(nodes), I32)


def fmod(t, a: object, b: object):
    """np.fmod(a, b), C's remainder (the dividend's sign): of i32 values Python's a % b less b where it is
    not 0 and a and b differ in sign (a zero divisor gives 0, as NumPy's); with a float operand an f32
    "fmod" node, emitted exactly (`tessera.variants.float_division`)."""
    x, y = t._lift(a), t._lift(b)
    if BOOL in (x.dtype, y.dtype):
        raise t._tracing.refuse("np.fmod of a boolean value (use np.where to turn a condition into numbers)")
    if y.op == "const" and y.value == 0:
        raise t._tracing.refuse("np.fmod by the constant 0 (division by zero)")
    if F32 in (x.dtype, y.dtype):
        return t._wrap(Node("fmod", (t._convert(x, F32), t._convert(y, F32)), F32))
    r = Node("mod", (x, y), I32)
    zero = Node("const", (), I32, 0)
    negative = [t._wrap(Node("lt", (v, zero), BOOL)) for v in (x, y)]
    signs_differ = t._apply("ne", *negative)
    fix = Node("and", (Node("ne", (r, zero), BOOL), signs_differ.node), BOOL)
    return t._wrap(Node("select", (fix, Node("sub", (r, y), I32), r), I32))


def round_value(t, op: str, x: object, decimals: object = 0):
    """np.floor / np.ceil / np.rint / np.trunc (`ufuncs.ROUNDING`), and np.round(x, decimals) ("round") as NumPy
    computes it: rint(x * 10^d) / 10^d (for d < 0, rint(x / 10^-d) * 10^-d), d a Python integer. Of an i32 value
    floor, ceil, trunc and round are the value itself (NumPy keeps integers), rint its f32 conversion.
    Their derivative is 0 almost everywhere (step functions: `derivative.score_derivative`)."""
    tracing = t._tracing
    node = t._lift(x)
    if node.dtype == BOOL:
        raise tracing.refuse(f"np.{op} of a boolean value (use np.where to turn a condition into numbers)")
    if not isinstance(decimals, (int, np.integer)):
        raise tracing.refuse(f"np.round with decimals={decimals!r} (a Python integer)")
    if node.dtype == I32:
        if op == "rint":
            return t._wrap(t._convert(node, F32))
        if decimals >= 0:
            return t._wrap(node)
        node = t._convert(node, F32)  # np.round(int, -1): NumPy rounds to tens and keeps the integer
        scale = Node("const", (), F32, float(10 ** -decimals))
        rounded = Node("mul", (Node("rint", (Node("div", (node, scale), F32),), F32), scale), F32)
        return t._wrap(Node("to_i32", (rounded,), I32))
    if decimals == 0:
        return t._wrap(Node("rint" if op == "round" else op, (node,), F32))
    scale = Node("const", (), F32, float(10 ** abs(decimals)))
    if decimals > 0:
        return t._wrap(Node("div", (Node("rint", (Node("mul", (node, scale), F32),), F32), scale), F32))
    return t._wrap(Node("mul", (Node("rint", (Node("div", (node, scale), F32),), F32), scale), F32))

