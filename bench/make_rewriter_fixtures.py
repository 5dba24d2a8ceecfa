"""Export the attention rewriter's fixtures, tests/rewriter/*.mlir, from JAX (needs `pip install jax`; the
tests that read the files do not).

    .venv/bin/pip install jax && .venv/bin/python bench/make_rewriter_fixtures.py [--out tests/rewriter]

Each fixture is one jitted function lowered to StableHLO and printed as JAX users print it, in MLIR's generic
form with debug info (`compiler_ir("stablehlo")`, `print_generic_op_form=True, enable_debug_info=True`): so
the files carry the location aliases (`loc(#loc35)`, defined at the end) and hex float literals
(`dense<0xFF800000> : tensor<f32>` for -inf) that Tessera's parser must read. Python source paths in the
locations are made relative to the repository. Tensors are bf16 in JAX's layout [batch, seq, heads,
head_dim], batch 2, heads 4; the sizes of each fixture are in its name and its header comment.

Positive fixtures are attention written as people write it (einsum, jax.nn.softmax, jnp.where with jnp.tril);
`neg_*` fixtures are what the matcher must leave alone, each for one rule (the header says which).
"""

from __future__ import annotations

import argparse
import math
import os
import re

import jax
import jax.numpy as jnp

B, H = 2, 4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scores(q, k):
    return jnp.einsum("bqhd,bkhd->bhqk", q, k)


def attend(p, v):
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def causal_mask(s, offset=0):
    return jnp.tril(jnp.ones(s.shape[-2:], bool), k=offset)


def attention(q, k, v, *, scale="multiply", causal=False, offset=None, axis=-1):
    """softmax(scale Q K^T [masked]) V as people write it; `scale`: None, "multiply" or "divide"."""
    s = scores(q, k)
    d = q.shape[-1]
    if scale == "multiply":
        s = s * (1.0 / math.sqrt(d))
    elif scale == "divide":
        s = s / math.sqrt(d)
    if causal:
        if offset is None:
            offset = k.shape[1] - q.shape[1]
        s = jnp.where(causal_mask(s, offset), s, -jnp.inf)
    return attend(jax.nn.softmax(s, axis=axis), v)


def fwd_bwd(**options):
    def f(q, k, v, do):
        o, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, **options), q, k, v)
        return (o, *vjp(do))
    return f


def layer_norm(x, gamma, beta):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta


