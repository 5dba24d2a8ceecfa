"""NumPy's float `//`, `%` and np.fmod, as exact graphs of Tile IR elementwise ops (issue 29).

A traced modifier keeps `a // b`, `a % b` and `np.fmod(a, b)` of f32 values as the nodes "floordiv", "mod"
and "fmod" (`tessera.variants.trace`; their derivatives are `tessera.variants.derivative`'s), and
`tessera.kernels.attention_mods` emits each through `expand`, which builds them from ops every level computes
exactly (compares, selects, abs, neg, add, sub, div, trunc, floor and `tile.fma`, each rounded once):

- fmod(a, b), C's remainder (the dividend's sign), is exact: |a| is reduced modulo C = |b| 2^(24 j) for j
  from `FMOD_STEPS` - 1 down to 0 (the f32 exponents span 277 bits). Before step j the remainder R is at most
  2^24 C in magnitude, so q = trunc(R / C) is an integer next to R / C (R / C rounds to an integer up to
  2^24), R - q C lies in (-C, C) and is a multiple of the smaller of R's and C's units in the last place:
  representable, so the one rounding of `fma(q, -C, R)` is exact. The last R, in (-|b|, |b|), takes |b| if
  it is negative (exact too), then a's sign bit (`sign_bit`: -0 stays -0). A step whose C overflows
  multiplies by the largest f32 instead (its q is 0). An infinite a, a zero or NaN b give NaN (q is
  infinite or NaN), an infinite b gives a.
- `//` and `%` are NumPy's npy_divmod from that fmod: div = (a - mod) / b; where mod != 0 and its sign
  differs from b's, mod += b and div -= 1; a zero mod takes b's sign; a // b = floor(div), plus 1 where
  div - floor(div) > 0.5, and where div is 0 the zero takes the sign of a / b. For b = 0, a // b = a / b
  and a % b = NaN. So `1.0 // 0.1` is 9.0 and `1.0 % 0.1` 0.099999994, as NumPy and Python give them, where
  floor(a / b) gives 10.

A divisor known at trace time takes only the steps whose C is finite (6 for |b| = 1.5, 12 at most), with
their C folded; a traced one takes all 12; steps whose C exceeds every value the dividend can take
(`magnitude_bound`: an index expression's) are left out. Each step is one `tile.div`, `tile.trunc` and
`tile.fma` on the dividend's tile, R and q live (and a, for a // b, which needs it after the steps).

A constant divisor b = +-2^k (`numerics.exact_reciprocal`: |k| <= 126) makes every quotient exact where it
neither overflows nor underflows (then it is below 1: trunc gives 0 either way), so the ladder folds: the step
C = |b|, after steps 5 apart (C = |b| 2^120, ...) only where a may exceed |b| times the largest f32 and the
quotient could overflow (`score % 1.0` takes one step, `score % 0.5` two). And a // b needs no fmod at all
(`power_of_two_floordiv`): with a / b exact, npy_divmod's div is trunc(a / b), less 1 where the fix-up
flips, which is floor(a / b), its zero signed as a / b; a // b is floor(a / b), NaN for an infinite a
(fma(a, 0, a) is a for a finite a, -0 included, and NaN for an infinite one). Where a / b underflows (|b| >=
2, a subnormal) it is floor(floor(a) / b) (ceil(a) for a negative b): floor(x / n) = floor(floor(x) / n)
for an integer n > 0, and an integer over 2^k is exact. The score is then read once, at the fma: nothing
stays live beside it (`score // 0.5` fits the 128 x 128 warp-specialized forward at head_dim 64).
"""

from __future__ import annotations

import numpy as np

from tessera.numerics import exact_reciprocal
from tessera.variants.nodes import BOOL, F32, Node

FMOD_STEP_BITS = 24
"""Bits of the quotient one fmod step removes: q = trunc(R / C) is exact below 2^24."""
FMOD_STEPS = 12
"""Steps covering every f32 dividend and divisor: 2^128 / 2^-149 = 2^277 <= 2^(24 * 12)."""
F32_MAX = float(np.finfo(np.float32).max)
_FOLDED_STRIDE = 5
"""Steps of a power-of-two divisor's folded ladder are this many apart: a remainder below one kept step's C is
below 2^(24 * 5) = 2^120 times the next one's, so that quotient is finite."""
_MAX_POWER = 126
"""The largest power of two one multiplication scales by (2^127 is the largest in f32; 126 keeps it simple)."""


def _const(value: float) -> Node:
    return Node("const", (), F32, float(np.float32(value)))


def _op(op: str, *args: Node) -> Node:
    return Node(op, args, F32)


