"""StableHLO attention graphs written by hand, round 25 of the unseen cases (tests/test_rewriter_unseen25.py): what
JAX and torch-xla exports hold that earlier rounds did not write: reduce bodies with their operands swapped, causal
masks compared the other way round (the same mask, and the wrong direction), the scale as a splat constant of the
scores' shape or a broadcast of a [1] tensor, batching dimensions paired heads before batch, a float32 softmax
whose max is taken over the bf16 scores, a two-sided window added as -inf, a padding mask from a per-batch length
argument, a max over the heads, a product by V before the softmax, dropout of rate 0 given as a keep mask, an
`stablehlo.composite` with JAX's attribute names, and ops outside Tessera's subset around attention. Each returns
the module text (pretty form, a function @main) over bf16 arguments [batch, heads, seq, head_dim] unless its
docstring says otherwise."""

from __future__ import annotations

from hand_graphs import NEG_INF, _Body, function, reshape, tensor, transpose
from hand_graphs_unseen22 import BH, SCALE, _arguments, compare, dot, select

B, H = 1, 2


def reduce(body: _Body, x: str, kind: str, init: str, shape, dimension: int = 3, dtype: str = "bf16",
           swapped: bool = False) -> str:
    """x reduced over `dimension` by stablehlo.`kind`; `swapped`: the body applies it to (b, a), as torch-xla
    writes some reductions."""
    init_value = body.constant(init, dtype)
    result, inner = body.value(), body.value()
    a, b = f"%a{body.count}", f"%b{body.count}"
    scalar = f"tensor<{dtype}>"
    first, second = (b, a) if swapped else (a, b)
    kept = tuple(d for i, d in enumerate(shape) if i != dimension)
    body.lines.append(
        f'{result} = "stablehlo.reduce"({x}, {init_value}) <{{dimensions = array<i64: {dimension}>}}> ({{\n'
        f'    ^bb0({a}: {scalar}, {b}: {scalar}):\n'
        f'      {inner} = "stablehlo.{kind}"({first}, {second}) : ({scalar}, {scalar}) -> {scalar}\n'
        f'      "stablehlo.return"({inner}) : ({scalar}) -> ()\n'
        f'    }}) : ({tensor(shape, dtype)}, {scalar}) -> {tensor(kept, dtype)}')
    return result


def back(body: _Body, x: str, shape, reduced: int, dtype: str = "bf16") -> str:
    """A reduction over `reduced` broadcast back to `shape`."""
    kept = tuple(i for i in range(len(shape)) if i != reduced)
    return body.broadcast(x, tuple(shape[i] for i in kept), shape, kept, dtype)


def softmax(body: _Body, s: str, shape, axis: int = 3, max_axis: int | None = None, swapped: bool = False) -> str:
    """exp(s - max) / sum over `axis` (the max over `max_axis`), bf16; `swapped`: both reduce bodies (b, a)."""
    max_axis = axis if max_axis is None else max_axis
    m = back(body, reduce(body, s, "maximum", NEG_INF["bf16"], shape, max_axis, swapped=swapped), shape, max_axis)
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, m, shape)}) : ({tensor(shape)}) -> '
                  f'{tensor(shape)}')
    return body.binary("divide", e, back(body, reduce(body, e, "add", "0.0", shape, axis, swapped=swapped), shape,
                                         axis), shape)


def iota_mask(body: _Body, sq: int, sk: int, shape, predicate) -> str:
    """i1 [shape] from `predicate(body, rows, cols, index)` over iota [sq, sk] (rows already shifted by sk - sq,
    bottom-right), broadcast along the last two dimensions."""
    index = (sq, sk)
    rows = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 0 : i64}}> : () -> {tensor(index, "i32")}')
    cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 1 : i64}}> : () -> {tensor(index, "i32")}')
    rows = body.binary("add", rows, body.splat(sk - sq, index, "i32"), index, "i32")
    return body.broadcast(predicate(body, rows, cols, index), index, shape, (len(shape) - 2, len(shape) - 1), "i1")