def transformer_block(x, gamma1, beta1, wqkv, wo, gamma2, beta2, w1, w2):
    """Pre-norm block: x + Wo attn(LN x), then + W2 gelu(W1 LN x); 4 heads of 64, causal."""
    b, s, dm = x.shape
    qkv = layer_norm(x, gamma1, beta1) @ wqkv
    q, k, v = (t.reshape(b, s, H, dm // H) for t in jnp.split(qkv, 3, axis=-1))
    x = x + attention(q, k, v, causal=True).reshape(b, s, dm) @ wo
    return x + jax.nn.gelu(layer_norm(x, gamma2, beta2) @ w1, approximate=True) @ w2


def composite_attention(q, k, v):
    fn = jax.lax.composite(lambda q, k, v, *, causal, scale: attention(q, k, v, causal=causal),
                           name="tessera.attention")
    return fn(q, k, v, causal=True, scale=1.0 / math.sqrt(q.shape[-1]))


def scale_argument(q, k, v, scale):
    return attend(jax.nn.softmax(scores(q, k) * scale, axis=-1), v)


def p_escapes(q, k, v):
    p = jax.nn.softmax(scores(q, k) * (1.0 / math.sqrt(q.shape[-1])), axis=-1)
    return attend(p, v), p


def with_bias(q, k, v, bias):
    s = scores(q, k) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return attend(jax.nn.softmax(s, axis=-1), v)


def boolean_mask(q, k, v, mask):
    s = jnp.where(mask, scores(q, k) * (1.0 / math.sqrt(q.shape[-1])), -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1), v)


def dropout(q, k, v, key):
    p = jax.nn.softmax(scores(q, k) * (1.0 / math.sqrt(q.shape[-1])), axis=-1)
    keep = jax.random.bernoulli(key, 0.9, p.shape)
    return attend(jnp.where(keep, p / 0.9, 0), v)


def backward_of_scale_argument(q, k, v, do, scale):
    o, vjp = jax.vjp(lambda q, k, v: scale_argument(q, k, v, scale), q, k, v)
    return (o, *vjp(do))


def bf16(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.bfloat16)


def qkv(sq, d, sk=None, extra=()):
    sk = sq if sk is None else sk
    return (bf16(B, sq, H, d), bf16(B, sk, H, d), bf16(B, sk, H, d), *extra)


FIXTURES = {
    # name: (function, argument shapes, what the matcher must do)
    "fwd_plain_s256_d64": (lambda q, k, v: attention(q, k, v, scale=None), qkv(256, 64),
                           "forward, no scale: one tessera.attention (scale 1)"),
    "fwd_divide_s1000_d128": (lambda q, k, v: attention(q, k, v, scale="divide"), qkv(1000, 128),
                              "forward, S / sqrt(d): one tessera.attention"),
    "fwd_multiply_s256_d128": (lambda q, k, v: attention(q, k, v), qkv(256, 128),
                               "forward, S * (1/sqrt(d)): one tessera.attention"),
    "fwd_causal_s1000_d64": (lambda q, k, v: attention(q, k, v, causal=True), qkv(1000, 64),
                             "forward, causal (tril, offset 0): one causal tessera.attention"),
    "fwd_causal_q256_k1000_d64": (lambda q, k, v: attention(q, k, v, causal=True), qkv(256, 64, 1000),
                                  "forward, causal with offset seq_k - seq_q = 744 (bottom-right): one causal "
                                  "tessera.attention"),
    "fwd_bias_s256_d64": (with_bias, qkv(256, 64, extra=(bf16(B, H, 256, 256),)),
                          "forward with an additive bias: one tessera.attention with the bias as its fourth operand"),
    "fwd_bwd_causal_s256_d64": (fwd_bwd(causal=True), qkv(256, 64, extra=(bf16(B, 256, H, 64),)),
                                "jax.vjp of causal attention: six dot_generals become one tessera.attention and "
                                "one tessera.attention_bwd"),
    "block_s256_d64": (transformer_block, (bf16(B, 256, 256), bf16(256), bf16(256), bf16(256, 768), bf16(256, 256),
                                           bf16(256), bf16(256), bf16(256, 1024), bf16(1024, 256)),
                       "transformer block (layernorm, causal attention, MLP): only the attention is replaced"),
    "composite_s256_d128": (composite_attention, qkv(256, 128),
                            "jax.lax.composite('tessera.attention'): replaced without pattern matching"),
    "neg_softmax_axis_s256_d64": (lambda q, k, v: attention(q, k, v, axis=-2), qkv(256, 64),
                                  "softmax over the query axis: not attention"),
    "neg_p_escapes_s256_d64": (p_escapes, qkv(256, 64), "P is also returned: the kernel never materialises P"),
    "neg_scale_argument_s256_d64": (scale_argument, qkv(256, 64, extra=(bf16(),)), "the scale is an argument"),
    "neg_head_dim_s256_d80": (lambda q, k, v: attention(q, k, v), qkv(256, 80), "head_dim 80: no kernel"),
    "neg_boolean_mask_s256_d64": (boolean_mask, qkv(256, 64, extra=(jax.ShapeDtypeStruct((256, 256), jnp.bool_),)),
                                  "a boolean mask given as data: not causal"),
    "neg_causal_offset_s256_d64": (lambda q, k, v: attention(q, k, v, causal=True, offset=-1), qkv(256, 64),
                                   "tril with offset -1: not Tessera's bottom-right causal mask"),
    "neg_bwd_forward_refused_s256_d64": (
        backward_of_scale_argument, qkv(256, 64, extra=(bf16(B, 256, H, 64), bf16())),
        "the backward of an attention whose forward is refused (scale argument): left alone"),
    "neg_dropout_s256_d64": (dropout, qkv(256, 64, extra=(jax.ShapeDtypeStruct((2,), jnp.uint32),)),
                             "dropout on P: matched, not rewritten"),
}


# region Unseen forms (tests/rewriter/unseen/): attention as JAX users write it, beyond the forms above


def dot_product_attention(extra=(), **options):
    """jax.nn.dot_product_attention (implementation None or "xla": the only ones that export on the CPU);
    `extra` names the keyword arguments (bias, mask) the fixture's further arguments are."""
    def f(q, k, v, *values):
        return jax.nn.dot_product_attention(q, k, v, **dict(zip(extra, values)), **options)
    return f


def added_mask_attention(q, k, v, *, alibi=False, window=None):
    """softmax(S * scale [+ ALiBi] + where(visible, 0, -1e9)) V: the mask added, causal or a band of `window`."""
    s = scores(q, k) * (1.0 / math.sqrt(q.shape[-1]))
    sq, sk = s.shape[-2:]
    if alibi:
        slopes = 2.0 ** -jnp.arange(1, H + 1)
        distance = jnp.arange(sk)[None, :] - jnp.arange(sq)[:, None]
        s = s + (slopes[:, None, None] * distance[None]).astype(s.dtype)
    visible = jnp.tril(jnp.ones((sq, sk), bool), k=sk - sq)
    if window is not None:
        visible &= ~jnp.tril(jnp.ones((sq, sk), bool), k=sk - sq - window)
    s = s + jnp.where(visible, 0.0, -1e9).astype(s.dtype)
    return attend(jax.nn.softmax(s, axis=-1), v)


def flax_attention(q, k, v, *, scale_on_q=False, fill="-inf", layout="bqhd", by_hand=False):
    """Flax's habits: the scale on Q before the product, jnp.finfo(dtype).min as the fill, 'bhqd' einsums,
    the softmax by hand (exp(x - max) / sum); causal (jnp.tril)."""
    d = q.shape[-1]
    if scale_on_q:
        q = q / jnp.sqrt(d).astype(q.dtype)
    if layout == "bhqd":
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    else:
        s = scores(q, k)
    if not scale_on_q:
        s = s / math.sqrt(d)
    s = jnp.where(causal_mask(s), s, jnp.finfo(s.dtype).min if fill == "finfo" else -jnp.inf)
    if by_hand:
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = e / jnp.sum(e, axis=-1, keepdims=True)
    else:
        p = jax.nn.softmax(s, axis=-1)
    if layout == "bhqd":
        return jnp.einsum("bhqk,bhkd->bhqd", p, v)
    return attend(p, v)


def gqa_repeat(q, k, v):
    """Grouped-query attention with K and V heads repeated to Q's (jnp.repeat): rank-4 products."""
    groups = q.shape[2] // k.shape[2]
    return attention(q, jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2))


