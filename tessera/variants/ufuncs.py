"""The NumPy ufuncs and functions the tracer reads (`tessera.variants.traced.Traced.__array_ufunc__`), as the
ops of the traced graph (`tessera.variants.nodes`), and the groups of those ops the operators treat alike.

Each table maps a NumPy function to the op it records; the functions traced as a few ops (`EXPANDED`) take the
traced value (`Traced`) and build them with its operators."""

from __future__ import annotations

import numpy as np

UNARY = {np.negative: "neg", np.absolute: "abs", np.exp: "exp", np.exp2: "exp2", np.log2: "log2", np.log: "log",
         np.tanh: "tanh", np.sqrt: "sqrt", np.reciprocal: "reciprocal", np.logical_not: "not", np.invert: "not",
         np.positive: "pos"}
BINARY = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div", np.minimum: "min",
          np.maximum: "max", np.fmin: "min", np.fmax: "max", np.logical_and: "and", np.logical_or: "or",
          np.bitwise_and: "and", np.bitwise_or: "or", np.less: "lt", np.less_equal: "le", np.greater: "gt",
          np.greater_equal: "ge", np.equal: "eq", np.not_equal: "ne", np.floor_divide: "floordiv",
          np.remainder: "mod", np.logical_xor: "xor", np.bitwise_xor: "xor"}
LOGICAL = (np.logical_and, np.logical_or, np.logical_xor, np.logical_not)
"""NumPy's logical ufuncs: of numbers, their truth (`Traced._truth`)."""
ROUNDING = {np.floor: "floor", np.ceil: "ceil", np.rint: "rint", np.trunc: "trunc"}
"""NumPy's rounding ufuncs (`rounding.round_value`): of f32 values the `tile.floor/ceil/rint/trunc` ops; of i32 values
the value itself (NumPy 2 keeps an integer array's dtype), except np.rint, which gives floats."""
FLOORED = ("floordiv", "mod")
"""Python's and NumPy's floor division and modulus (`tessera.variants.rounding.floored_division`)."""
FLOAT_ONLY = ("exp", "exp2", "log2", "log", "tanh", "sqrt", "reciprocal", "div")
"""Ops whose result is f32 whatever their operands (an i32 operand is converted)."""


def _sign(t, x):
    """np.sign: 1 / -1 / x * 0 (0 keeps its sign, NaN stays NaN; a derivative of 0); of an unsigned integer read
    from a captured array, min(x, 1), which keeps its type as NumPy's does (`narrow_integers`)."""
    narrow = getattr(x, "_narrow", None)
    if narrow is not None and narrow.dtype.kind == "u":
        return t._apply("min", x, 1)
    return t._where(t._apply("gt", x, 0), 1, t._where(t._apply("lt", x, 0), -1, t._apply("mul", x, 0)))


EXPANDED = {
    np.square: lambda t, x: t._apply("mul", x, x),
    np.sign: _sign,
    np.log1p: lambda t, x: t._apply("log", t._apply("add", 1.0, x)),
    np.expm1: lambda t, x: t._apply("sub", t._apply("exp", x), 1.0),
}
"""NumPy functions traced as a few of the ops (np.log1p and np.expm1 without their accuracy near 0)."""


def ufunc_names() -> list[str]:
    """The NumPy ufuncs traced, as messages list them."""
    return [f"np.{u.__name__}" for u in (*UNARY, *BINARY, *EXPANDED, *ROUNDING, np.power, np.float_power,
                                        np.fmod, np.left_shift, np.right_shift)]