CAUSAL_FORMS = {
    "cols LE rows": lambda body, r, c, ix: compare(body, c, r, ix, "LE"),
    "cols LT rows + 1": lambda body, r, c, ix: compare(body, c, body.binary("add", r, body.splat(1, ix, "i32"), ix,
                                                                            "i32"), ix, "LT"),
    "not (rows LT cols)": lambda body, r, c, ix: body.emit(f'"stablehlo.not"({compare(body, r, c, ix, "LT")}) : '
                                                           f'({tensor(ix, "i1")}) -> {tensor(ix, "i1")}'),
    "rows LE cols (anti-causal)": lambda body, r, c, ix: compare(body, r, c, ix, "LE"),
    "cols GE rows (anti-causal)": lambda body, r, c, ix: compare(body, c, r, ix, "GE"),
}
"""Predicates over (rows, cols) a user writes for `key visible`: the first three are the causal mask, the last two
its mirror image (a key visible iff at or after the query)."""


def _square(seq: int, d: int, edit, swapped: bool = False, sk: int | None = None) -> str:
    """softmax(edit(body, scaled scores, shape)) V over Q [B, H, seq, d], K, V [B, H, sk, d]."""
    sk = seq if sk is None else sk
    body = _Body()
    qs, ks, ss = (B, H, seq, d), (B, H, sk, d), (B, H, seq, sk)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, ks, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    o = dot(body, softmax(body, edit(body, s, ss), ss, swapped=swapped), "%v", ss, ks, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, ks, ks)), [(o, qs)])


def swapped_reduce_bodies(seq=64, d=64) -> str:
    """Causal (selected -inf), the softmax's max and sum reduce bodies maximum(b, a) and add(b, a)."""
    return _square(seq, d, lambda body, s, ss: select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]),
                                                      s, body.splat(NEG_INF["bf16"], ss), ss), swapped=True)


def causal_written(form: str, how: str = "select", sq=48, sk=80, d=64) -> str:
    """The mask `CAUSAL_FORMS[form]` on the scores, selected with -inf (`how` "select") or added as
    where(pred, 0, -1e9) ("add")."""
    def masked(body, s, ss):
        pred = iota_mask(body, sq, sk, ss, CAUSAL_FORMS[form])
        if how == "select":
            return select(body, pred, s, body.splat(NEG_INF["bf16"], ss), ss)
        return body.binary("add", s, select(body, pred, body.splat("0.0", ss), body.splat("-1.0e+09", ss), ss), ss)
    return _square(sq, d, masked, sk=sk)


