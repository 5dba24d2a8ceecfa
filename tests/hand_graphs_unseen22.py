"""StableHLO attention graphs written by hand, round 22 of the unseen cases (tests/test_rewriter_unseen22.py): layouts
JAX users write that the fixtures do not show (K or V cached transposed, scores laid out key-major, heads before
batch with a bias broadcast over the heads, K and V [heads, batch, ...] beside Q [batch, heads, ...], MQA by einsum
without a K/V head dimension or by jnp.broadcast_to, Q = K = V one tensor, guided-diffusion's
[batch * heads, head_dim, seq] with the scale on Q and on K, XCiT's attention over the channels), masks (causal by
selecting the fill where triu holds, a sliding window, GPT-2's `w * b - 1e4 (1 - b)`), a max over the queries,
several attentions in one graph (one matched beside a near miss; two over the same K and V with the backward of the
first; two chained over the same K), and jax.grad through a softmax by hand whose max is not stop-gradient'ed. Each
returns the module text (pretty form, a function @main) over bf16 arguments [batch, heads, seq, head_dim] (but where
a docstring says otherwise); `hand_graphs` writes the pieces."""

from __future__ import annotations

import re

from hand_graphs import NEG_INF, _Body, attend, function, tensor

B, H = 1, 2
SCALE = "1.250000e-01"


def dot(body: _Body, a: str, b: str, a_shape, b_shape, out, batching, contracting) -> str:
    """dot_general(a, b) with ([lhs], [rhs]) batching and contracting dimensions."""
    (lb, rb), (lc, rc) = batching, contracting
    return body.emit(f'"stablehlo.dot_general"({a}, {b}) <{{dot_dimension_numbers = #stablehlo.dot<'
                     f'lhs_batching_dimensions = {lb}, rhs_batching_dimensions = {rb}, lhs_contracting_dimensions = '
                     f'{lc}, rhs_contracting_dimensions = {rc}>}}> : ({tensor(a_shape)}, {tensor(b_shape)}) -> '
                     f'{tensor(out)}')


BH = ([0, 1], [0, 1])
"""Batching over batch and heads, dimensions 0 and 1 of both operands."""


def softmax(body: _Body, s: str, shape, axis: int, max_axis: int | None = None) -> str:
    """exp(s - max) / sum over `axis` (the max over `max_axis`, by default the same)."""
    max_axis = axis if max_axis is None else max_axis

    def back(x: str, reduced: int) -> str:
        kept = tuple(i for i in range(len(shape)) if i != reduced)
        return body.broadcast(x, tuple(shape[i] for i in kept), shape, kept)

    m = back(body.reduce(s, "maximum", NEG_INF["bf16"], shape, dimension=max_axis), max_axis)
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, m, shape)}) : ({tensor(shape)}) -> '
                  f'{tensor(shape)}')
    return body.binary("divide", e, back(body.reduce(e, "add", "0.0", shape, dimension=axis), axis), shape)


def compare(body: _Body, a: str, b: str, shape, direction: str, dtype: str = "i32") -> str:
    return body.emit(f'"stablehlo.compare"({a}, {b}) <{{comparison_direction = #stablehlo<comparison_direction '
                     f'{direction}>}}> : ({tensor(shape, dtype)}, {tensor(shape, dtype)}) -> {tensor(shape, "i1")}')


def causal(body: _Body, sq: int, sk: int, shape, dims, hidden=False, window=None) -> str:
    """i1 [shape] from iota [sq, sk] broadcast along `dims`: key j visible from query i (j <= i + sk - sq), or
    with `hidden` the keys it hides (triu above that diagonal); `window`: also hidden where i + sk - sq - j >=
    window (a sliding window)."""
    index = (sq, sk)
    rows = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 0 : i64}}> : () -> {tensor(index, "i32")}')
    cols = body.emit(f'"stablehlo.iota"() <{{iota_dimension = 1 : i64}}> : () -> {tensor(index, "i32")}')
    rows = body.binary("add", rows, body.splat(sk - sq, index, "i32"), index, "i32")
    pred = compare(body, rows, cols, index, "LT" if hidden else "GE")
    if window is not None:
        near = compare(body, body.binary("subtract", rows, cols, index, "i32"), body.splat(window, index, "i32"),
                       index, "LT")
        pred = body.binary("and", pred, near, index, "i1")
    return body.broadcast(pred, index, shape, dims, "i1")


