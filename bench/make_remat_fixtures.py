"""Export the rewriter's rematerialisation fixtures, tests/rewriter/remat/*.mlir, from JAX (needs `pip install
jax`; the tests that read the files do not).

    pip install jax && python bench/make_remat_fixtures.py [--out tests/rewriter/remat] [names...]

Training steps as JAX exports them when attention (or part of it) is under `jax.checkpoint` (`jax.remat`), with
or without a `jax.checkpoint_policies` policy: the backward recomputes what was not saved from the results of a
`stablehlo.optimization_barrier` (XLA's fence that keeps the recompute from being CSE'd with the forward). Printed
as `bench/make_rewriter_fixtures.py` prints its fixtures (generic form, debug info); bf16, batch 2, 4 heads, 64
queries and keys, head_dim 64 unless the name says otherwise.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp

from make_rewriter_fixtures import ROOT, attend, attention, bf16, layer_norm, scores, write_fixtures

S, D, B, H = 64, 64, 2, 4
POLICIES = jax.checkpoint_policies


def qkv(kv_heads=H, extra=()):
    return (bf16(B, S, H, D), bf16(B, S, kv_heads, D), bf16(B, S, kv_heads, D), *extra)


def square_loss(fn):
    """jax.grad of sum(fn(q, k, v, ...)^2) with respect to Q, K and V: the loss needs O, so the forward stays."""
    def f(q, k, v, *rest):
        loss = lambda q, k, v: jnp.sum(fn(q, k, v, *rest).astype(jnp.float32) ** 2)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
    return f


def linear_loss(fn):
    """jax.grad of sum(fn(q, k, v) * do): the gradient needs no O, so only the backward's recompute is left."""
    def f(q, k, v, do):
        return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) * do), argnums=(0, 1, 2))(q, k, v)
    return f


def vjp_of(fn):
    """(O, dQ, dK, dV) by jax.vjp: the forward and the backward's recompute both in the graph."""
    def f(q, k, v, do):
        o, vjp = jax.vjp(fn, q, k, v)
        return (o, *vjp(do))
    return f


def softmax_checkpointed(q, k, v):
    """jax.checkpoint around the softmax only: the backward recomputes P from the scores."""
    s = scores(q, k) * (1.0 / math.sqrt(q.shape[-1]))
    return attend(jax.checkpoint(lambda s: jax.nn.softmax(s, axis=-1))(s), v)


def biased(q, k, v, bias):
    s = scores(q, k) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return attend(jax.nn.softmax(s, axis=-1), v)


def gqa(q, k, v):
    groups = q.shape[2] // k.shape[2]
    return attention(q, jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2), causal=True)