def scale_constants(seq=64, d=64) -> str:
    """The scale 1/8 as a splat constant of the scores' shape (no broadcast) and then, a second factor, 1.0 as a
    [1] constant broadcast along the keys."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3]))
    full = body.emit(f'"stablehlo.constant"() <{{value = dense<{SCALE}> : {tensor(ss)}}}> : () -> {tensor(ss)}')
    s = body.binary("multiply", full, s, ss)
    one = body.emit(f'"stablehlo.constant"() <{{value = dense<1.0> : {tensor((1,))}}}> : () -> {tensor((1,))}')
    s = body.binary("multiply", s, body.broadcast(one, (1,), ss, (3,)), ss)
    o = dot(body, softmax(body, s, ss), "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def heads_before_batch(batch=2, heads=2, seq=48, d=64) -> str:
    """Q, K, V [batch, seq, heads, head_dim] (BSHD, as torch-xla's SDPA export), BMM1 batching (heads, batch) in
    that order: scores [heads, batch, seq, seq]; causal by select; BMM2 pairs P's (0, 1) with V's (2, 0); the
    output [heads, batch, seq, head_dim] transposed back to [batch, seq, heads, head_dim]."""
    body = _Body()
    xs, ss, out = (batch, seq, heads, d), (heads, batch, seq, seq), (heads, batch, seq, d)
    s = body.binary("multiply", dot(body, "%q", "%k", xs, xs, ss, ([2, 0], [2, 0]), ([3], [3])), body.splat(SCALE, ss),
                    ss)
    s = select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]), s, body.splat(NEG_INF["bf16"], ss),
               ss)
    o = dot(body, softmax(body, s, ss), "%v", ss, xs, out, ([0, 1], [2, 0]), ([3], [1]))
    o, shape = transpose(body, o, out, (1, 2, 0, 3))
    return function(body, _arguments("qkv", (xs, xs, xs)), [(o, shape)])


def f32_softmax_one_side(seq=64, d=64) -> str:
    """A float32 softmax of bf16 scores whose max is taken over the bf16 scores and converted (the subtract's
    other operand the scores converted to f32); P converted back to bf16 for P.V; causal by select."""
    body = _Body()
    qs, ss, rows = (B, H, seq, d), (B, H, seq, seq), (B, H, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    s = select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]), s, body.splat(NEG_INF["bf16"], ss),
               ss)
    m = body.emit(f'"stablehlo.convert"({back(body, reduce(body, s, "maximum", NEG_INF["bf16"], ss), ss, 3)}) : '
                  f'({tensor(ss)}) -> {tensor(ss, "f32")}')
    wide = body.emit(f'"stablehlo.convert"({s}) : ({tensor(ss)}) -> {tensor(ss, "f32")}')
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", wide, m, ss, "f32")}) : ({tensor(ss, "f32")}) -> '
                  f'{tensor(ss, "f32")}')
    total = back(body, reduce(body, e, "add", "0.0", ss, dtype="f32"), ss, 3, "f32")
    p = body.emit(f'"stablehlo.convert"({body.binary("divide", e, total, ss, "f32")}) : ({tensor(ss, "f32")}) -> '
                  f'{tensor(ss)}')
    del rows
    o = dot(body, p, "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def two_sided_window(seq=256, d=64, left=40, right=24, fill=NEG_INF["bf16"]) -> str:
    """A window of `left` keys before and `right` after each query, added as where(|window|, 0, fill) (the
    attention of Longformer's local heads): query i sees keys i - left .. i + right. At seq 256 whole key blocks
    of 128 are hidden from most rows."""
    def window(body, r, c, ix):
        near_left = compare(body, body.binary("subtract", r, c, ix, "i32"), body.splat(left, ix, "i32"), ix, "LE")
        near_right = compare(body, body.binary("subtract", c, r, ix, "i32"), body.splat(right, ix, "i32"), ix, "LE")
        return body.binary("and", near_left, near_right, ix, "i1")
    return _square(seq, d, lambda body, s, ss: body.binary("add", s, select(
        body, iota_mask(body, seq, seq, ss, window), body.splat("0.0", ss), body.splat(fill, ss), ss), ss))


def query_padding(seq=64, d=64, valid=40, fill=NEG_INF["bf16"]) -> str:
    """Queries at or past `valid` hidden from every key by an added where(rows < valid, 0, fill) computed from iota
    (a padded query block): those rows see no key."""
    return _square(seq, d, lambda body, s, ss: body.binary("add", s, select(
        body, iota_mask(body, seq, seq, ss, lambda body, r, c, ix: compare(body, r, body.splat(valid, ix, "i32"), ix,
                                                                            "LT")),
        body.splat("0.0", ss), body.splat(fill, ss), ss), ss))


def padding_from_lengths(batch=2, seq=64, d=64) -> str:
    """Keys at or past lengths[b] hidden: select(iota_k < broadcast(lengths), s, -inf), lengths an i32 [batch]
    argument (a padding mask from data)."""
    body = _Body()
    qs, ss = (batch, H, seq, d), (batch, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 3 : i64}}> : () -> {tensor(ss, "i32")}')
    lengths = body.broadcast("%lengths", (batch,), ss, (0,), "i32")
    s = select(body, compare(body, cols, lengths, ss, "LT"), s, body.splat(NEG_INF["bf16"], ss), ss)
    o = dot(body, softmax(body, s, ss), "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)) + f", %lengths: {tensor((batch,), 'i32')}", [(o, qs)])


def max_over_heads(seq=64, d=64) -> str:
    """exp(s - the max over the heads) / the sum over the keys: not a softmax."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    o = dot(body, softmax(body, s, ss, axis=3, max_axis=1), "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def v_before_softmax(seq=64, d=64) -> str:
    """softmax((Q K^T / 8) V, over head_dim) V^T: the scores multiplied by V before the softmax. It is attention of
    queries Q K^T / 8 over keys and values V^T (seq = head_dim = 64): [batch, heads, seq, seq] out."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    sv = body.binary("multiply", dot(body, s, "%v", ss, qs, qs, BH, ([3], [2])), body.splat(SCALE, qs), qs)
    o = dot(body, softmax(body, sv, qs), "%v", qs, qs, ss, BH, ([3], [3]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, ss)])


def dropout_rate_zero(seq=64, d=64) -> str:
    """Dropout of rate 0 left in the graph: select(keep, P / 1.0, 0), keep an i1 argument (all true when the rate
    is 0, but data the graph does not know)."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    p = body.binary("divide", softmax(body, s, ss), body.splat("1.0", ss), ss)
    p = select(body, "%keep", p, body.splat("0.0", ss), ss)
    o = dot(body, p, "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)) + f", %keep: {tensor(ss, 'i1')}", [(o, qs)])


def composite(attributes: str, causal: bool = False, seq=64, heads=2, d=64, q_scaled: bool = False) -> str:
    """`stablehlo.composite "tessera.attention"` over Q, K, V [1, seq, heads, d] (BSHD) with `attributes` (the
    composite_attributes dictionary's body) and a decomposition computing attention scaled by 1/8 (on the scores,
    or with `q_scaled` on Q before the product), `causal`."""
    body = _Body()
    xs, ss = (1, seq, heads, d), (1, heads, seq, seq)
    pair = ([0, 2], [0, 2])
    if q_scaled:
        s = dot(body, body.binary("multiply", "%a", body.splat(SCALE, xs), xs), "%b", xs, xs, ss, pair, ([3], [3]))
    else:
        s = body.binary("multiply", dot(body, "%a", "%b", xs, xs, ss, pair, ([3], [3])), body.splat(SCALE, ss), ss)
    if causal:
        s = select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]), s,
                   body.splat(NEG_INF["bf16"], ss), ss)
    o = dot(body, softmax(body, s, ss), "%c", ss, xs, (1, heads, seq, d), ([0, 1], [0, 2]), ([3], [1]))
    o, shape = transpose(body, o, (1, heads, seq, d), (0, 2, 1, 3))
    t = tensor(xs)
    return (f'func.func @main(%q: {t}, %k: {t}, %v: {t}) -> {t} {{\n'
            f'    %0 = "stablehlo.composite"(%q, %k, %v) <{{composite_attributes = {{{attributes}}}, decomposition = '
            f'@tessera.attention, name = "tessera.attention", version = 0 : i32}}> : ({t}, {t}, {t}) -> {t}\n'
            f'    func.return %0 : {t}\n}}\n'
            + function(body, f"%a: {t}, %b: {t}, %c: {t}", [(o, shape)]).replace(
                "func.func @main", 'func.func private @tessera.attention'))


