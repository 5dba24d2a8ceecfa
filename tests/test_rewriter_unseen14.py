"""The attention rewriter on graphs JAX users write next, round 8 of the unseen cases (tests/rewriter/unseen14/,
exported by the `UNSEEN14` table of bench/make_rewriter_fixtures.py; the header of each file says what it is):
Flax's `linen.MultiHeadDotProductAttention` and `nnx.MultiHeadAttention` with their projections,
`jax.nn.dot_product_attention` with `scale=`, `local_window_size=` and sequence lengths, in f16 and f32, MQA,
cross-attention, `jax.vmap` over the batch, softmaxes in float32 of bf16 scores, masks from iota, `jax.grad`
through each, soft-capping and dropout. Each is rewritten, or left alone with a near miss
naming its rule; seeded edits (a reduce over the queries, a negative scale, the scores transposed, the mask
turned upper-triangular) are refused. The default suite matches nineteen of the fixtures (`DEFAULT`, about 4 s);
`-m slow` matches the others and compares each rewrite with the original graph within the tolerance
(`tessera-run --compare`, about 2 s each).

Regressions:
- one head by matmul (`q @ k.swapaxes(-1, -2)` on [batch, seq, head_dim]: one batching dimension) was a near
  miss: it is rewritten with heads 1, and its backward too.
- `jax.nn.softmax(s, where=mask)` was reported as nothing at all: it is matched when the softmax's input is the
  scores masked with -inf by the mask its max, sum and output take (else a near miss that says so);
  exp(s - logsumexp(s)) was reported as nothing, and P zeroed by a mask after the softmax as "matched, not
  rewritten: dropout": each is a near miss that says what it is.
- a softmax's reduce over a dimension out of range (a seeded edit) crashed the pass; so did scores divided by 0,
  in the forward or the backward, and shapes or reduce bodies the interpreter cannot run in a mask or under dS
  (evaluated by the matcher): each is a near miss naming the op, but for reduces whose result shape contradicts
  their dimensions, which the reduce verifier refuses at their line (round 25).
- `tessera-run --compare` drew Flax's rank-3 DenseGeneral kernels ([in, heads, head_dim]) with variance 1, so a
  Flax layer's scores reached ~1e3, the softmax was one-hot and the comparison vacuous (errors of 1e8 within a
  tolerance of 3e8); weights of any rank are now drawn with variance 1/fan-in.
- a float32 P.V (V converted from bf16; Flax's `force_fp32_for_softmax`) or float32 scores (Q and K converted)
  were near misses ("Q, K, V are bf16, f32"): they are read before the convert when the output is bf16 or rounded
  back to bf16 after; a graph that keeps the
  float32 output of float32 products is refused (the kernels would lose its precision: 7e-3 against 3e-7).
- `s / jnp.sqrt(d)` and `s * lax.rsqrt(jnp.float32(d))` write the scale as a sqrt of a constant in the graph:
  a near miss, "the scale is not a constant: it is 'stablehlo.broadcast_in_dim'"; scalars computed from constants
  alone are folded now (rounded as the graph rounds them).
- ALiBi built in float32, cast to bf16 and given to `jax.nn.dot_product_attention(bias=)` (which converts it to
  its float32 scores' type) was a near miss, "the bias is f32": the bias was followed through the cast to bf16 to
  the float32 tensor before it; the walk stops at the cast now, and the kernel reads the bf16 bias.
- `jax.grad` through float32 products (`preferred_element_type=jnp.float32`) was a near miss: JAX converts dS
  and dO once for each product, and the backward matcher looked for one value; it follows the converts now, and
  gives the kernel dO in bf16.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tessera.tools import tessera_opt, tessera_run
from tessera.tools.tessera_opt import load_module, opt_context
from tessera.tools.tessera_run_graph import generate_inputs, weight_fan_in
from test_rewriter import bias_variant, ops_named, rewrite, rewrite_file
from test_rewriter_unseen import assert_edit_refused

FIXTURES = Path(__file__).parent / "rewriter" / "unseen14"
ALL = sorted(p.stem for p in FIXTURES.glob("*.mlir"))

# fixture: (forward ops, backward ops, causal, whether the op has a bias operand, dtype)
REWRITTEN = {
    "fwd_linen_mha_causal_s128_d64": (1, 0, True, False, "bf16"),
    # regression: P.V in float32 (V converted), the output rounded to bf16 after: V read before the convert
    "fwd_linen_mha_fp32_softmax_s128_d64": (1, 0, True, False, "bf16"),
    "bwd_grad_linen_mha_s128_d64": (1, 1, True, False, "bf16"),
    "fwd_nnx_mha_causal_s128_d64": (1, 0, True, False, "bf16"),
    "fwd_nnx_cross_q64_k192_d64": (1, 0, False, False, "bf16"),
    "fwd_dpa_scale_f16_s128_d64": (1, 0, True, False, "f16"),
    "fwd_dpa_window_s128_d64": (1, 0, True, False, "bf16"),     # local_window_size=(128, 0) is the causal mask
    "fwd_dpa_mqa_s128_d64": (1, 0, True, False, "bf16"),
    "fwd_mqa_repeat_s128_d64": (1, 0, True, False, "bf16"),
    "bwd_grad_mqa_repeat_s128_d64": (1, 1, True, False, "bf16"),
    "fwd_cross_q64_k192_d128": (1, 0, False, False, "bf16"),
    "bwd_grad_cross_q64_k192_d64": (1, 1, False, False, "bf16"),
    "fwd_alibi_select_s128_d64": (1, 0, True, True, "bf16"),
    # regression: the bias read through its cast to bf16 (was "the bias is f32")
    "fwd_dpa_alibi_bias_s128_d64": (1, 0, True, True, "bf16"),
    "fwd_f32_softmax_iota_s128_d64": (1, 0, True, False, "bf16"),
    "bwd_grad_f32_softmax_s128_d64": (1, 1, True, False, "bf16"),
    "fwd_f32_products_s128_d64": (1, 0, True, False, "bf16"),
    # Q and K converted to float32 for the scores (a bf16 output): the near miss said "Q, K, V are bf16, f32"
    "fwd_f32_scores_s128_d64": (1, 0, True, False, "bf16"),
    "bwd_grad_f32_scores_s128_d64": (1, 1, True, False, "bf16"),
    # regression: dS and dO converted once for each product: the converts followed
    "bwd_grad_f32_products_s128_d64": (1, 1, True, False, "bf16"),
    "fwd_vmap_s128_d64": (1, 0, True, False, "bf16"),
    # regression: jax.nn.softmax(s, where=mask) reported nothing at all (P is a select, not a divide)
    "fwd_softmax_where_s128_d64": (1, 0, True, False, "bf16"),
    # regression: one head by matmul ([batch, seq, head_dim], one batching dimension) was a near miss
    "fwd_single_head_s128_d64": (1, 0, True, False, "bf16"),
    "fwd_single_head_bias_s128_d64": (1, 0, False, True, "bf16"),
    "bwd_grad_single_head_s128_d64": (1, 1, True, False, "bf16"),
    # regression: the scale computed in the graph (a sqrt or rsqrt of a constant) is folded
    "fwd_sqrt_scale_s128_d64": (1, 0, True, False, "bf16"),
    "bwd_grad_rsqrt_scale_s128_d64": (1, 1, False, False, "bf16"),
    "bwd_grad_vmap_s128_d64": (1, 1, True, False, "bf16"),
    "fwd_f16_tril_s128_d128": (1, 0, True, False, "f16"),
    "bwd_grad_f16_s128_d64": (1, 1, True, False, "f16"),
}

# fixture: the rule the report gives (a regular expression)
REFUSED = {
    "bwd_grad_linen_fp32_softmax_s128_d64": r"keeps P in float32 for P.V \(V converted from bf16\): the graph's "
                                            r"softmax gradient is float32 throughout",
    "neg_f32_pv_s128_d64": r"Q, K, V are bf16 converted to f32 and the output is kept in f32: the kernels write bf16",
    "neg_linen_dropout_s128_d64": r"matched, not rewritten: dropout",
    "neg_grad_softmax_where_s128_d64": r"'stablehlo.select' at .* is not part of a softmax gradient",
    # regression: reported nothing at all (P is an exponential, not a divide)
    "neg_logsumexp_softmax_s128_d64": r"the softmax at .* is written exp\(x - logsumexp\(x\)\): not matched",
    # regression: was "matched, not rewritten: dropout"
    "neg_mask_after_softmax_s128_d64": r"P is zeroed after the softmax by a mask computed from iota and constants",
    "neg_dpa_window_s128_d64": r"the mask at .* is not causal",
    "neg_dpa_seq_lengths_s128_d64": r"the mask depends on argument %arg3: data, not a causal mask",
    "neg_dpa_causal_q64_k128_d64": r"causal mask at .* with offset 0 .* bottom-right, offset seq_k - seq_q = 64",
    "neg_dpa_f32_s128_d64": r"Q, K, V are f32: the kernels take bf16 or f16",
    "neg_dpa_f32_bias_s128_d64": r"the bias at .* is f32: the kernel reads a bias in bf16 \(the type of Q, K and V\)",
    "neg_softcap_s128_d64": r"'stablehlo.tanh' at .* between BMM1 and the softmax is not a scale, bias or mask",
    "neg_grad_softcap_s128_d64": r"near miss \(backward\).*\n.*its forward at .* was not rewritten: 'stablehlo.tanh'",
}


DEFAULT = {"fwd_linen_mha_fp32_softmax_s128_d64", "bwd_grad_f32_products_s128_d64", "fwd_dpa_scale_f16_s128_d64",
           "fwd_mqa_repeat_s128_d64", "fwd_cross_q64_k192_d128", "fwd_dpa_alibi_bias_s128_d64", "fwd_sqrt_scale_s128_d64", "fwd_vmap_s128_d64", "neg_f32_pv_s128_d64",
           "bwd_grad_linen_fp32_softmax_s128_d64", "neg_dpa_causal_q64_k128_d64", "neg_dpa_seq_lengths_s128_d64",
           "fwd_softmax_where_s128_d64", "neg_mask_after_softmax_s128_d64", "neg_dpa_f32_bias_s128_d64",
           "bwd_grad_f32_scores_s128_d64", "fwd_single_head_s128_d64", "fwd_single_head_bias_s128_d64",
           "neg_logsumexp_softmax_s128_d64"}
"""The fixtures the default suite rewrites (the regressions and one of each kind, about 3 s); `-m slow` all."""


def _cases(names):
    return [name if name in DEFAULT else pytest.param(name, marks=pytest.mark.slow) for name in sorted(names)]


def test_every_fixture_is_covered():
    assert set(ALL) == set(REWRITTEN) | set(REFUSED)


@pytest.mark.parametrize("name", _cases(REWRITTEN))
def test_unseen_forms_are_rewritten(name):
    forwards, backwards, causal, biased, dtype = REWRITTEN[name]
    module, report = rewrite(f"unseen14/{name}")
    fwd, bwd = ops_named(module, "tessera.attention"), ops_named(module, "tessera.attention_bwd")
    assert (len(fwd), len(bwd)) == (forwards, backwards) and report.replaced() == forwards + backwards, report.text()
    assert all(op.is_causal == causal and (op.bias is not None) == biased and op.dtype.data == dtype for op in fwd)
    assert not [op for op in ops_named(module, "stablehlo.exponential") if len(op.results[0].type.get_shape()) == 4]


@pytest.mark.parametrize("name", _cases(REFUSED))
def test_unseen_near_misses_name_their_rule(name):
    module, report = rewrite(f"unseen14/{name}")
    assert report.replaced() == 0 and not ops_named(module, "tessera.attention")
    text = report.text()
    assert ("near miss" in text or "matched, not rewritten" in text) and re.search(REFUSED[name], text), text


# (fixture, text replaced, by, the rule the report gives): seeded edits that change what the graph computes
EDITS = [
    # the max over the queries, the sum over the keys
    ("fwd_vmap_s128_d64", '%23 = "stablehlo.reduce"(%21, %22) <{dimensions = array<i64: 3>}>',
     '%23 = "stablehlo.reduce"(%21, %22) <{dimensions = array<i64: 2>}>',
     r"the max or the sum of the softmax at .* is not taken over the axis it normalises"),
    # regression: the scores divided by 0, in the forward and in the backward, crashed the pass (ZeroDivisionError)
    ("bwd_grad_f32_products_s128_d64", '%17 = "stablehlo.constant"() <{value = dense<8.000000e+00>',
     '%17 = "stablehlo.constant"() <{value = dense<0.000000e+00>', r"the scores are divided by 0 at"),
    ("bwd_grad_f32_products_s128_d64", '%78 = "stablehlo.constant"() <{value = dense<8.000000e+00>',
     '%78 = "stablehlo.constant"() <{value = dense<0.000000e+00>', r"'stablehlo.select' at .* is not part of a "
                                                                   r"softmax gradient"),
    # regression: a reduce body the interpreter does not run crashed the pass in the softmax gradient's numeric
    # check (ValueError)
    ("bwd_grad_cross_q64_k192_d64", '%62 = "stablehlo.add"(%arg5, %arg6)', '%62 = "stablehlo.subtract"(%arg5, %arg6)',
     r"under dS cannot be evaluated: .* the interpreter runs reduce bodies"),
    # jax.nn.softmax(where=): the mask of its max, its input, its sum or its output turned upper-triangular
    ("fwd_softmax_where_s128_d64", '%11 = "stablehlo.broadcast_in_dim"(%arg9) <{broadcast_dimensions = array<i64: 2, 3>}>',
     '%11 = "stablehlo.broadcast_in_dim"(%arg9) <{broadcast_dimensions = array<i64: 3, 2>}>',
     r"is masked after it or in its max or sum \(jax.nn.softmax\(where=\)\) otherwise than its input"),
    ("fwd_softmax_where_s128_d64", '%8 = "stablehlo.broadcast_in_dim"(%arg6) <{broadcast_dimensions = array<i64: 2, 3>}>',
     '%8 = "stablehlo.broadcast_in_dim"(%arg6) <{broadcast_dimensions = array<i64: 3, 2>}>',
     r"is masked after it or in its max or sum"),
    ("fwd_softmax_where_s128_d64", '%4 = "stablehlo.broadcast_in_dim"(%arg3) <{broadcast_dimensions = array<i64: 2, 3>}>',
     '%4 = "stablehlo.broadcast_in_dim"(%arg3) <{broadcast_dimensions = array<i64: 3, 2>}>',
     r"is masked after it or in its max or sum"),
    ("fwd_softmax_where_s128_d64", '%1 = "stablehlo.broadcast_in_dim"(%arg0) <{broadcast_dimensions = array<i64: 2, 3>}>',
     '%1 = "stablehlo.broadcast_in_dim"(%arg0) <{broadcast_dimensions = array<i64: 3, 2>}>',
     r"P is zeroed after the softmax by a mask computed from iota and constants at .* that its input is not masked by"),
    # one head: the mask upper-triangular
    ("fwd_single_head_s128_d64", "comparison_direction GE", "comparison_direction LE", r"the mask at .* is not causal"),
    # the scores divided by -8
    ("fwd_vmap_s128_d64", "dense<8.000000e+00> : tensor<bf16>", "dense<-8.000000e+00> : tensor<bf16>",
     r"the scale -0.125 is not positive and finite"),
    # the mask's compare turned: key j visible from query i iff j >= i (upper triangular)
    ("fwd_vmap_s128_d64", "comparison_direction LE", "comparison_direction GE", r"the mask at .* is not causal"),
    # the sqrt of -64: a NaN scale
    ("fwd_sqrt_scale_s128_d64", "dense<6.400000e+01> : tensor<f32>", "dense<-6.400000e+01> : tensor<f32>",
     r"the scale nan is not positive and finite"),
    # the scores transposed with the queries and keys swapped before the mask and the softmax
    ("fwd_dpa_scale_f16_s128_d64", "permutation = array<i64: 3, 0, 1, 2, 4>", "permutation = array<i64: 3, 0, 1, 4, 2>",
     r"K of BMM1 at .* has dimensions other than batch, heads, keys and head_dim"),
]


@pytest.mark.parametrize("name, old, new, rule", EDITS)
def test_seeded_edits_are_refused(name, old, new, rule, tmp_path):
    assert_edit_refused(FIXTURES / f"{name}.mlir", old, new, rule, tmp_path)


# (fixture, text replaced, by, the verifier's words): reduces whose result shape contradicts their dimensions. They
# crashed the pass once ("ValueError: 4 is not in list"; the backward's row sums over the batch in the softmax
# gradient's numeric check), then were near misses; the reduce verifier refuses them at their line now, as
# StableHLO does (round 25: tessera-run crashed on the first with NumPy's "axis 4 is out of bounds").
MALFORMED_REDUCES = [
    ("fwd_vmap_s128_d64", '%23 = "stablehlo.reduce"(%21, %22) <{dimensions = array<i64: 3>}>',
     '%23 = "stablehlo.reduce"(%21, %22) <{dimensions = array<i64: 4>}>',
     r"'stablehlo.reduce' op dimensions \[4\] must be distinct dimensions of the inputs \(rank 4\)"),
    ("bwd_grad_cross_q64_k192_d64", '%42 = "stablehlo.reduce"(%40, %41) <{dimensions = array<i64: 3>}>',
     '%42 = "stablehlo.reduce"(%40, %41) <{dimensions = array<i64: 0>}>', r"'stablehlo.reduce' op result 0 must be"),
    ("bwd_grad_cross_q64_k192_d64", '%49 = "stablehlo.reduce"(%47, %48) <{dimensions = array<i64: 3>}>',
     '%49 = "stablehlo.reduce"(%47, %48) <{dimensions = array<i64: 0>}>', r"'stablehlo.reduce' op result 0 must be"),
]


@pytest.mark.parametrize("name, old, new, message", MALFORMED_REDUCES)
def test_malformed_reduces_are_refused_at_their_line(name, old, new, message, tmp_path, capsys):
    text = (FIXTURES / f"{name}.mlir").read_text()
    assert text.count(old) == 1
    path = tmp_path / "edited.mlir"
    path.write_text(text.replace(old, new))
    line = text[:text.index(old)].count("\n") + 1
    assert tessera_opt.main([str(path), "-p", "rewrite-attention{match=patterns}", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert re.search(rf"edited.mlir:{line}:\d+: .*{message}", err) and "Traceback" not in err, err


def test_a_float32_bias_cast_to_bf16_before_the_add_is_the_bf16_bias(tmp_path, capsys):
    """A float32 bias argument converted to bf16, broadcast and added to the bf16 scores: the graph adds the bf16
    tensor, which the kernel reads (test_rewriter's near miss "the bias is f32" until the bias walk stopped at a
    cast to bf16), and the rewrite agrees with the graph."""
    path = bias_variant(tmp_path, "f32_bias", "2x4x256x256", element="f32")
    module, report = rewrite_file(path)
    (op,) = ops_named(module, "tessera.attention")
    assert op.bias is not None and op.bias.type.element_type == op.q.type.element_type and report.replaced() == 1


@pytest.mark.slow
def test_a_float32_bias_cast_to_bf16_agrees_with_the_graph(tmp_path, capsys):
    path = bias_variant(tmp_path, "f32_bias", "2x4x256x256", element="f32")
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare", "--seed", "4"]) == 0
    assert re.search(r"replaced 1 attention.*\n.*tolerance \S+: ok", capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_unseen_rewrites_agree_with_the_original(name, capsys):
    assert tessera_run.main([str(FIXTURES / f"{name}.mlir"), "-p", "rewrite-attention{match=patterns}", "--compare",
                             "--seed", "5"]) == 0
    out = capsys.readouterr().out
    outputs = re.findall(r"tolerance \S+: (ok|MISMATCH)", out)
    assert outputs and all(v == "ok" for v in outputs), out


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
