"""Powers of traced values (`x ** p`, `c ** y`, `x ** y`, np.power, np.float_power, torch.pow) in the ops the
kernel has: multiplications by squaring, np.sqrt, or exp2 / log2 with NumPy's sign rules.

The functions take the traced value (`tessera.variants.traced.Traced`, whose operators record the ops); what
has no such form (an integer power of a traced integer exponent, a negative or traced base's power of a traced
exponent where NumPy refuses it too) is refused by name."""

from __future__ import annotations

import numpy as np

from tessera.variants.nodes import BOOL, F32, I32, Node


def power(t, base: object, exponent: object):
    """base ** exponent (np.power, np.float_power) in the ops the kernel has:

    - a constant integer exponent n: x * x * ... by squaring (NumPy's x ** 2 is x * x), then 1 / that for
      n < 0 (an i32 base with n < 0 is refused, as NumPy refuses it); x ** 0.5 is np.sqrt(x); another
      constant p is exp2(p log2 x) (NaN for x < 0, as NumPy gives for a non-integer p);
    - a positive constant base c with a traced exponent y: exp2(y log2 c), log2 c computed on the host
      (ALiBi's `2 ** (-8 * (h + 1) / H)` is exp2 of the exponent itself); an integer base needs a float
      exponent (an i32 power of a traced exponent is refused);
    - a traced base x and a traced exponent y (not both integers: an integer power is refused, as for a
      constant base): `traced_power`."""
    tracing = t._tracing
    x, y = t._lift(base), t._lift(exponent)
    if BOOL in (x.dtype, y.dtype):
        raise tracing.refuse("'**' of a boolean value (use np.where to turn a condition into numbers)")
    if y.op == "const":
        p = y.value
        if float(p).is_integer() and abs(p) <= 2**16:
            n = int(p)
            if x.dtype == I32 and y.dtype == I32 and n < 0:
                raise tracing.refuse(f"'**' of an integer by the negative power {n} (NumPy refuses it too; write a "
                               "float base such as 2.0)")
            dtype = F32 if F32 in (x.dtype, y.dtype) else x.dtype
            x = t._convert(x, dtype)
            result, square, m = None, x, abs(n)
            while m:
                if m & 1:
                    result = square if result is None else Node("mul", (result, square), dtype)
                m >>= 1
                if m:
                    square = Node("mul", (square, square), dtype)
            if result is None:  # x ** 0 is 1 (NaN ** 0 too)
                return t._wrap(Node("const", (), dtype, 1.0 if dtype == F32 else 1))
            if n < 0:
                result = Node("div", (Node("const", (), F32, 1.0), result), F32)
            return t._wrap(result)
        x = t._convert(x, F32)
        if p == 0.5:
            return t._wrap(Node("sqrt", (x,), F32))
        log2x = Node("log2", (x,), F32)
        return t._wrap(Node("exp2", (Node("mul", (Node("const", (), F32, float(p)), log2x), F32),), F32))
    if x.op == "const":
        c = x.value
        if x.dtype == I32 and y.dtype == I32:
            raise tracing.refuse(f"'**' of the integer {c} by a traced integer exponent (an integer power; write a "
                           f"float base such as {float(c)!r})")
        if not c > 0:
            raise tracing.refuse(f"'**' with the base {c} and a traced exponent (only a positive constant base: "
                           "c ** y is exp2(y log2 c))")
        y = t._convert(y, F32)
        if float(c) != 2.0:
            y = Node("mul", (y, Node("const", (), F32, float(np.log2(float(c))))), F32)
        return t._wrap(Node("exp2", (y,), F32))
    if x.dtype == I32 and y.dtype == I32:
        raise tracing.refuse("'**' of a traced integer base by a traced integer exponent (an integer power; write a "
                       "float base such as x.astype(float))")
    return t._wrap(traced_power(t._convert(x, F32), t._convert(y, F32)))


def traced_power(x: Node, y: Node) -> Node:
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

