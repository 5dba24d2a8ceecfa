"""The attention rewriter on graphs JAX users write next, round 8 of the unseen cases (tests/rewriter/unseen14/,
exported by the `UNSEEN14` table of bench/make_rewriter_fixtures.py; the header of each file says what it is):
Flax's `linen.MultiHeadDotProductAttention` and `nnx.MultiHeadAttention` with their projections,
`jax.nn.dot_product_attention` with `scale=`, `local_window_size=` and sequence lengths, in f16 and f32, MQA,
cross-attention, `jax.vmap` over the batch, softmaxes in float32 of bf16 scores, masks from iota, `jax.grad`
through each, soft-capping, dropout and `jax.lax.scan`. Each is rewritten, or left alone with a near miss
naming its rule; seeded edits (a reduce over the queries, a negative scale, the scores transposed, the mask
turned upper-triangular) are refused. `-m slow`: each rewrite agrees with the original graph within the
tolerance (`tessera-run --compare`, about 2 s each).

Regressions:
- `tessera-run --compare` drew Flax's rank-3 DenseGeneral kernels ([in, heads, head_dim]) with variance 1, so a
  Flax layer's scores reached ~1e3, the softmax was one-hot and the comparison vacuous (errors of 1e8 within a
  tolerance of 3e8); weights of any rank are now drawn with variance 1/fan-in.
- a float32 P.V (V converted from bf16; Flax's `force_fp32_for_softmax`) was a near miss ("Q, K, V are bf16,
  f32"): V is read before the convert when the output is rounded back to bf16 after; a graph that keeps the
  float32 output of float32 products is refused (the kernels would lose its precision: 7e-3 against 3e-7).
- `jax.grad` through float32 products (`preferred_element_type=jnp.float32`) was a near miss: JAX converts dS
  and dO once for each product, and the backward matcher looked for one value; it follows the converts now, and
  gives the kernel dO in bf16.
"""

from __future__ import annotations

import numpy as np

from tessera.tools.tessera_opt import load_module, opt_context
from tessera.tools.tessera_run_graph import generate_inputs, weight_fan_in
from pathlib import Path

FIXTURES = Path(__file__).parent / "rewriter" / "unseen14"


def test_flax_weights_are_drawn_with_variance_one_over_fan_in():
    path = FIXTURES / "fwd_linen_mha_causal_s128_d64.mlir"
    module = load_module(opt_context(), path.read_text(), str(path))
    fan_in = weight_fan_in(module)
    inputs = generate_inputs(module, 0)
    shapes = {i: x.shape for i, x in enumerate(inputs)}
    # the q, k, v kernels [256, 4, 64] sum 256 inputs, the output kernel [4, 64, 256] 4 x 64
    assert sorted(shapes[i] for i in fan_in) == [(4, 64, 256), (256, 4, 64), (256, 4, 64), (256, 4, 64)]
    assert set(fan_in.values()) == {256}
    for i in fan_in:
        assert 0.8 < np.std(inputs[i]) * 16 < 1.2
    x = next(x for x in inputs if x.shape == (2, 128, 256))  # the activations stay standard normal
    assert 0.9 < np.std(x) < 1.1