def _cmp(op: str, a: Node, b: Node) -> Node:
    return Node(op, (a, b), BOOL)


def _select(cond: Node, a: Node, b: Node) -> Node:
    return Node("select", (cond, a, b), F32)


def _scaled(x: Node, exponent: int) -> Node:
    """x 2^exponent, exponent >= 0, in multiplications by powers of two up to 2^126 (exact until it overflows to
    infinity, which the true product then exceeds too)."""
    while exponent > 0:
        step = min(exponent, _MAX_POWER)
        x = _op("mul", x, _const(2.0**step))
        exponent -= step
    return x


_INDEX_BOUND = 2.0**31
"""|q_idx|, |kv_idx|, b, h and any i32 value are below 2^31."""
_ROUNDING = 1 + 2.0**-22
"""A bound of an f32 result from bounds of the exact one: one rounding moves it by less than 2^-24 relative."""


def magnitude_bound(node: Node, memo: dict | None = None) -> float:
    """An upper bound of |node| over every input, from the graph alone (inf where it knows none: the score,
    a division): index arguments and i32 values below 2^31, a captured table's largest magnitude, sums and
    products of bounds. It tells which fmod steps can never subtract anything."""
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    op, args = node.op, node.args
    if node.dtype != F32 or op in ("q_idx", "kv_idx", "b", "h"):
        bound = _INDEX_BOUND if node.dtype != BOOL else 1.0
    elif op == "const":
        bound = abs(float(node.value)) if not np.isnan(node.value) else np.inf
    elif op == "gather":
        with np.errstate(invalid="ignore"):
            table = np.abs(np.asarray(node.value.array, np.float64))
        bound = float(table.max()) if np.isfinite(table).all() else np.inf
    else:
        inner = [magnitude_bound(a, memo) for a in args if a.dtype == F32]
        if op in ("to_f32", "neg", "abs", "min", "max", "select", "floor", "ceil", "rint", "trunc"):
            bound = max(inner, default=0.0) * (_ROUNDING if op == "to_f32" else 1.0)
        elif op in ("add", "sub"):
            bound = (inner[0] + inner[1]) * _ROUNDING
        elif op == "mul":
            bound = inner[0] * inner[1] * _ROUNDING
        elif op in ("mod", "fmod"):  # |a % b| <= |b|, |fmod(a, b)| <= |a|
            bound = inner[1] if op == "mod" else inner[0]
        else:
            bound = np.inf
    memo[id(node)] = bound
    return bound


def _step_divisors(magnitude: Node, dividend_bound: float) -> list[tuple[Node, Node]]:
    """For each fmod step, top first: (C, -C where finite, else -(the largest f32)), C = |b| 2^(24 j): the
    fma multiplies the quotient by the second (a quotient of 0 then gives 0, not NaN). A step whose C exceeds
    every dividend (`dividend_bound`) never subtracts and is left out (past the smallest f32, 2^-149, for a
    traced |b|). A constant |b| folds both; its steps whose C overflows are left out too."""
    steps = []
    if magnitude.op == "const" and exact_reciprocal(float(magnitude.value)) is not None:
        # |b| = 2^k: R / C is exact unless it overflows (module docstring), so a step need only keep the next
        # one's quotient finite: every `_FOLDED_STRIDE`-th step, up to one whose quotient cannot overflow
        bound = min(dividend_bound, F32_MAX)
        for j in range(0, FMOD_STEPS, _FOLDED_STRIDE):
            c = float(magnitude.value) * 2.0 ** (FMOD_STEP_BITS * j)
            if c > F32_MAX:
                break
            steps.append((_const(c), _const(-c)))
            if bound <= c * F32_MAX:
                break
        return steps[::-1]
    if magnitude.op == "const":
        for j in range(FMOD_STEPS):
            c = float(magnitude.value) * 2.0 ** (FMOD_STEP_BITS * j)  # float64: exact, no overflow
            if j and not (c <= F32_MAX and c <= dividend_bound):
                break
            overflows = c > F32_MAX  # j = 0: |b| = inf (NaN stays NaN)
            steps.append((_const(np.inf if overflows else c), _const(-F32_MAX if overflows else -c)))
        return steps[::-1]
    for j in range(FMOD_STEPS):
        if j and 2.0 ** (FMOD_STEP_BITS * j - 149) > dividend_bound:
            break
        c = _scaled(magnitude, FMOD_STEP_BITS * j)
        steps.append((c, _op("neg", _op("min", c, _const(F32_MAX)))))
    return steps[::-1]


def sign_bit(x: Node) -> Node:
    """x < 0 or x = -0 (1 / x < 0: 1 / -0 is -inf; 1 / x is never 0 for a finite x), false for +0; unspecified
    for NaN and infinities, which fmod makes NaN."""
    return _cmp("lt", _op("div", _const(1.0), x), _const(0.0))