def select(body: _Body, pred: str, a: str, b: str, shape) -> str:
    return body.emit(f'"stablehlo.select"({pred}, {a}, {b}) : ({tensor(shape, "i1")}, {tensor(shape)}, '
                     f'{tensor(shape)}) -> {tensor(shape)}')


def scaled_scores(body: _Body, q: str, k: str, q_shape, k_shape, s_shape, contracting=([3], [3])) -> str:
    return body.binary("multiply", dot(body, q, k, q_shape, k_shape, s_shape, BH, contracting),
                       body.splat(SCALE, s_shape), s_shape)


def _arguments(names, shapes) -> str:
    return ", ".join(f"%{n}: {tensor(s)}" for n, s in zip(names, shapes))


def cached_transposed(which: str, sq=48, sk=80, d=64) -> str:
    """K (`which` "k": einsum bhqd,bhdk->bhqk, causal by select) or V ("v": bhqk,bhdk->bhqd) cached transposed,
    [batch, heads, head_dim, seq_k]."""
    body = _Body()
    qs, kv, t, ss = (B, H, sq, d), (B, H, sk, d), (B, H, d, sk), (B, H, sq, sk)
    ks, vs = (t, kv) if which == "k" else (kv, t)
    s = scaled_scores(body, "%q", "%k", qs, ks, ss, ([3], [2] if which == "k" else [3]))
    if which == "k":
        s = select(body, causal(body, sq, sk, ss, (2, 3)), s, body.splat(NEG_INF["bf16"], ss), ss)
    o = dot(body, softmax(body, s, ss, 3), "%v", ss, vs, qs, BH, ([3], [2] if which == "k" else [3]))
    return function(body, _arguments("qkv", (qs, ks, vs)), [(o, qs)])


def keys_first(sq=48, sk=80, d=64) -> str:
    """Scores laid out [batch, heads, keys, queries] (einsum bhkd,bhqd->bhkq), causal, the softmax over axis 2
    (the keys), P.V contracting axis 2."""
    body = _Body()
    qs, vs, ss = (B, H, sq, d), (B, H, sk, d), (B, H, sk, sq)
    s = scaled_scores(body, "%k", "%q", vs, qs, ss)
    s = select(body, causal(body, sq, sk, ss, (3, 2)), s, body.splat(NEG_INF["bf16"], ss), ss)
    o = dot(body, softmax(body, s, ss, 2), "%v", ss, vs, qs, BH, ([2], [2]))
    return function(body, _arguments("qkv", (qs, vs, vs)), [(o, qs)])


def heads_first(batch=2, seq=48, d=64) -> str:
    """Q, K, V [heads, batch, seq, head_dim] (einsum hbqd,hbkd->hbqk) and a bias [1, batch, seq, seq] argument
    broadcast over the heads."""
    body = _Body()
    qs, ss, bias_shape = (H, batch, seq, d), (H, batch, seq, seq), (1, batch, seq, seq)
    bias = body.broadcast("%bias", bias_shape, ss, (0, 1, 2, 3))
    o, shape = attend(body, "%q", "%k", "%v", qs, qs, bias=bias)
    return function(body, _arguments(("q", "k", "v", "bias"), (qs, qs, qs, bias_shape)), [(o, shape)])


