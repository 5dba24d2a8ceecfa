"""StableHLO attention graphs written by hand, the ways a user varies attention that JAX's exports do not show
(tests/test_rewriter_unseen5.py): Q, K, V [batch, heads, seq, head_dim] arguments, the scale on the scores
(either operand of the multiply, or a divide), on Q or on K, a causal mask selected or added with any fill,
a factor applied after the mask, a bias argument, the softmax divided or multiplied by the reciprocal of its
sum, its sum plus a constant ("quiet" softmax: not attention), and P.V with P or V as the left operand.
`graph(**options)` returns the module text (pretty form, a function @main)."""

from __future__ import annotations


def tensor(shape, dtype: str = "bf16") -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>" if shape else f"tensor<{dtype}>"


class _Body:
    """The function body being written: one SSA value per line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def value(self) -> str:
        self.count += 1
        return f"%{self.count}"

    def emit(self, text: str) -> str:
        result = self.value()
        self.lines.append(f"{result} = {text}")
        return result

    def constant(self, literal, dtype: str = "bf16") -> str:
        return self.emit(f'"stablehlo.constant"() <{{value = dense<{literal}> : tensor<{dtype}>}}> : () -> '
                         f'tensor<{dtype}>')

    def broadcast(self, x: str, source, result, dims=(), dtype: str = "bf16") -> str:
        listed = f": {', '.join(map(str, dims))}" if dims else ""
        return self.emit(f'"stablehlo.broadcast_in_dim"({x}) <{{broadcast_dimensions = array<i64{listed}>}}> : '
                         f'({tensor(source, dtype)}) -> {tensor(result, dtype)}')

    def splat(self, literal, shape, dtype: str = "bf16") -> str:
        return self.broadcast(self.constant(literal, dtype), (), shape, dtype=dtype)

    def binary(self, name: str, a: str, b: str, shape, dtype: str = "bf16") -> str:
        t = tensor(shape, dtype)
        return self.emit(f'"stablehlo.{name}"({a}, {b}) : ({t}, {t}) -> {t}')

    def reduce(self, x: str, kind: str, init: str, shape) -> str:
        init_value = self.constant(init)
        result, inner = self.value(), self.value()
        a, b = f"%a{self.count}", f"%b{self.count}"
        self.lines.append(
            f'{result} = "stablehlo.reduce"({x}, {init_value}) <{{dimensions = array<i64: 3>}}> ({{\n'
            f'    ^bb0({a}: tensor<bf16>, {b}: tensor<bf16>):\n'
            f'      {inner} = "stablehlo.{kind}"({a}, {b}) : (tensor<bf16>, tensor<bf16>) -> tensor<bf16>\n'
            f'      "stablehlo.return"({inner}) : (tensor<bf16>) -> ()\n'
            f'    }}) : ({tensor(shape)}, tensor<bf16>) -> {tensor(shape[:3])}')
        return result


def graph(batch=1, heads=2, seq_q=64, seq_k=64, head_dim=64, scale="multiply", factor="1.250000e-01",
          mask=None, fill="0xFF80", after_mask=None, bias=False, softmax="divide", sum_plus=None,
          p_first=True) -> str:
    """The module text. scale: where the factor goes ("multiply", "multiply_lhs", "divide" (by 1/factor:
    `factor` must then be a power of two), "q", "k"); mask: None, "select" (select(tril, s, fill)) or "add"
    (s + select(tril, 0, fill)), bottom-right causal; after_mask: a factor multiplying the scores after the
    mask and bias; softmax: "divide" or "reciprocal"; sum_plus: a constant added to the softmax's sum."""
    body = _Body()
    q_shape, kv_shape = (batch, heads, seq_q, head_dim), (batch, heads, seq_k, head_dim)
    s_shape = (batch, heads, seq_q, seq_k)
    q, k = "%q", "%k"
    if scale == "q":
        q = body.binary("multiply", q, body.splat(factor, q_shape), q_shape)
    if scale == "k":
        k = body.binary("multiply", k, body.splat(factor, kv_shape), kv_shape)
    s = body.emit(f'"stablehlo.dot_general"({q}, {k}) <{{dot_dimension_numbers = #stablehlo.dot<'
                  'lhs_batching_dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = '
                  f'[3], rhs_contracting_dimensions = [3]>}}> : ({tensor(q_shape)}, {tensor(kv_shape)}) -> '
                  f'{tensor(s_shape)}')
    if scale == "multiply":
        s = body.binary("multiply", s, body.splat(factor, s_shape), s_shape)
    elif scale == "multiply_lhs":
        s = body.binary("multiply", body.splat(factor, s_shape), s, s_shape)
    elif scale == "divide":
        s = body.binary("divide", s, body.splat(repr(1 / float(factor)), s_shape), s_shape)
    if mask is not None:
        index = (seq_q, seq_k)
        rows = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 0 : i64}}> : () -> {tensor(index, "i32")}')
        cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 1 : i64}}> : () -> {tensor(index, "i32")}')
        rows = body.binary("add", rows, body.splat(seq_k - seq_q, index, "i32"), index, "i32")
        tril = body.emit(f'"stablehlo.compare"({rows}, {cols}) <{{comparison_direction = #stablehlo<comparison_'
                         f'direction GE>}}> : ({tensor(index, "i32")}, {tensor(index, "i32")}) -> '
                         f'{tensor(index, "i1")}')
        tril = body.broadcast(tril, index, s_shape, (2, 3), "i1")
        selected = (s, body.splat(fill, s_shape)) if mask == "select" else \
            (body.splat("0.0", s_shape), body.splat(fill, s_shape))
        chosen = body.emit(f'"stablehlo.select"({tril}, {selected[0]}, {selected[1]}) : ({tensor(s_shape, "i1")}, '
                           f'{tensor(s_shape)}, {tensor(s_shape)}) -> {tensor(s_shape)}')
        s = chosen if mask == "select" else body.binary("add", s, chosen, s_shape)
    if bias:
        s = body.binary("add", s, "%bias", s_shape)
    if after_mask is not None:
        s = body.binary("multiply", s, body.splat(after_mask, s_shape), s_shape)
    top = body.broadcast(body.reduce(s, "maximum", "0xFF80", s_shape), s_shape[:3], s_shape, (0, 1, 2))
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, top, s_shape)}) : ({tensor(s_shape)}) -> '
                  f'{tensor(s_shape)}')
    total = body.reduce(e, "add", "0.0", s_shape)
    if sum_plus is not None:
        total = body.binary("add", total, body.splat(sum_plus, s_shape[:3]), s_shape[:3])
    total = body.broadcast(total, s_shape[:3], s_shape, (0, 1, 2))
    if softmax == "divide":
        p = body.binary("divide", e, total, s_shape)
    else:
        p = body.binary("multiply", e, body.binary("divide", body.splat("1.0", s_shape), total, s_shape), s_shape)
    if p_first:
        out_shape = q_shape
        o = body.emit(f'"stablehlo.dot_general"({p}, %v) <{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_'
                      'dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], '
                      f'rhs_contracting_dimensions = [2]>}}> : ({tensor(s_shape)}, {tensor(kv_shape)}) -> '
                      f'{tensor(out_shape)}')
    else:
        out_shape = (batch, heads, head_dim, seq_q)
        o = body.emit(f'"stablehlo.dot_general"(%v, {p}) <{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_'
                      'dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [2], '
                      f'rhs_contracting_dimensions = [3]>}}> : ({tensor(kv_shape)}, {tensor(s_shape)}) -> '
                      f'{tensor(out_shape)}')
    arguments = f"%q: {tensor(q_shape)}, %k: {tensor(kv_shape)}, %v: {tensor(kv_shape)}"
    if bias:
        arguments += f", %bias: {tensor(s_shape)}"
    lines = "\n    ".join(body.lines)
    return (f"func.func @main({arguments}) -> {tensor(out_shape)} {{\n    {lines}\n"
            f"    func.return {o} : {tensor(out_shape)}\n}}\n")