def fmod(a: Node, b: Node, negative: Node) -> Node:
    """C's fmod(a, b) of f32 nodes, exact (module docstring); `negative` is `sign_bit(a)`."""
    divisor = _const(abs(float(b.value))) if b.op == "const" else _op("abs", b)
    r = _select(negative, _op("neg", a), a)  # |a|, from the sign bit the result takes (a may die here)
    for c, minus_c in _step_divisors(divisor, magnitude_bound(a)):
        r = Node("fma", (_op("trunc", _op("div", r, c)), minus_c, r), F32)
    r = _op("add", r, _select(_cmp("lt", r, _const(0.0)), divisor, _const(0.0)))
    return _select(negative, _op("neg", r), r)


def _by_sign(b: Node, negative: object, positive: object) -> Node:
    """`negative` where b < 0, else `positive` (folded for a constant b)."""
    if b.op == "const":
        return _const(negative if float(b.value) < 0 else positive)
    return _select(_cmp("lt", b, _const(0.0)), _const(negative), _const(positive))


def power_of_two_floordiv(a: Node, b: float) -> Node:
    """NumPy's a // b of an f32 node by a constant b = +-2^k (`numerics.exact_reciprocal`), without an fmod
    (module docstring): floor(a / b) for |b| <= 1, floor(floor(a) / b) (ceil(a) for b < 0) for |b| >= 2,
    each from fma(a, 0, a), NaN where a is infinite. Every op reads only the one before it."""
    finite = Node("fma", (a, _const(0.0), a), F32)
    if abs(b) >= 2.0:
        finite = _op("floor" if b > 0 else "ceil", finite)
    return _op("floor", _op("div", finite, _const(b)))


def divmod_nodes(a: Node, b: Node, mod: Node, negative: Node) -> tuple[Node, Node]:
    """(a // b, a % b) of f32 nodes as NumPy computes them from `mod` = fmod(a, b) and `negative` =
    `sign_bit(a)` (npy_divmod; module docstring). The fix-ups add a select's 0 or b (0 or 1) so that each
    is one tile beside the value it changes."""
    zero = _const(0.0)
    if b.op == "const":  # mod and b differ in sign (0 and NaN do not: no fix-up)
        flip = _cmp("gt" if float(b.value) < 0 else "lt", mod, zero)
    else:
        flip = _cmp("lt", _op("mul", mod, _by_sign(b, -1.0, 1.0)), zero)
    remainder = _op("add", mod, _select(flip, b, zero))  # nonzero where flipped: |mod| < |b|, exact
    remainder = _select(_cmp("ne", remainder, zero), remainder, _by_sign(b, -0.0, 0.0))
    div = _op("sub", _op("div", _op("sub", a, mod), b), _select(flip, _const(1.0), zero))
    nonzero = _cmp("ne", div, zero)
    div = _select(nonzero, div, zero)  # the same value where it is used: div dies here, after its compare
    floor = _op("floor", div)
    snapped = _op("add", floor, _select(_cmp("gt", _op("sub", div, floor), _const(0.5)), _const(1.0), zero))
    # div == 0: the zero takes the sign of a / b (a's sign bit, flipped by a negative b)
    signed_zero = _select(negative, _by_sign(b, 0.0, -0.0), _by_sign(b, -0.0, 0.0))
    floordiv = _select(nonzero, snapped, signed_zero)
    if b.op != "const":  # b = 0: a / b (a constant 0 divisor is refused when traced)
        floordiv = _select(_cmp("eq", b, zero), _op("div", a, b), floordiv)
    return floordiv, remainder


def expand(node: Node, cache: dict) -> Node:
    """The graph of exact ops computing an f32 "floordiv", "mod" or "fmod" node; `cache` (one per emitted
    kernel) shares one fmod, and one npy_divmod, between the nodes of the same operands (divmod(a, b))."""
    a, b = node.args
    entry = cache.setdefault((id(a), id(b)), {})
    if "floordiv" not in entry and b.op == "const" and exact_reciprocal(float(b.value)) is not None:
        entry["floordiv"] = power_of_two_floordiv(a, float(b.value))
    if node.op in entry:
        return entry[node.op]
    if "fmod" not in entry:
        entry["negative"] = sign_bit(a)
        entry["fmod"] = fmod(a, b, entry["negative"])
    if node.op != "fmod":
        floordiv, entry["mod"] = divmod_nodes(a, b, entry["fmod"], entry["negative"])
        entry.setdefault("floordiv", floordiv)
    return entry[node.op]
