"""The integer ranges of a traced modifier's index arithmetic, checked against i32 before a launch.

A modifier's integer values are i32 in the kernel (its `tile.iota` indices, program ids and gathers) and
wrap past 2^31 - 1, as PTX's `mul.lo.s32` and `add.s32` do; the reference and the host-side block mask run the
same function on NumPy's int64 grids, where they do not. So `(q_idx * 50_000_000 + kv_idx) % 7 == 0` at 70
queries, or `q_idx * kv_idx` past 46,341 tokens, would mask other keys in the kernel than the reference does:
a silently wrong answer. `check_index_ranges` bounds every i32 node of a `Trace` by interval arithmetic from
the launch's sizes (b in [0, batch), h in [0, heads), q_idx in [0, seq_q), kv_idx in [0, seq_k), a gather by its
array's values, constants by themselves) and refuses, naming the function and the expression, a node whose
bound leaves i32. Bounds are exact for each operation of independent operands and may be loose for operands
that share a variable (`(q_idx - kv_idx) * (q_idx - kv_idx)` is bounded as a product of two independent
differences). f32 values made from bounded ones (`+ - * /`, the roundings, np.sqrt, a conversion) are bounded
too, so `(q_idx * 1e9).astype(int)` is refused (the kernel's `cvt.rzi.s32.f32` saturates at the i32 range, NumPy's
conversion to int64 does not); a value computed from the score, or through exp, log, tanh, has no bound and is
not checked, nor is what is computed from it.
"""

from __future__ import annotations

import math

from tessera.variants.trace import F32, I32, Node, Trace, _Tracing

I32_MIN, I32_MAX = -2**31, 2**31 - 1

Interval = tuple[int, int]

_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}
_NAMES = {"min": "np.minimum", "max": "np.maximum", "select": "np.where", "abs": "abs", "to_i32": "int",
          "to_f32": "float", "floor": "np.floor", "ceil": "np.ceil", "rint": "np.rint", "trunc": "np.trunc",
          "sqrt": "np.sqrt"}


def check_index_ranges(trace: Trace, kind: str, batch: int, heads: int, seq_q: int, seq_k: int) -> None:
    """Raise ModTraceError when an i32 value of `trace` may leave i32 at these sizes (module docstring)."""
    arguments = {"b": (0, batch - 1), "h": (0, heads - 1), "q_idx": (0, seq_q - 1), "kv_idx": (0, seq_k - 1)}
    bounds: dict[int, Interval | None] = {}
    stack = [(trace.result, False)]
    while stack:  # post-order without recursion (a long chain of operations is no deep Python stack)
        node, ready = stack.pop()
        if id(node) in bounds:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args if id(a) not in bounds)
            continue
        bound = _bound(node, arguments, [bounds[id(a)] for a in node.args]) if node.dtype in (I32, F32) else None
        bounds[id(node)] = bound
        if node.dtype == I32 and bound is not None and (bound[0] < I32_MIN or bound[1] > I32_MAX):
            extreme = bound[1] if bound[1] > I32_MAX else bound[0]
            how = ("the kernel's conversion saturates at the i32 range where NumPy's to int64 does not"
                   if node.op == "to_i32" else "the kernel's index arithmetic is 32-bit and would wrap where "
                   "NumPy's int64 does not; compute it in floats, e.g. q_idx.astype(float), or keep it below 2^31")
            raise _Tracing(trace.function, kind).refuse(
                f"the integer value {describe(node)}: it reaches {extreme} at batch {batch}, heads {heads}, seq_q "
                f"{seq_q}, seq_k {seq_k}, outside i32 ({how})")


def _bound(node: Node, arguments: dict[str, Interval], args: list[Interval | None]) -> Interval | None:
    """The interval of an i32 or f32 `node` from its operands' (None: unbounded, not checked). f32 bounds are
    the exact values' (the roundings move them by an ulp, far inside what is checked), kept only while finite."""
    bound = _exact_bound(node, arguments, args)
    if bound is None or node.dtype == I32:
        return bound
    return bound if all(math.isfinite(v) for v in bound) else None  # NaN fails isfinite too