def block(x, gamma, beta, wq, wk, wv, wo, w1, w2):
    """Pre-norm block: x + Wo attn(LN x), then + W2 gelu(W1 x); 4 heads of 64, causal. (Q, K and V by three
    projections: the gradient of one split projection is a `concatenate`, which the interpreter does not run.)"""
    b, s, dm = x.shape
    h = layer_norm(x, gamma, beta)
    q, k, v = ((h @ w).reshape(b, s, H, dm // H) for w in (wq, wk, wv))
    x = x + attention(q, k, v, causal=True).reshape(b, s, dm) @ wo
    return x + jax.nn.gelu(x @ w1, approximate=True) @ w2


def block_grad(policy=None):
    """jax.grad of a checkpointed block's sum(y^2) with respect to x and the weights: the barrier holds x and
    the weights, which the MLP's recompute reads too."""
    fn = jax.checkpoint(block, policy=policy)

    def f(*args):
        return jax.grad(lambda *a: jnp.sum(fn(*a).astype(jnp.float32) ** 2), argnums=(0, 3, 4, 5, 6, 7, 8))(*args)
    return f


def named_output(q, k, v):
    """Causal attention whose output is named for `save_only_these_names`."""
    from jax.ad_checkpoint import checkpoint_name

    return checkpoint_name(attention(q, k, v, causal=True), "attention_output")


def f32_softmax(q, k, v):
    """bf16 scores scaled and normalised in float32, P rounded back to bf16 for P V."""
    s = scores(q, k).astype(jnp.float32) * (1.0 / math.sqrt(q.shape[-1]))
    return attend(jax.nn.softmax(s, axis=-1).astype(q.dtype), v)


def chained(q, k, v):
    """Two causal attentions, the second's Q the first's output, under one jax.checkpoint."""
    return attention(attention(q, k, v, causal=True), k, v, causal=True)


def scanned(q, k, v):
    """jax.checkpoint'ed attention as the body of jax.lax.scan over a leading axis of layers."""
    def body(carry, x):
        return carry + attention(*x), None
    return jax.lax.scan(jax.checkpoint(body), jnp.zeros_like(q[0]), (q, k, v))[0]


def remat(fn, policy=None):
    return jax.checkpoint(fn, policy=policy)


BLOCK = (bf16(B, S, 256), bf16(256), bf16(256), *(bf16(256, 256),) * 4, bf16(256, 512), bf16(512, 256))
FIXTURES = {
    # name: (function, argument shapes, what the rewriter must do)
    "bwd_remat_grad_s64_d64": (square_loss(remat(attention)), qkv(),
                               "jax.grad through jax.checkpoint(attention): forward and backward rewritten"),
    "neg_remat_linear_causal_s64_d64": (
        linear_loss(remat(lambda q, k, v: attention(q, k, v, causal=True))), qkv(extra=(bf16(B, S, H, D),)),
        "jax.grad of a loss linear in O through checkpointed causal attention: no forward is left, only the "
        "backward's recompute from the barrier: a near miss (the backward kernel reads the forward's O)"),
    "bwd_remat_vjp_causal_s64_d64": (vjp_of(remat(lambda q, k, v: attention(q, k, v, causal=True))),
                                     qkv(extra=(bf16(B, S, H, D),)),
                                     "jax.vjp of jax.remat(causal attention): O and the gradients"),
    "bwd_remat_softmax_s64_d64": (square_loss(softmax_checkpointed), qkv(),
                                  "jax.checkpoint around the softmax only"),
    "bwd_remat_dots_saveable_s64_d64": (square_loss(remat(lambda q, k, v: attention(q, k, v, causal=True),
                                                          POLICIES.dots_saveable)), qkv(),
                                        "checkpoint_policies.dots_saveable: the scores saved, the softmax "
                                        "recomputed"),
    "bwd_remat_nothing_saveable_s64_d64": (square_loss(remat(attention, POLICIES.nothing_saveable)), qkv(),
                                           "checkpoint_policies.nothing_saveable"),
    "bwd_remat_gqa_s64_d64": (square_loss(remat(gqa)), qkv(kv_heads=2),
                              "GQA by jnp.repeat (2 kv heads) under jax.checkpoint, causal"),
    "bwd_remat_block_s64_d64": (block_grad(), BLOCK,
                                "jax.checkpoint around a transformer block: the barrier holds x and the weights, "
                                "which the MLP's recompute reads too (the barrier stays)"),
    "bwd_remat_block_policy_s64_d64": (block_grad(POLICIES.dots_with_no_batch_dims_saveable), BLOCK,
                                       "a checkpointed block saving its projections "
                                       "(dots_with_no_batch_dims_saveable): the attention is recomputed"),
    "bwd_remat_names_s64_d64": (square_loss(remat(named_output, POLICIES.save_only_these_names("attention_output"))),
                                qkv(), "checkpoint_policies.save_only_these_names with the output named by "
                                "checkpoint_name, causal"),
    "bwd_remat_everything_saveable_s64_d64": (square_loss(remat(attention, POLICIES.everything_saveable)), qkv(),
                                              "checkpoint_policies.everything_saveable: nothing recomputed, the "
                                              "barrier holds dO only"),
    "bwd_remat_offload_s64_d64": (square_loss(remat(attention, POLICIES.offload_dot_with_no_batch_dims(
        "device", "pinned_host"))), qkv(), "checkpoint_policies.offload_dot_with_no_batch_dims (the attention's "
                                  "products have batch dimensions: recomputed)"),
    "bwd_remat_f32_softmax_s64_d64": (square_loss(remat(f32_softmax)), qkv(),
                                      "jax.checkpoint around attention with a float32 softmax of bf16 scores"),
    "bwd_remat_chained_s64_d64": (square_loss(remat(chained)), qkv(), "two chained causal attentions (the second's Q "
                                  "the first's output) under one jax.checkpoint: two forwards, two backwards"),
    "neg_remat_no_cse_s64_d64": (square_loss(jax.checkpoint(attention, prevent_cse=False)), qkv(),
                                 "jax.checkpoint(prevent_cse=False): the recompute without a barrier, a second copy of "
                                 "the scores; the forward is rewritten, the backward a near miss that says so"),
    "neg_remat_scan_s64_d64": (square_loss(scanned), tuple(bf16(2, *x.shape) for x in qkv()),
                               "jax.checkpoint'ed attention in the body of jax.lax.scan: a near miss (only top-level "
                               "attention is rewritten)"),
    "neg_remat_bias_s64_d64": (square_loss(remat(biased)), qkv(extra=(bf16(B, H, S, S),)),
                               "jax.checkpoint around attention with a bias: the forward is rewritten, the "
                               "backward is a near miss (no backward kernel takes a bias)"),
    "neg_remat_dpa_s64_d64": (square_loss(remat(lambda q, k, v: jax.nn.dot_product_attention(q, k, v,
                                                                                             is_causal=True))),
                              qkv(), "jax.checkpoint around jax.nn.dot_product_attention: the backward's rank-5 "
                              "products are a near miss"),
}


def main() -> None:
    write_fixtures(FIXTURES, os.path.join(ROOT, "tests", "rewriter", "remat"), "bench/make_remat_fixtures.py")


if __name__ == "__main__":
    main()
