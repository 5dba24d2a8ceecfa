"""StableHLO attention graphs written by hand, the ways a user varies attention that JAX's exports do not show
(tests/test_rewriter_unseen5.py): Q, K, V [batch, heads, seq, head_dim] arguments, the scale on the scores
(either operand of the multiply, or a divide), on Q or on K, a causal mask selected or added with any fill,
a factor applied after the mask, a bias argument, the softmax divided or multiplied by the reciprocal of its
sum, its sum plus a constant ("quiet" softmax: not attention), and P.V with P or V as the left operand.
`graph(**options)` returns the module text (pretty form, a function @main), in bf16, f16 or f32. Round 6
(tests/test_rewriter_unseen12.py): attention inside a transformer layer (`transformer_layer`), two attentions
chained (`two_attentions`), GQA by broadcast_in_dim and reshape (`broadcast_kv_heads`); `attend` writes one
attention into any graph."""

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

    def reduce(self, x: str, kind: str, init: str, shape, dtype: str = "bf16", dimension: int = 3) -> str:
        """x reduced over `dimension` with stablehlo.`kind` from `init`."""
        init_value = self.constant(init, dtype)
        result, inner = self.value(), self.value()
        a, b = f"%a{self.count}", f"%b{self.count}"
        scalar = f"tensor<{dtype}>"
        kept = tuple(d for i, d in enumerate(shape) if i != dimension)
        self.lines.append(
            f'{result} = "stablehlo.reduce"({x}, {init_value}) <{{dimensions = array<i64: {dimension}>}}> ({{\n'
            f'    ^bb0({a}: {scalar}, {b}: {scalar}):\n'
            f'      {inner} = "stablehlo.{kind}"({a}, {b}) : ({scalar}, {scalar}) -> {scalar}\n'
            f'      "stablehlo.return"({inner}) : ({scalar}) -> ()\n'
            f'    }}) : ({tensor(shape, dtype)}, {scalar}) -> {tensor(kept, dtype)}')
        return result


NEG_INF = {"bf16": "0xFF80", "f16": "0xFC00", "f32": "0xFF800000"}
"""-inf as the hex literal of each element type (as JAX writes the max's initial value)."""


def graph(batch=1, heads=2, seq_q=64, seq_k=64, head_dim=64, dtype="bf16", **options) -> str:
    """The module text of one attention over arguments Q, K, V [batch, heads, seq, head_dim] (and `bias`
    [batch, heads, seq_q, seq_k] with bias=True) of element type `dtype`; `options` are `attend`'s."""
    body = _Body()
    q_shape, kv_shape = (batch, heads, seq_q, head_dim), (batch, heads, seq_k, head_dim)
    bias = options.pop("bias", False)
    o, out_shape = attend(body, "%q", "%k", "%v", q_shape, kv_shape, dtype=dtype, bias="%bias" if bias else None,
                          **options)
    arguments = f"%q: {tensor(q_shape, dtype)}, %k: {tensor(kv_shape, dtype)}, %v: {tensor(kv_shape, dtype)}"
    if bias:
        arguments += f", %bias: {tensor((batch, heads, seq_q, seq_k), dtype)}"
    return function(body, arguments, [(o, out_shape)], dtype)


def function(body: _Body, arguments: str, results, dtype: str = "bf16") -> str:
    """The text of `func.func @main(arguments)` with `body` returning `results`, (value, shape) pairs."""
    types = ", ".join(tensor(shape, dtype) for _, shape in results)
    listed = types if len(results) == 1 else f"({types})"
    lines = "\n    ".join(body.lines)
    return (f"func.func @main({arguments}) -> {listed} {{\n    {lines}\n"
            f"    func.return {', '.join(v for v, _ in results)} : {types}\n}}\n")