def _exact_bound(node: Node, arguments: dict[str, Interval], args: list[Interval | None]) -> Interval | None:
    op = node.op
    if op in arguments:
        return arguments[op]
    if op == "const":
        return (int(node.value),) * 2 if node.dtype == I32 else (float(node.value),) * 2
    if op in ("to_f32", "floor", "ceil", "rint", "trunc", "sqrt", "to_i32"):  # monotonic
        if args[0] is None or (op == "sqrt" and args[0][0] < 0):
            return None
        f = {"to_f32": float, "floor": math.floor, "ceil": math.ceil, "rint": round, "trunc": math.trunc,
             "sqrt": math.sqrt, "to_i32": math.trunc}[op]
        return f(args[0][0]), f(args[0][1])
    if op == "div":
        if any(a is None for a in args) or args[1][0] <= 0 <= args[1][1]:
            return None
        corners = [a / b for a in args[0] for b in args[1]]
        return min(corners), max(corners)
    if node.dtype != I32 and op in ("floordiv", "mod", "fmod"):  # NumPy's float divisions: not bounded here
        return None
    if op == "gather":
        array = node.value.array
        if node.dtype == I32:
            return int(array.min()), int(array.max())
        return float(array.min()), float(array.max())  # NaN or infinite: no bound (`_bound`)
    if op == "select":  # (condition, a, b)
        a, b = args[1], args[2]
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if any(a is None for a in args):
        return None
    if op == "neg":
        (lo, hi), = args
        return -hi, -lo
    if op == "abs":
        (lo, hi), = args
        return (lo, hi) if lo >= 0 else (-hi, -lo) if hi <= 0 else (0, max(-lo, hi))
    if op in ("add", "sub", "mul", "min", "max"):
        (alo, ahi), (blo, bhi) = args
        if op == "add":
            return alo + blo, ahi + bhi
        if op == "sub":
            return alo - bhi, ahi - blo
        if op == "min":
            return min(alo, blo), min(ahi, bhi)
        if op == "max":
            return max(alo, blo), max(ahi, bhi)
        corners = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return min(corners), max(corners)
    if op == "floordiv":
        (alo, ahi), (blo, bhi) = args
        if blo > 0 or bhi < 0:  # a sign-definite divisor: a // b is monotonic in each operand
            corners = [a // b for a in (alo, ahi) for b in (blo, bhi)]
            return min(corners), max(corners)
        return min(alo, -ahi), max(ahi, -alo)  # |a // b| <= |a| for an integer b != 0
    if op == "mod":
        (alo, ahi), (blo, bhi) = args
        if blo > 0:
            return (alo, ahi) if 0 <= alo and ahi < blo else (0, bhi - 1)
        if bhi < 0:
            return blo + 1, 0
        largest = max(-blo, bhi)
        return -(largest - 1), largest - 1
    return None  # anything else (the score, exp, log, tanh, ...): no bound


def describe(node: Node, limit: int = 100) -> str:
    """`node` as the Python expression it was traced from, roughly (`q_idx * 50000000 + kv_idx`), cut at
    `limit` characters."""
    text = _text(node, 6)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _text(node: Node, depth: int) -> str:
    if node.op == "const":
        return repr(node.value)
    if not node.args and node.op != "gather":
        return node.op
    if depth == 0:
        return "..."
    parts = [_text(a, depth - 1) for a in node.args]
    if node.op in _SYMBOLS:
        return f"({parts[0]} {_SYMBOLS[node.op]} {parts[1]})"
    if node.op == "neg":
        return f"-{parts[0]}"
    if node.op == "gather":
        return f"{node.value.name}[{', '.join(parts)}]"
    return f"{_NAMES.get(node.op, node.op)}({', '.join(parts)})"