def crosswise_batch(seq=48, d=64) -> str:
    """K and V laid out [heads, batch, seq, head_dim] beside Q [batch, heads, ...], batch = heads = 2 (a pairing
    swapped by mistake would keep every shape): BMM1 pairs Q's dimensions (0, 1) with K's (1, 0), BMM2 P's with
    V's (1, 0); causal."""
    body = _Body()
    qs, ss = (2, 2, seq, d), (2, 2, seq, seq)
    crosswise = ([0, 1], [1, 0])
    s = body.binary("multiply", dot(body, "%q", "%k", qs, qs, ss, crosswise, ([3], [3])), body.splat(SCALE, ss), ss)
    s = select(body, causal(body, seq, seq, ss, (2, 3)), s, body.splat(NEG_INF["bf16"], ss), ss)
    o = dot(body, softmax(body, s, ss, 3), "%v", ss, qs, qs, crosswise, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def channel_attention(tokens=64, channels=48) -> str:
    """XCiT's cross-covariance attention: Q, K, V [batch, heads, tokens, channels], softmax(Q^T K / 8) over the
    channels (the products contract the tokens: 64, the kernel's head_dim), its output [batch, heads, channels,
    tokens] (P V^T)."""
    body = _Body()
    xs, ss, out = (B, H, tokens, channels), (B, H, channels, channels), (B, H, channels, tokens)
    s = scaled_scores(body, "%q", "%k", xs, xs, ss, ([2], [2]))
    o = dot(body, softmax(body, s, ss, 3), "%v", ss, xs, out, BH, ([3], [3]))
    return function(body, _arguments("qkv", (xs, xs, xs)), [(o, out)])


def mqa_einsum(seq=64, d=64) -> str:
    """MQA with K and V [batch, seq, head_dim], no head dimension: einsum bhqd,bkd->bhqk and bhqk,bkd->bhqd
    (the query heads a free dimension of Q)."""
    body = _Body()
    qs, ks, ss = (B, H, seq, d), (B, seq, d), (B, H, seq, seq)
    s = body.binary("multiply", dot(body, "%q", "%k", qs, ks, ss, ([0], [0]), ([3], [2])), body.splat(SCALE, ss), ss)
    o = dot(body, softmax(body, s, ss, 3), "%v", ss, ks, qs, ([0], [0]), ([3], [1]))
    return function(body, _arguments("qkv", (qs, ks, ks)), [(o, qs)])


def mqa_broadcast(sq=64, sk=96, d=64, heads=4) -> str:
    """MQA by jnp.broadcast_to: K, V [batch, 1, seq_k, head_dim] broadcast to every query head; causal."""
    body = _Body()
    small, full, qs = (B, 1, sk, d), (B, heads, sk, d), (B, heads, sq, d)
    k, v = (body.broadcast(x, small, full, (0, 1, 2, 3)) for x in ("%k", "%v"))
    o, shape = attend(body, "%q", k, v, qs, full, mask="select")
    return function(body, _arguments("qkv", (qs, small, small)), [(o, shape)])


def hidden_selected(sq=40, sk=72, d=64) -> str:
    """Causal by jnp.where(triu(ones, 1 + sk - sq), -inf, s): the fill the first branch; scores divided by 8."""
    body = _Body()
    qs, vs, ss = (B, H, sq, d), (B, H, sk, d), (B, H, sq, sk)
    s = dot(body, "%q", "%k", qs, vs, ss, BH, ([3], [3]))
    s = body.binary("divide", s, body.splat("8.0", ss), ss)
    s = select(body, causal(body, sq, sk, ss, (2, 3), hidden=True), body.splat(NEG_INF["bf16"], ss), s, ss)
    o = dot(body, softmax(body, s, ss, 3), "%v", ss, vs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, vs, vs)), [(o, qs)])


def _square(seq: int, d: int, scores) -> str:
    """softmax(scores(body, s)) V over Q, K, V [B, H, seq, d], `scores` editing the scaled scores."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    s = scores(body, scaled_scores(body, "%q", "%k", qs, qs, ss), ss)
    o = dot(body, s, "%v", ss, qs, qs, BH, ([3], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def window_selected(seq=64, d=64, window=16) -> str:
    """A causal sliding window by jnp.where(causal & (i - j < window), s, -inf)."""
    return _square(seq, d, lambda body, s, ss: softmax(body, select(
        body, causal(body, seq, seq, ss, (2, 3), window=window), s, body.splat(NEG_INF["bf16"], ss), ss), ss, 3))


def gpt2_mask(seq=64, d=64) -> str:
    """GPT-2's mask: s * b - 1e4 * (1 - b), b the causal mask as bf16."""
    def masked(body, s, ss):
        b = body.emit(f'"stablehlo.convert"({causal(body, seq, seq, ss, (2, 3))}) : ({tensor(ss, "i1")}) -> '
                      f'{tensor(ss)}')
        hidden = body.binary("multiply", body.splat("1.0e+04", ss),
                             body.binary("subtract", body.splat("1.0", ss), b, ss), ss)
        return softmax(body, body.binary("subtract", body.binary("multiply", s, b, ss), hidden, ss), ss, 3)
    return _square(seq, d, masked)


def max_over_queries(seq=64, d=64) -> str:
    """exp(s - the max over the queries) / the sum over the keys: not a softmax."""
    return _square(seq, d, lambda body, s, ss: softmax(body, s, ss, 3, max_axis=2))


def matched_and_near_miss(seq=64, d=64) -> str:
    """Two attentions over the same Q, K, V: causal (matched), and one whose sum runs over the queries (not a
    softmax); returns both."""
    body = _Body()
    qs = (B, H, seq, d)
    first, _ = attend(body, "%q", "%k", "%v", qs, qs, mask="select")
    second, _ = attend(body, "%q", "%k", "%v", qs, qs, sum_axis=2)
    return function(body, _arguments("qkv", (qs, qs, qs)), [(first, qs), (second, qs)])