def gqa_groups(q, k, v):
    """Grouped-query attention with Q reshaped to [batch, seq, kv_heads, groups, head_dim]: rank-5 products."""
    b, t, n, d = q.shape
    kh = k.shape[2]
    s = jnp.einsum("btkgd,bskd->bkgts", q.reshape(b, t, kh, n // kh, d), k) / math.sqrt(d)
    return jnp.einsum("bkgts,bskd->btkgd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, n, d)


def chained_bhqd(q, k, v, k2, v2):
    """Two causal attentions in 'bhqd' einsums, the second's Q the first's output as it is (no transpose between
    the first's P.V and the second's Q.K^T)."""
    def attention_bhqd(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        s = jnp.where(causal_mask(s), s, -jnp.inf)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
    return attention_bhqd(attention_bhqd(q, k, v), k2, v2)


def grad_of_chained_bhqd(q, k, v, k2, v2):
    loss = lambda *values: jnp.sum(chained_bhqd(*values).astype(jnp.float32) ** 2)
    return jax.grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, k2, v2)


def project(x, wqkv):
    b, s, dm = x.shape
    return (t.reshape(b, s, H, dm // H) for t in jnp.split(x @ wqkv, 3, axis=-1))


def two_layers(x, wqkv1, wo1, wqkv2, wo2):
    """Two causal self-attention layers, one after the other."""
    for wqkv, wo in ((wqkv1, wo1), (wqkv2, wo2)):
        x = x + attention(*project(x, wqkv), causal=True).reshape(x.shape) @ wo
    return x


def scanned_layers(x, wqkv, wo):
    """The same layers under jax.lax.scan: the attention is in the body of a stablehlo.while."""
    def layer(x, w):
        return x + attention(*project(x, w[0]), causal=True).reshape(x.shape) @ w[1], None
    return jax.lax.scan(layer, x, (wqkv, wo))[0]


def grad_of_loss(**options):
    """jax.grad of sum(attention(q, k, v)^2) with respect to Q, K and V."""
    def f(q, k, v):
        loss = lambda q, k, v: jnp.sum(added_mask_attention(q, k, v, **options).astype(jnp.float32) ** 2)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    return f


def grad_of(attention_fn):
    """jax.grad of sum(attention_fn(q, k, v)^2) with respect to Q, K and V."""
    def f(q, k, v):
        loss = lambda q, k, v: jnp.sum(attention_fn(q, k, v).astype(jnp.float32) ** 2)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    return f


S = 128
UNSEEN = {
    "fwd_dpa_s128_d64": (dot_product_attention(), qkv(S, 64),
                         "jax.nn.dot_product_attention: one tessera.attention (rank-5 [batch, kv_heads, groups] "
                         "products, transposed scores)"),
    "fwd_dpa_causal_s128_d64": (dot_product_attention(is_causal=True), qkv(S, 64),
                                "jax.nn.dot_product_attention(is_causal=True): one causal tessera.attention"),
    "fwd_dpa_bias_s128_d64": (dot_product_attention(implementation="xla", extra=("bias",)),
                              qkv(S, 64, extra=(bf16(B, H, S, S),)),
                              "jax.nn.dot_product_attention(bias=, implementation='xla'): one tessera.attention "
                              "with the bias operand"),
    "fwd_dpa_gqa_causal_s128_d64": (dot_product_attention(is_causal=True),
                                    (bf16(B, S, H, 64), bf16(B, S, 2, 64), bf16(B, S, 2, 64)),
                                    "jax.nn.dot_product_attention(is_causal=True) with 2 K/V heads (GQA): one "
                                    "causal tessera.attention, K and V repeated over the groups"),
    "fwd_dpa_gqa_bias_s128_d64": (dot_product_attention(extra=("bias",)),
                                  (bf16(B, S, H, 64), bf16(B, S, 2, 64), bf16(B, S, 2, 64), bf16(1, H, S, S)),
                                  "jax.nn.dot_product_attention(bias=) with 2 K/V heads and a bias broadcast over "
                                  "the batch: one tessera.attention with the bias operand"),
    "neg_dpa_mask_s128_d64": (dot_product_attention(extra=("mask",)), qkv(S, 64, extra=(jax.ShapeDtypeStruct(
                                  (B, H, S, S), jnp.bool_),)),
                              "jax.nn.dot_product_attention(mask=) given as data: a near miss (a causal mask is "
                              "computed from iota and constants)"),
    "neg_dpa_grad_s128_d64": (grad_of(dot_product_attention(is_causal=True)), qkv(S, 64),
                              "jax.grad through jax.nn.dot_product_attention(is_causal=True): a near miss (its "
                              "backward's products are rank 5)"),
    "fwd_added_mask_q64_k128_d64": (added_mask_attention, qkv(64, 64, S),
                                    "s + where(tril, 0, -1e9), seq_q 64 < seq_k 128: one causal tessera.attention"),
    "fwd_added_window_s128_d64": (lambda q, k, v: added_mask_attention(q, k, v, window=16), qkv(S, 64),
                                  "an added band mask (16 keys): not causal, so rewritten as the bias it is"),
    "fwd_alibi_causal_s128_d64": (lambda q, k, v: added_mask_attention(q, k, v, alibi=True), qkv(S, 64),
                                  "ALiBi computed from iota plus an added causal mask: causal, with a bias"),
    "fwd_flax_scale_q_s128_d64": (lambda q, k, v: flax_attention(q, k, v, scale_on_q=True), qkv(S, 64),
                                  "q / sqrt(d) before the product, causal: one causal tessera.attention, scale 1"),
    "fwd_flax_bhqd_finfo_s128_d64": (lambda q, k, v: flax_attention(q, k, v, fill="finfo", layout="bhqd",
                                                                   by_hand=True), qkv(S, 64),
                                     "'bhqd' einsums, jnp.finfo(bf16).min fill, softmax by hand: causal"),
    "fwd_gqa_repeat_s128_d64": (gqa_repeat, (bf16(B, S, H, 64), bf16(B, S, 2, 64), bf16(B, S, 2, 64)),
                                "GQA by jnp.repeat of 2 K/V heads: one tessera.attention over the repeated heads"),
    "fwd_gqa_groups_s128_d64": (gqa_groups, (bf16(B, S, H, 64), bf16(B, S, 2, 64), bf16(B, S, 2, 64)),
                                "GQA with Q reshaped to groups: one tessera.attention, K and V repeated over the "
                                "groups"),
    "neg_f32_s128_d64": (lambda q, k, v: attention(q, k, v, causal=True),
                         tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in qkv(S, 64)),
                         "float32 attention: a near miss (the kernels take bf16 or f16)"),
    "two_layers_s128_d64": (two_layers, (bf16(B, S, 256), bf16(256, 768), bf16(256, 256), bf16(256, 768),
                                         bf16(256, 256)),
                            "two causal attention layers: two tessera.attention"),
    "neg_scan_layers_s128_d64": (scanned_layers, (bf16(B, S, 256), bf16(2, 256, 768), bf16(2, 256, 256)),
                             "layers under jax.lax.scan: a near miss inside the while body"),
    "bwd_grad_added_mask_s128_d64": (grad_of_loss(), qkv(S, 64),
                                     "jax.grad through an added causal mask: tessera.attention and attention_bwd"),
    "fwd_chained_bhqd_s128_d64": (chained_bhqd, (bf16(B, H, S, 64),) * 5,
                                  "two causal attentions chained in 'bhqd' einsums (the second's Q the first's "
                                  "output): two tessera.attention, the second reading the first"),
    "bwd_grad_chained_bhqd_s128_d64": (grad_of_chained_bhqd, (bf16(B, H, S, 64),) * 5,
                                       "jax.grad through the two chained attentions: two tessera.attention and two "
                                       "attention_bwd"),
}
FIXTURES.update({f"unseen/{name}": entry for name, entry in UNSEEN.items()})

# endregion


# region Round 8 (tests/rewriter/unseen14/): Flax's modules, dot_product_attention's options, soft-capping, MQA,
# cross-attention, vmap, f32 softmaxes of bf16 scores, masks from iota, grads through each, dropout's rng


def f16(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float16)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def for_gpu(fn):
    """`fn` exported as for a GPU (f16 products with an f32 accumulation, which the CPU refuses to lower)."""
    fn.platforms = ("cuda",)
    return fn


def shapes_of(tree):
    """ShapeDtypeStructs of a pytree of arrays (a Flax module's parameters as the function's arguments)."""
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def linen_mha(causal=True, dropout=0.0, fp32_softmax=False):
    """flax.linen.MultiHeadDotProductAttention (bf16, 4 heads of 64) with its projections, self-attention over
    x [B, S, 256]; the causal mask by nn.make_causal_mask; dropout (deterministic=False) draws from an rng key."""
    import flax.linen as nn

    model = nn.MultiHeadDotProductAttention(num_heads=H, qkv_features=256, dtype=jnp.bfloat16,
                                            param_dtype=jnp.bfloat16, dropout_rate=dropout,
                                            deterministic=dropout == 0.0, force_fp32_for_softmax=fp32_softmax)
    x = jnp.zeros((B, S, 256), jnp.bfloat16)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x))

    def f(params, x):
        mask = nn.make_causal_mask(x[..., 0]) if causal else None
        rngs = {"dropout": jax.random.PRNGKey(7)} if dropout else None
        return model.apply(params, x, mask=mask, rngs=rngs)
    return f, (shapes_of(params), bf16(B, S, 256))


def grad_of_linen(causal=True, fp32_softmax=False):
    """jax.grad of sum(MHA(x)^2) with respect to the parameters and x."""
    f, shapes = linen_mha(causal, fp32_softmax=fp32_softmax)

    def g(params, x):
        return jax.grad(lambda p, x: jnp.sum(f(p, x).astype(jnp.float32) ** 2), argnums=(0, 1))(params, x)
    return g, shapes


def nnx_mha(causal=True, sq=S, sk=S):
    """flax.nnx.MultiHeadAttention (bf16, 4 heads of 64): self-attention (causal by nnx.make_causal_mask) or
    cross-attention of x [B, sq, 256] over y [B, sk, 256]; the parameters are the function's arguments."""
    from flax import nnx

    model = nnx.MultiHeadAttention(num_heads=H, in_features=256, qkv_features=256, dtype=jnp.bfloat16,
                                   param_dtype=jnp.bfloat16, decode=False, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    def f(state, x, y):
        module = nnx.merge(graphdef, state)
        if sq == sk and causal:
            return module(x, mask=nnx.make_causal_mask(x[..., 0]))
        return module(x, y, y)
    return f, (shapes_of(state), bf16(B, sq, 256), bf16(B, sk, 256))


def softcapped(q, k, v, cap=50.0):
    """Gemma 2's logit soft-capping, cap * tanh(s / cap), before the causal softmax."""
    s = scores(q, k) / math.sqrt(q.shape[-1])
    s = cap * jnp.tanh(s / cap)
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1), v)


def alibi_select(q, k, v):
    """ALiBi with slopes 2^(-8 (h+1) / H) built in the graph, causal by jnp.where(tril, s, -inf)."""
    s = scores(q, k) / math.sqrt(q.shape[-1])
    sq, sk = s.shape[-2:]
    slopes = jnp.exp2(-8.0 * jnp.arange(1, H + 1) / H)
    distance = (jnp.arange(sk)[None, :] - jnp.arange(sq)[:, None]).astype(jnp.float32)
    s = s + (slopes[:, None, None] * distance).astype(s.dtype)
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1), v)