def gelu_around(op: str = "chlo.erf", seq=64, d=64) -> str:
    """Causal attention whose output goes through `op` (elementwise, unary: chlo.erf, which the interpreter runs,
    or another chlo op, which it does not)."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    s = select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]), s, body.splat(NEG_INF["bf16"], ss),
               ss)
    o = dot(body, softmax(body, s, ss), "%v", ss, qs, qs, BH, ([3], [2]))
    o = body.emit(f'"{op}"({o}) : ({tensor(qs)}) -> {tensor(qs)}')
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def training(heads_first: bool = False, swapped: bool = False, batch=2, seq=64, d=64, seq_k: int | None = None) -> str:
    """jax.grad through causal attention (selected -inf) as `hand_graphs_unseen22.grad_through_max` writes it, the
    max stop-gradient'ed: returns (o, dq, dk, dv) over Q, dO [batch, H, seq, d] and K, V [batch, H, seq_k, d]
    (seq_k = seq by default; batch = heads: a pairing swapped on the way would keep every shape). `heads_first`:
    every product batches (heads, batch) in that order, so S, P and dS are [heads, batch, seq, seq_k] and O, dQ,
    dK, dV are transposed back; `swapped`: every reduce body applies its op to (b, a)."""
    seq_k = seq if seq_k is None else seq_k
    body = _Body()
    xs, ks = (batch, H, seq, d), (batch, H, seq_k, d)
    if heads_first:
        pair, ss, out, kout = ([1, 0], [1, 0]), (H, batch, seq, seq_k), (H, batch, seq, d), (H, batch, seq_k, d)
    else:
        pair, ss, out, kout = BH, (batch, H, seq, seq_k), xs, ks
    x_with_s = ([0, 1], [1, 0]) if heads_first else BH  # (scores-like [.., q, k] or [.., q, d], argument) pairs
    mask = iota_mask(body, seq, seq_k, ss, CAUSAL_FORMS["cols LE rows"])
    s = body.binary("multiply", dot(body, "%q", "%k", xs, ks, ss, pair, ([3], [3])), body.splat(SCALE, ss), ss)
    s = select(body, mask, s, body.splat(NEG_INF["bf16"], ss), ss)
    p = softmax(body, s, ss, swapped=swapped)
    o = dot(body, p, "%v", ss, ks, out, x_with_s, ([3], [2]))
    dp = dot(body, "%do", "%v", xs, ks, ss, pair, ([3], [3]))
    total = back(body, reduce(body, body.binary("multiply", p, dp, ss), "add", "0.0", ss, swapped=swapped), ss, 3)
    ds = body.binary("multiply", p, body.binary("subtract", dp, total, ss), ss)
    ds = select(body, mask, ds, body.splat("0.0", ss), ss)
    ds = body.binary("multiply", ds, body.splat(SCALE, ss), ss)
    grads = [dot(body, ds, "%k", ss, ks, out, x_with_s, ([3], [2])),
             dot(body, ds, "%q", ss, xs, kout, x_with_s, ([2], [2])),
             dot(body, p, "%do", ss, xs, kout, x_with_s, ([2], [2]))]
    results = list(zip([o, *grads], [out, out, kout, kout]))
    if heads_first:
        results = [transpose(body, r, shape, (1, 0, 2, 3)) for r, shape in results]
    return function(body, _arguments(("q", "k", "v", "do"), (xs, ks, ks, xs)), results)


def sharded(target: str = "Sharding", seq=64, d=64) -> str:
    """Causal attention whose Q, K and V pass through `custom_call @target` first: JAX's sharding annotation
    (`jax.lax.with_sharding_constraint`: @Sharding, the value itself on one device), or another target."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    q, k, v = (body.emit(f'"stablehlo.custom_call"({x}) <{{call_target_name = "{target}", api_version = 1 : i32}}> '
                         f'{{mhlo.sharding = "{{replicated}}"}} : ({tensor(qs)}) -> {tensor(qs)}')
               for x in ("%q", "%k", "%v"))
    s = body.binary("multiply", dot(body, q, k, qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    s = select(body, iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"]), s, body.splat(NEG_INF["bf16"], ss),
               ss)
    o = dot(body, softmax(body, s, ss), v, ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def float8_keys(where: str = "argument", seq=64, d=64) -> str:
    """Attention whose K is float8 (f8E4M3FN) converted to bf16: an argument ("argument", a quantized KV cache) or
    a round trip through f8 in the graph ("inside", fake quantization)."""
    body = _Body()
    qs, ss, f8 = (B, H, seq, d), (B, H, seq, seq), "f8E4M3FN"
    k = "%k"
    if where == "inside":
        k = body.emit(f'"stablehlo.convert"({k}) : ({tensor(qs)}) -> {tensor(qs, f8)}')
    k = body.emit(f'"stablehlo.convert"({k}) : ({tensor(qs, f8)}) -> {tensor(qs)}')
    s = body.binary("multiply", dot(body, "%q", k, qs, qs, ss, BH, ([3], [3])), body.splat(SCALE, ss), ss)
    o = dot(body, softmax(body, s, ss), "%v", ss, qs, qs, BH, ([3], [2]))
    k_type = tensor(qs, f8 if where == "argument" else "bf16")
    return function(body, f"%q: {tensor(qs)}, %k: {k_type}, %v: {tensor(qs)}", [(o, qs)])


def pretty_form() -> str:
    """Attention over Q, K, V [1, 64, 2, 64] as `jax.jit(f).lower(q, k, v).as_text()` prints it: StableHLO's pretty
    form (Tessera reads the generic one)."""
    return PRETTY


PRETTY = """\
module @jit_attn attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<1x64x2x64xbf16>, %arg1: tensor<1x64x2x64xbf16>, %arg2: tensor<1x64x2x64xbf16>) -> (tensor<1x64x2x64xbf16> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0, 2] x [0, 2], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<1x64x2x64xbf16>, tensor<1x64x2x64xbf16>) -> tensor<1x2x64x64xbf16>
    %cst = stablehlo.constant dense<1.250000e-01> : tensor<bf16>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<bf16>) -> tensor<1x2x64x64xbf16>
    %2 = stablehlo.multiply %0, %1 : tensor<1x2x64x64xbf16>
    %cst_0 = stablehlo.constant dense<0xFF80> : tensor<bf16>
    %3 = stablehlo.reduce(%2 init: %cst_0) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x64x64xbf16>, tensor<bf16>) -> tensor<1x2x64xbf16>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1, 2] : (tensor<1x2x64xbf16>) -> tensor<1x2x64x64xbf16>
    %5 = stablehlo.subtract %2, %4 : tensor<1x2x64x64xbf16>
    %6 = stablehlo.exponential %5 : tensor<1x2x64x64xbf16>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<bf16>
    %7 = stablehlo.reduce(%6 init: %cst_1) applies stablehlo.add across dimensions = [3] : (tensor<1x2x64x64xbf16>, tensor<bf16>) -> tensor<1x2x64xbf16>
    %8 = stablehlo.broadcast_in_dim %7, dims = [0, 1, 2] : (tensor<1x2x64xbf16>) -> tensor<1x2x64x64xbf16>
    %9 = stablehlo.divide %6, %8 : tensor<1x2x64x64xbf16>
    %10 = stablehlo.dot_general %9, %arg2, batching_dims = [0, 1] x [0, 2], contracting_dims = [3] x [1], precision = [DEFAULT, DEFAULT] : (tensor<1x2x64x64xbf16>, tensor<1x64x2x64xbf16>) -> tensor<1x2x64x64xbf16>
    %11 = stablehlo.transpose %10, dims = [0, 2, 1, 3] : (tensor<1x2x64x64xbf16>) -> tensor<1x64x2x64xbf16>
    return %11 : tensor<1x64x2x64xbf16>
  }
}
"""


def alibi_and_padded_rows(seq=64, d=64, valid=40) -> str:
    """An ALiBi bias -0.5 |i - j| and, in the same added tensor, -inf on the queries at or past `valid` (padded
    query rows), computed from iota: a bias (not a mask: it holds other values than 0 and -inf)."""
    def biased(body, s, ss):
        def alibi(body, r, c, ix):
            distance = body.emit(f'"stablehlo.abs"({body.binary("subtract", c, r, ix, "i32")}) : ({tensor(ix, "i32")})'
                                 f' -> {tensor(ix, "i32")}')
            return body.binary("multiply", body.emit(f'"stablehlo.convert"({distance}) : ({tensor(ix, "i32")}) -> '
                                                     f'{tensor(ix)}'), body.splat("-0.5", ix), ix)
        index = (seq, seq)
        rows = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 0 : i64}}> : () -> {tensor(index, "i32")}')
        cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 1 : i64}}> : () -> {tensor(index, "i32")}')
        padded = select(body, compare(body, rows, body.splat(valid, index, "i32"), index, "LT"),
                        body.splat("0.0", index), body.splat(NEG_INF["bf16"], index), index)
        bias = body.binary("add", alibi(body, rows, cols, index), padded, index)
        return body.binary("add", s, body.broadcast(bias, index, ss, (2, 3)), ss)
    return _square(seq, d, biased)