def attend(body: _Body, q: str, k: str, v: str, q_shape, kv_shape, dtype="bf16", scale="multiply",
           factor="1.250000e-01", mask=None, fill=None, after_mask=None, bias=None, softmax="divide",
           sum_plus=None, p_first=True, sum_axis=3):
    """Attention over the values q, k, v [batch, heads, seq, head_dim] written into `body`; returns the output
    value and its shape. scale: where the factor goes ("multiply", "multiply_lhs", "divide" (by 1/factor:
    `factor` must then be a power of two), "q", "k"); mask: None, "select" (select(tril, s, fill)) or "add"
    (s + select(tril, 0, fill)), bottom-right causal, fill -inf by default; bias: a value added to the scores;
    after_mask: a factor multiplying the scores after the mask and bias; softmax: "divide" or "reciprocal";
    sum_plus: a constant added to the softmax's sum; sum_axis: the axis the sum is taken over (2, the queries,
    with its result broadcast along the keys: not a softmax; seq_q must be seq_k)."""
    batch, heads, seq_q, head_dim = q_shape
    seq_k = kv_shape[2]
    fill = NEG_INF[dtype] if fill is None else fill
    s_shape = (batch, heads, seq_q, seq_k)
    if scale == "q":
        q = body.binary("multiply", q, body.splat(factor, q_shape, dtype), q_shape, dtype)
    if scale == "k":
        k = body.binary("multiply", k, body.splat(factor, kv_shape, dtype), kv_shape, dtype)
    s = body.emit(f'"stablehlo.dot_general"({q}, {k}) <{{dot_dimension_numbers = #stablehlo.dot<'
                  'lhs_batching_dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = '
                  f'[3], rhs_contracting_dimensions = [3]>}}> : ({tensor(q_shape, dtype)}, '
                  f'{tensor(kv_shape, dtype)}) -> {tensor(s_shape, dtype)}')
    if scale == "multiply":
        s = body.binary("multiply", s, body.splat(factor, s_shape, dtype), s_shape, dtype)
    elif scale == "multiply_lhs":
        s = body.binary("multiply", body.splat(factor, s_shape, dtype), s, s_shape, dtype)
    elif scale == "divide":
        s = body.binary("divide", s, body.splat(repr(1 / float(factor)), s_shape, dtype), s_shape, dtype)
    if mask is not None:
        index = (seq_q, seq_k)
        rows = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 0 : i64}}> : () -> {tensor(index, "i32")}')
        cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 1 : i64}}> : () -> {tensor(index, "i32")}')
        rows = body.binary("add", rows, body.splat(seq_k - seq_q, index, "i32"), index, "i32")
        tril = body.emit(f'"stablehlo.compare"({rows}, {cols}) <{{comparison_direction = #stablehlo<comparison_'
                         f'direction GE>}}> : ({tensor(index, "i32")}, {tensor(index, "i32")}) -> '
                         f'{tensor(index, "i1")}')
        tril = body.broadcast(tril, index, s_shape, (2, 3), "i1")
        selected = (s, body.splat(fill, s_shape, dtype)) if mask == "select" else \
            (body.splat("0.0", s_shape, dtype), body.splat(fill, s_shape, dtype))
        chosen = body.emit(f'"stablehlo.select"({tril}, {selected[0]}, {selected[1]}) : ({tensor(s_shape, "i1")}, '
                           f'{tensor(s_shape, dtype)}, {tensor(s_shape, dtype)}) -> {tensor(s_shape, dtype)}')
        s = chosen if mask == "select" else body.binary("add", s, chosen, s_shape, dtype)
    if bias is not None:
        s = body.binary("add", s, bias, s_shape, dtype)
    if after_mask is not None:
        s = body.binary("multiply", s, body.splat(after_mask, s_shape, dtype), s_shape, dtype)
    top = body.broadcast(body.reduce(s, "maximum", NEG_INF[dtype], s_shape, dtype), s_shape[:3], s_shape, (0, 1, 2),
                         dtype)
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, top, s_shape, dtype)}) : '
                  f'({tensor(s_shape, dtype)}) -> {tensor(s_shape, dtype)}')
    total = body.reduce(e, "add", "0.0", s_shape, dtype, sum_axis)
    if sum_plus is not None:
        total = body.binary("add", total, body.splat(sum_plus, s_shape[:3], dtype), s_shape[:3], dtype)
    total = body.broadcast(total, s_shape[:3], s_shape, (0, 1, 2) if sum_axis == 3 else (0, 1, 3), dtype)
    if softmax == "divide":
        p = body.binary("divide", e, total, s_shape, dtype)
    else:
        p = body.binary("multiply", e, body.binary("divide", body.splat("1.0", s_shape, dtype), total, s_shape, dtype),
                        s_shape, dtype)
    if p_first:
        out_shape = q_shape
        o = body.emit(f'"stablehlo.dot_general"({p}, {v}) <{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_'
                      'dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [3], '
                      f'rhs_contracting_dimensions = [2]>}}> : ({tensor(s_shape, dtype)}, '
                      f'{tensor(kv_shape, dtype)}) -> {tensor(out_shape, dtype)}')
    else:
        out_shape = (batch, heads, head_dim, seq_q)
        o = body.emit(f'"stablehlo.dot_general"({v}, {p}) <{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_'
                      'dimensions = [0, 1], rhs_batching_dimensions = [0, 1], lhs_contracting_dimensions = [2], '
                      f'rhs_contracting_dimensions = [3]>}}> : ({tensor(kv_shape, dtype)}, '
                      f'{tensor(s_shape, dtype)}) -> {tensor(out_shape, dtype)}')
    return o, out_shape