def f32_softmax(q, k, v, causal=True):
    """Scores in bf16, the softmax in float32 (s.astype(f32) ... .astype(bf16)), causal by iota compares."""
    s = scores(q, k) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        sq, sk = s.shape[-2:]
        visible = jax.lax.broadcasted_iota(jnp.int32, (sq, sk), 0) + (sk - sq) >= \
            jax.lax.broadcasted_iota(jnp.int32, (sq, sk), 1)
        s = jnp.where(visible, s, jnp.finfo(s.dtype).min)
    return attend(jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(q.dtype), v)


def per_example(q, k, v):
    """Attention of one example, [seq, heads, head_dim], causal by iota compares; `vmapped` maps it over the
    batch."""
    s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    i, j = jnp.arange(s.shape[-2])[:, None], jnp.arange(s.shape[-1])[None, :]
    s = jnp.where(j <= i + (s.shape[-1] - s.shape[-2]), s, -jnp.inf)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)


vmapped = jax.vmap(per_example)


def mqa_repeat(q, k, v):
    """Multi-query attention: one K/V head repeated to every query head, causal."""
    return attention(q, jnp.repeat(k, q.shape[2], axis=2), jnp.repeat(v, q.shape[2], axis=2), causal=True)


def f32_products(q, k, v):
    """Both products accumulated and returned in float32 (einsum's preferred_element_type), the softmax in
    float32, P rounded to bf16 for P.V; causal."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(q.shape[-1])
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v, preferred_element_type=jnp.float32)


def f32_scores(q, k, v):
    """Q and K converted to float32 for the scores, the softmax in float32, P cast back to bf16 for P.V; causal."""
    s = scores(q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1).astype(q.dtype), v)


def f32_pv(q, k, v):
    """Both products and the softmax in float32 (Q, K, V converted), the output kept in float32."""
    s = scores(q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(q.shape[-1])
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1), v.astype(jnp.float32))


def sqrt_scale(q, k, v, *, rsqrt=False):
    """The scale computed in the graph: s / jnp.sqrt(d) (causal) or s * lax.rsqrt(jnp.float32(d))."""
    s = scores(q, k)
    if rsqrt:
        s = s * jax.lax.rsqrt(jnp.float32(q.shape[-1])).astype(s.dtype)
    else:
        s = jnp.where(causal_mask(s), s / jnp.sqrt(q.shape[-1]), -jnp.inf)
    return attend(jax.nn.softmax(s, axis=-1), v)


def alibi_dot_product_attention(q, k, v):
    """ALiBi built in the graph in float32, cast to bf16 and given to jax.nn.dot_product_attention(bias=,
    is_causal=True), which adds it to float32 scores."""
    slopes = 2.0 ** -jnp.arange(1, H + 1, dtype=jnp.float32)
    distance = (jnp.arange(k.shape[1])[None, :] - jnp.arange(q.shape[1])[:, None]).astype(jnp.float32)
    bias = (slopes[:, None, None] * distance)[None].astype(q.dtype)
    return jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True)


def softmax_where(q, k, v, *, after=False):
    """Causal by jax.nn.softmax(s, where=tril) (a masked max and sum, P zeroed after), or, `after`, by
    jnp.where(tril, softmax(s), 0): P zeroed after an unmasked softmax (not attention: rows do not sum to 1)."""
    s = scores(q, k) / math.sqrt(q.shape[-1])
    if after:
        return attend(jnp.where(causal_mask(s), jax.nn.softmax(s, axis=-1), 0), v)
    return attend(jax.nn.softmax(s, axis=-1, where=causal_mask(s)), v)


def single_head(q, k, v, *values):
    """One head, [batch, seq, head_dim], by matmul: softmax(q @ k.swapaxes(-1, -2) / sqrt(d) [+ bias]) @ v,
    causal by jnp.tril (without a bias)."""
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if values:
        s = s + values[0]
    else:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


def logsumexp_softmax(q, k, v):
    """The softmax as exp(s - logsumexp(s)) (jax.scipy.special.logsumexp), causal."""
    s = scores(q, k) / math.sqrt(q.shape[-1])
    s = jnp.where(causal_mask(s), s, -jnp.inf)
    return attend(jnp.exp(s - jax.scipy.special.logsumexp(s, axis=-1, keepdims=True)), v)


UNSEEN14 = {
    "fwd_linen_mha_causal_s128_d64": (*linen_mha(), "flax.linen.MultiHeadDotProductAttention (bf16) with its "
                                      "projections, nn.make_causal_mask: one causal tessera.attention"),
    "fwd_linen_mha_fp32_softmax_s128_d64": (*linen_mha(fp32_softmax=True), "linen MHA, force_fp32_for_softmax: "
                                            "the softmax in float32, P.V in float32 (V converted)"),
    "bwd_grad_linen_mha_s128_d64": (*grad_of_linen(), "jax.grad through linen MHA (parameters and x): "
                                    "tessera.attention and attention_bwd"),
    "bwd_grad_linen_fp32_softmax_s128_d64": (*grad_of_linen(fp32_softmax=True), "jax.grad through linen MHA "
                                             "with force_fp32_for_softmax"),
    "fwd_f32_products_s128_d64": (f32_products, qkv(S, 64), "both products in float32 "
                                  "(preferred_element_type), P rounded to bf16: causal, the output converted"),
    "bwd_grad_f32_products_s128_d64": (grad_of(f32_products), qkv(S, 64), "jax.grad through the float32 "
                                       "products: dO arrives in float32"),
    "fwd_f32_scores_s128_d64": (f32_scores, qkv(S, 64), "Q and K converted to float32 for the scores, P cast back "
                                "to bf16: Q and K read before their converts"),
    "bwd_grad_f32_scores_s128_d64": (grad_of(f32_scores), qkv(S, 64), "jax.grad through the float32 scores"),
    "neg_f32_pv_s128_d64": (f32_pv, qkv(S, 64), "Q, K, V converted to float32 for both products, the output kept "
                            "in float32: a near miss (the kernels write bf16)"),
    "fwd_sqrt_scale_s128_d64": (sqrt_scale, qkv(S, 64), "s / jnp.sqrt(d) (a sqrt of a constant in the graph), "
                                "causal"),
    "bwd_grad_rsqrt_scale_s128_d64": (grad_of(lambda q, k, v: sqrt_scale(q, k, v, rsqrt=True)), qkv(S, 64),
                                      "jax.grad through s * lax.rsqrt(jnp.float32(d))"),
    "fwd_dpa_alibi_bias_s128_d64": (alibi_dot_product_attention, qkv(S, 64), "ALiBi built in float32, cast to bf16, "
                                    "as jax.nn.dot_product_attention's bias (causal)"),
    "neg_dpa_f32_bias_s128_d64": (dot_product_attention(extra=("bias",)), qkv(S, 64, extra=(f32(B, H, S, S),)),
                                  "jax.nn.dot_product_attention(bias=) with a float32 bias added to its float32 "
                                  "scores: a near miss (the kernel reads a bias in Q's type)"),
    "fwd_softmax_where_s128_d64": (softmax_where, qkv(S, 64), "jax.nn.softmax(s, where=tril): a masked max, sum "
                                   "and output, the input masked with -inf: one causal tessera.attention"),
    "neg_grad_softmax_where_s128_d64": (grad_of(softmax_where), qkv(S, 64), "jax.grad through "
                                        "jax.nn.softmax(s, where=tril): a near miss (its gradient masks with selects "
                                        "the backward matcher does not take)"),
    "neg_mask_after_softmax_s128_d64": (lambda q, k, v: softmax_where(q, k, v, after=True), qkv(S, 64),
                                        "where(tril, softmax(s), 0): a near miss, a mask after the softmax (not "
                                        "dropout)"),
    "fwd_single_head_s128_d64": (single_head, (bf16(8, S, 64),) * 3, "one head by matmul, [batch, seq, head_dim] "
                                 "(one batching dimension), causal"),
    "fwd_single_head_bias_s128_d64": (single_head, (bf16(8, S, 64),) * 3 + (bf16(S, S),),
                                      "one head by matmul with a bias [seq, seq] broadcast over the batch"),
    "bwd_grad_single_head_s128_d64": (grad_of(single_head), (bf16(8, S, 64),) * 3,
                                      "jax.grad through one head by matmul: tessera.attention and attention_bwd"),
    "neg_logsumexp_softmax_s128_d64": (logsumexp_softmax, qkv(S, 64), "exp(s - logsumexp(s)): a near miss naming "
                                       "it (it was reported as nothing)"),
    "neg_linen_dropout_s128_d64": (*linen_mha(dropout=0.1), "linen MHA with dropout_rate 0.1 (an rng key in "
                                   "the graph): matched, not rewritten"),
    "fwd_nnx_mha_causal_s128_d64": (*nnx_mha(), "flax.nnx.MultiHeadAttention (bf16), nnx.make_causal_mask: one "
                                    "causal tessera.attention"),
    "fwd_nnx_cross_q64_k192_d64": (*nnx_mha(sq=64, sk=192), "nnx.MultiHeadAttention as cross-attention, 64 "
                                   "queries over 192 keys: one tessera.attention"),
    "fwd_dpa_scale_f16_s128_d64": (for_gpu(dot_product_attention(scale=0.5, is_causal=True)),
                                   tuple(f16(*x.shape) for x in qkv(S, 64)),
                                   "jax.nn.dot_product_attention(scale=0.5, is_causal=True) in f16, exported for a GPU"),
    "fwd_dpa_window_s128_d64": (dot_product_attention(local_window_size=(S, 0)), qkv(S, 64),
                                "jax.nn.dot_product_attention(local_window_size=(128, 0)): the window is the "
                                "causal mask"),
    "neg_dpa_window_s128_d64": (dot_product_attention(is_causal=True, local_window_size=(16, 0)), qkv(S, 64),
                                "jax.nn.dot_product_attention(is_causal=True, local_window_size=(16, 0)): a "
                                "band, not causal: a near miss"),
    "neg_dpa_seq_lengths_s128_d64": (dot_product_attention(extra=("query_seq_lengths", "key_value_seq_lengths")),
                                     qkv(S, 64, extra=(jax.ShapeDtypeStruct((B,), jnp.int32),) * 2),
                                     "jax.nn.dot_product_attention with query and key lengths (data): a near miss"),
    "neg_dpa_causal_q64_k128_d64": (dot_product_attention(is_causal=True), qkv(64, 64, S),
                                    "jax.nn.dot_product_attention(is_causal=True) with seq_q < seq_k: top-left "
                                    "causal, not Tessera's bottom-right: a near miss"),
    "neg_dpa_f32_s128_d64": (dot_product_attention(is_causal=True), tuple(f32(*x.shape) for x in qkv(S, 64)),
                             "jax.nn.dot_product_attention in float32: a near miss"),
    "fwd_dpa_mqa_s128_d64": (dot_product_attention(is_causal=True),
                             (bf16(B, S, H, 64), bf16(B, S, 1, 64), bf16(B, S, 1, 64)),
                             "jax.nn.dot_product_attention(is_causal=True) with one K/V head (MQA)"),
    "fwd_mqa_repeat_s128_d64": (mqa_repeat, (bf16(B, S, H, 64), bf16(B, S, 1, 64), bf16(B, S, 1, 64)),
                                "MQA by jnp.repeat of one K/V head, causal"),
    "bwd_grad_mqa_repeat_s128_d64": (grad_of(mqa_repeat), (bf16(B, S, H, 64), bf16(B, S, 1, 64),
                                                            bf16(B, S, 1, 64)),
                                     "jax.grad through MQA by jnp.repeat: dK and dV summed over the repeats"),
    "fwd_cross_q64_k192_d128": (lambda q, k, v: attention(q, k, v), qkv(64, 128, 192),
                                "cross-attention, 64 queries over 192 keys, head_dim 128"),
    "bwd_grad_cross_q64_k192_d64": (grad_of(lambda q, k, v: attention(q, k, v)), qkv(64, 64, 192),
                                    "jax.grad through cross-attention (64 queries, 192 keys)"),
    "neg_softcap_s128_d64": (softcapped, qkv(S, 64), "Gemma 2's soft-capping, 50 tanh(s / 50): a near miss"),
    "neg_grad_softcap_s128_d64": (grad_of(softcapped), qkv(S, 64), "jax.grad through soft-capping: near misses"),
    "fwd_alibi_select_s128_d64": (alibi_select, qkv(S, 64), "ALiBi with exp2 slopes built in the graph, causal "
                                  "by where(tril, s, -inf): causal, with the bias operand"),
    "fwd_f32_softmax_iota_s128_d64": (f32_softmax, qkv(S, 64), "bf16 scores, the softmax in float32, causal by "
                                      "broadcasted_iota compares and a finfo(bf16).min fill"),
    "bwd_grad_f32_softmax_s128_d64": (grad_of(f32_softmax), qkv(S, 64), "jax.grad through the float32 softmax"),
    "fwd_vmap_s128_d64": (vmapped, qkv(S, 64), "jax.vmap over the batch of attention written per example"),
    "bwd_grad_vmap_s128_d64": (grad_of(vmapped), qkv(S, 64), "jax.grad through the vmapped attention"),
    "fwd_f16_tril_s128_d128": (lambda q, k, v: attention(q, k, v, causal=True),
                               tuple(f16(*x.shape) for x in qkv(S, 128)), "f16 causal by jnp.tril, head_dim 128"),
    "bwd_grad_f16_s128_d64": (grad_of(lambda q, k, v: attention(q, k, v, causal=True)),
                              tuple(f16(*x.shape) for x in qkv(S, 64)), "jax.grad through f16 causal attention"),
}
FIXTURES.update({f"unseen14/{name}": entry for name, entry in UNSEEN14.items()})

# endregion


def export(fn, shapes) -> str:
    traced = jax.jit(fn).trace(*shapes)
    platforms = getattr(fn, "platforms", None)
    lowered = traced.lower(lowering_platforms=platforms) if platforms else traced.lower()
    module = lowered.compiler_ir("stablehlo")
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
    return re.sub(re.escape(ROOT + os.sep), "", text)


def write_fixtures(fixtures: dict, default_out: str, script: str) -> None:
    """The command line of a fixture script: export each of `fixtures` (name -> (function, shapes, what it is))
    named on the command line (all when none) into --out (default `default_out`) as NAME.mlir, headed by the
    script's name, JAX's version and what the fixture is."""
    parser = argparse.ArgumentParser(description=f"Export the StableHLO fixtures of {script}.")
    parser.add_argument("--out", default=default_out)
    parser.add_argument("names", nargs="*", help="only these fixtures")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, (fn, shapes, what) in fixtures.items():
        if args.names and name not in args.names:
            continue
        text = export(fn, shapes)
        header = (f"// Generated by {script} with jax {jax.__version__}: do not edit.\n"
                  f"// {name}: {what}.\n")
        path = os.path.join(args.out, f"{name}.mlir")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(header + text)
        print(f"{path}: {len(text)} bytes")


def main() -> None:
    write_fixtures(FIXTURES, os.path.join(ROOT, "tests", "rewriter"), "bench/make_rewriter_fixtures.py")


if __name__ == "__main__":
    main()