def chained_over_the_same_keys(seq=64, d=64) -> str:
    """Two causal attentions over the same K, the second's Q the first's output (V and V2 differ)."""
    body = _Body()
    qs = (B, H, seq, d)
    first, _ = attend(body, "%q", "%k", "%v", qs, qs, mask="select")
    second, _ = attend(body, first, "%k", "%v2", qs, qs, mask="select")
    return function(body, _arguments(("q", "k", "v", "v2"), (qs,) * 4), [(second, qs)])


def _backward(body: _Body, p: str, s: str | None, m: str | None, qs, shape, max_term: str | None):
    """dS of a causal softmax P (scale SCALE) from dO, as jax.grad writes it: dX = P (dP - rowsum(P dP)),
    dP = dO V^T; with `max_term` also the cotangent of the max m of the softmax input s, "jax": -rowsum(dX)
    spread over eq(s, m) / its count (0 in exact arithmetic), "wrong": dP itself over eq(s, m) (not a softmax
    gradient). Returns dS masked and scaled."""
    rows = shape[:3]
    dp = dot(body, "%do", "%v", qs, qs, shape, BH, ([3], [3]))
    total = body.broadcast(body.reduce(body.binary("multiply", p, dp, shape), "add", "0.0", shape), rows, shape,
                           (0, 1, 2))
    ds = body.binary("multiply", p, body.binary("subtract", dp, total, shape), shape)
    if max_term is not None:
        at_max = compare(body, s, body.broadcast(m, rows, shape, (0, 1, 2)), shape, "EQ", "bf16")
        where_max = body.emit(f'"stablehlo.convert"({at_max}) : ({tensor(shape, "i1")}) -> {tensor(shape)}')
        counts = body.reduce(where_max, "add", "0.0", shape)
        if max_term == "jax":
            dm = body.emit(f'"stablehlo.negate"({body.reduce(ds, "add", "0.0", shape)}) : ({tensor(rows)}) -> '
                           f'{tensor(rows)}')
            spread = body.broadcast(body.binary("divide", dm, counts, rows), rows, shape, (0, 1, 2))
        else:
            spread = dp
        ds = body.binary("add", ds, body.binary("multiply", spread, where_max, shape), shape)
    seq = shape[2]
    ds = select(body, causal(body, seq, seq, shape, (2, 3)), ds, body.splat("0.0", shape), shape)
    return body.binary("multiply", ds, body.splat(SCALE, shape), shape)


def _gradients(body: _Body, ds: str, p: str, q: str, qs, ss):
    """(dQ, dK, dV) from dS and P [ss] and Q, K, dO [qs]: dS K, dS^T Q, P^T dO."""
    return (dot(body, ds, "%k", ss, qs, qs, BH, ([3], [2])),
            dot(body, ds, q, ss, qs, qs, BH, ([2], [2])),
            dot(body, p, "%do", ss, qs, qs, BH, ([2], [2])))


def shared_keys_with_backward(seq=64, d=64) -> str:
    """Two causal attentions over the same K and V (queries q and q2), then the backward of the first
    (`_backward`); returns (o2, dq, dk, dv)."""
    body = _Body()
    qs, ss = (B, H, seq, d), (B, H, seq, seq)
    attend(body, "%q", "%k", "%v", qs, qs, mask="select")
    p = re.findall(r'(%\d+) = "stablehlo.divide"', "\n".join(body.lines))[-1]
    second, _ = attend(body, "%q2", "%k", "%v", qs, qs, mask="select")
    grads = _gradients(body, _backward(body, p, None, None, qs, ss, None), p, "%q", qs, ss)
    return function(body, _arguments(("q", "q2", "k", "v", "do"), (qs,) * 5), [(second, qs), *((g, qs) for g in grads)])