def transpose(body: _Body, x: str, shape, permutation, dtype: str = "bf16"):
    """x transposed; returns the value and its shape."""
    result = tuple(shape[p] for p in permutation)
    listed = ", ".join(map(str, permutation))
    return body.emit(f'"stablehlo.transpose"({x}) <{{permutation = array<i64: {listed}>}}> : '
                     f'({tensor(shape, dtype)}) -> {tensor(result, dtype)}'), result


def reshape(body: _Body, x: str, shape, result, dtype: str = "bf16") -> str:
    return body.emit(f'"stablehlo.reshape"({x}) : ({tensor(shape, dtype)}) -> {tensor(result, dtype)}')


def transformer_layer(batch=1, heads=2, seq=64, head_dim=64, dtype="bf16") -> str:
    """Attention inside a larger graph: X [batch, seq, heads, head_dim] layer-normed over head_dim (mean,
    variance, rsqrt) and transposed into Q, causal attention over K and V arguments, its output transposed back,
    merged into [batch, seq, heads head_dim], projected by W and added to X (the residual)."""
    body = _Body()
    shape, rows = (batch, seq, heads, head_dim), (batch, seq, heads)
    width = heads * head_dim

    def mean(x):
        total = body.reduce(x, "add", "0.0", shape, dtype)
        return body.binary("divide", total, body.splat(float(head_dim), rows, dtype), rows, dtype)

    centred = body.binary("subtract", "%x", body.broadcast(mean("%x"), rows, shape, (0, 1, 2), dtype), shape, dtype)
    variance = body.binary("add", mean(body.binary("multiply", centred, centred, shape, dtype)),
                           body.splat("1.0e-05", rows, dtype), rows, dtype)
    rstd = body.emit(f'"stablehlo.rsqrt"({variance}) : ({tensor(rows, dtype)}) -> {tensor(rows, dtype)}')
    normed = body.binary("multiply", centred, body.broadcast(rstd, rows, shape, (0, 1, 2), dtype), shape, dtype)
    q, q_shape = transpose(body, normed, shape, (0, 2, 1, 3), dtype)
    o, o_shape = attend(body, q, "%k", "%v", q_shape, q_shape, dtype=dtype, mask="select")
    o, o_shape = transpose(body, o, o_shape, (0, 2, 1, 3), dtype)
    merged = (batch, seq, width)
    projected = body.emit(f'"stablehlo.dot_general"({reshape(body, o, o_shape, merged, dtype)}, %w) <{{'
                          'dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [2], '
                          f'rhs_contracting_dimensions = [0]>}}> : ({tensor(merged, dtype)}, '
                          f'{tensor((width, width), dtype)}) -> {tensor(merged, dtype)}')
    out = body.binary("add", projected, reshape(body, "%x", shape, merged, dtype), merged, dtype)
    arguments = (f"%x: {tensor(shape, dtype)}, %k: {tensor(q_shape, dtype)}, %v: {tensor(q_shape, dtype)}, "
                 f"%w: {tensor((width, width), dtype)}")
    return function(body, arguments, [(out, merged)], dtype)


def two_attentions(batch=1, heads=2, seq=64, head_dim=64, dtype="bf16") -> str:
    """Two attentions, the second's Q the first's output (causal by an added -1e9 mask); both outputs returned."""
    body = _Body()
    shape = (batch, heads, seq, head_dim)
    first, _ = attend(body, "%q", "%k", "%v", shape, shape, dtype=dtype)
    second, _ = attend(body, first, "%k2", "%v2", shape, shape, dtype=dtype, mask="add", fill="-1.0e+09")
    arguments = ", ".join(f"%{name}: {tensor(shape, dtype)}" for name in ("q", "k", "v", "k2", "v2"))
    return function(body, arguments, [(second, shape), (first, shape)], dtype)


def broadcast_kv_heads(order: str, batch=1, heads=4, kv_heads=2, seq=64, head_dim=64) -> str:
    """GQA written with broadcast_in_dim and reshape: K and V [batch, kv_heads, seq, head_dim] broadcast to
    [batch, kv_heads, groups, ...] ("repeat": query head h reads kv head h // groups) or [batch, groups,
    kv_heads, ...] ("tile": kv head h % kv_heads), reshaped to the query's heads."""
    body = _Body()
    groups = heads // kv_heads
    small, full = (batch, kv_heads, seq, head_dim), (batch, heads, seq, head_dim)
    middle, dims = ((batch, kv_heads, groups, seq, head_dim), (0, 1, 3, 4)) if order == "repeat" else \
        ((batch, groups, kv_heads, seq, head_dim), (0, 2, 3, 4))
    k, v = (reshape(body, body.broadcast(x, small, middle, dims), middle, full) for x in ("%k", "%v"))
    o, shape = attend(body, "%q", k, v, full, full, mask="select")
    return function(body, f"%q: {tensor(full)}, %k: {tensor(small)}, %v: {tensor(small)}", [(o, shape)])