def torch_sdpa_math(batch=2, heads=2, seq=64, d=64) -> str:
    """PyTorch's math SDPA (`torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` as
    torch_xla exports its decomposition): Q and K^T each times sqrt(scale) (0.35355 in bf16), the products as
    `bmm` over [batch * heads, seq, d] (Q, K^T and V reshaped to three dimensions; K transposed before), the causal
    mask added as where(tril, 0, -inf), the softmax in float32 of the bf16 scores, P back to bf16, the output
    reshaped to [batch, heads, seq, d]."""
    body = _Body()
    xs, flat, kt, ss = (batch, heads, seq, d), (batch * heads, seq, d), (batch * heads, d, seq), \
        (batch * heads, seq, seq)
    factor = "3.535160e-01"
    q = reshape(body, body.binary("multiply", "%q", body.splat(factor, xs), xs), xs, flat)
    k, _ = transpose(body, "%k", xs, (0, 1, 3, 2))
    k = reshape(body, body.binary("multiply", k, body.splat(factor, (batch, heads, d, seq)), (batch, heads, d, seq)),
                (batch, heads, d, seq), kt)
    s = dot(body, q, k, flat, kt, ss, ([0], [0]), ([2], [1]))
    hidden = iota_mask(body, seq, seq, ss, CAUSAL_FORMS["cols LE rows"])
    s = body.binary("add", s, select(body, hidden, body.splat("0.0", ss), body.splat(NEG_INF["bf16"], ss), ss), ss)
    wide = body.emit(f'"stablehlo.convert"({s}) : ({tensor(ss)}) -> {tensor(ss, "f32")}')
    m = back(body, reduce(body, wide, "maximum", NEG_INF["f32"], ss, 2, "f32"), ss, 2, "f32")
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", wide, m, ss, "f32")}) : ({tensor(ss, "f32")}) -> '
                  f'{tensor(ss, "f32")}')
    p = body.binary("divide", e, back(body, reduce(body, e, "add", "0.0", ss, 2, "f32"), ss, 2, "f32"), ss, "f32")
    p = body.emit(f'"stablehlo.convert"({p}) : ({tensor(ss, "f32")}) -> {tensor(ss)}')
    o = dot(body, p, reshape(body, "%v", xs, flat), ss, flat, flat, ([0], [0]), ([2], [1]))
    return function(body, _arguments("qkv", (xs, xs, xs)), [(reshape(body, o, flat, xs), xs)])