def grad_through_max(seq=64, d=64, max_term="jax") -> str:
    """jax.grad through causal attention with the softmax by hand, exp(s - s.max(-1, keepdims=True)) / sum, the
    max not stop-gradient'ed: JAX's reduce_max gradient (`_backward`'s max_term); returns (o, dq, dk, dv)."""
    body = _Body()
    qs, ss, rows = (B, H, seq, d), (B, H, seq, seq), (B, H, seq)
    s = scaled_scores(body, "%q", "%k", qs, qs, ss)
    s = select(body, causal(body, seq, seq, ss, (2, 3)), s, body.splat(NEG_INF["bf16"], ss), ss)
    m = body.reduce(s, "maximum", NEG_INF["bf16"], ss)
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, body.broadcast(m, rows, ss, (0, 1, 2)), ss)})'
                  f' : ({tensor(ss)}) -> {tensor(ss)}')
    p = body.binary("divide", e, body.broadcast(body.reduce(e, "add", "0.0", ss), rows, ss, (0, 1, 2)), ss)
    o = dot(body, p, "%v", ss, qs, qs, BH, ([3], [2]))
    grads = _gradients(body, _backward(body, p, s, m, qs, ss, max_term), p, "%q", qs, ss)
    return function(body, _arguments(("q", "k", "v", "do"), (qs,) * 4), [(o, qs), *((g, qs) for g in grads)])


def one_tensor(seq=64, d=64) -> str:
    """softmax(x x^T / 8, causal) x: Q, K and V one argument."""
    body = _Body()
    xs = (B, H, seq, d)
    o, shape = attend(body, "%x", "%x", "%x", xs, xs, mask="select")
    return function(body, f"%x: {tensor(xs)}", [(o, shape)])


QK_SCALE = "3.535160e-01"
"""64^-1/4 in bf16, on Q and on K (guided-diffusion's `scale = 1 / sqrt(sqrt(ch))`)."""


def guided_diffusion(t=48, d=64, heads=4) -> str:
    """OpenAI guided-diffusion's QKVAttention: q, k, v [batch * heads, head_dim, t] (head_dim before the
    sequence), Q and K each times QK_SCALE, einsum bct,bcs->bts (one batching dimension), the softmax in float32
    (`softmax(w.float()).type(w.dtype)`), einsum bts,bcs->bct (V the left operand)."""
    body = _Body()
    qs, ss, rows = (heads, d, t), (heads, t, t), (heads, t)
    q, k = (body.binary("multiply", x, body.splat(QK_SCALE, qs), qs) for x in ("%q", "%k"))
    s = body.emit(f'"stablehlo.convert"({dot(body, q, k, qs, qs, ss, ([0], [0]), ([1], [1]))}) : ({tensor(ss)}) -> '
                  f'{tensor(ss, "f32")}')
    m = body.broadcast(body.reduce(s, "maximum", NEG_INF["f32"], ss, "f32", 2), rows, ss, (0, 1), "f32")
    e = body.emit(f'"stablehlo.exponential"({body.binary("subtract", s, m, ss, "f32")}) : ({tensor(ss, "f32")}) -> '
                  f'{tensor(ss, "f32")}')
    total = body.broadcast(body.reduce(e, "add", "0.0", ss, "f32", 2), rows, ss, (0, 1), "f32")
    p = body.emit(f'"stablehlo.convert"({body.binary("divide", e, total, ss, "f32")}) : ({tensor(ss, "f32")}) -> '
                  f'{tensor(ss)}')
    o = dot(body, "%v", p, qs, ss, qs, ([0], [0]), ([2], [2]))
    return function(body, _arguments("qkv", (qs, qs, qs)), [(o, qs)])


def k_transposed_training(seq=64, d=64) -> str:
    """K cached transposed [batch, heads, head_dim, seq_k] with seq_k = head_dim (a transpose missed on the way
    would keep every shape), causal, and jax.grad's backward (`_backward`): dQ = dS K^T contracting K's keys,
    dK^T = Q^T dS in K's layout, dV = P^T dO; returns (o, dq, dk^T, dv)."""
    body = _Body()
    qs, ks, ss = (B, H, seq, d), (B, H, d, seq), (B, H, seq, seq)
    s = scaled_scores(body, "%q", "%k", qs, ks, ss, ([3], [2]))
    s = select(body, causal(body, seq, seq, ss, (2, 3)), s, body.splat(NEG_INF["bf16"], ss), ss)
    p = softmax(body, s, ss, 3)
    o = dot(body, p, "%v", ss, qs, qs, BH, ([3], [2]))
    ds = _backward(body, p, None, None, qs, ss, None)
    grads = (dot(body, ds, "%k", ss, ks, qs, BH, ([3], [3])), dot(body, "%q", ds, qs, ss, ks, BH, ([2], [2])),
             dot(body, p, "%do", ss, qs, qs, BH, ([2], [2])))
    return function(body, _arguments(("q", "k", "v", "do"), (qs, ks, qs, qs)),
                    [(o, qs), (grads[0], qs), (grads[1], ks), (grads[2], qs)])
