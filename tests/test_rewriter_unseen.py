"""The attention rewriter on graphs written the ways JAX users write attention, beyond the forms it was built
from (tests/rewriter/unseen/*.mlir, exported by the `UNSEEN` table of bench/make_rewriter_fixtures.py; the
header of each file says what it is): each is either rewritten and agrees with the original within the
tolerance (`-m slow`: the comparisons, about 2 s each), or left alone with a near miss naming its rule.
Seeded edits of jax.nn.dot_product_attention's graphs (a transpose, a reduce, a broadcast changed) are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tessera.tools import tessera_run
from test_rewriter import ops_named, rewrite
from text_edits import checked

FIXTURES = Path(__file__).parent / "rewriter" / "unseen"
ALL = sorted(p.stem for p in FIXTURES.glob("*.mlir"))

# fixture: (forward ops, backward ops, causal, whether the op has a bias operand)
REWRITTEN = {
    "fwd_added_mask_q64_k128_d64": (1, 0, True, False),  # s + where(tril, 0, -1e9): causal, not a bias
    "fwd_added_window_s128_d64": (1, 0, False, True),    # an added band: not causal, so the bias it is
    "fwd_alibi_causal_s128_d64": (1, 0, True, True),     # ALiBi from iota is a bias, the added tril causal
    "fwd_flax_scale_q_s128_d64": (1, 0, True, False),
    "fwd_flax_bhqd_finfo_s128_d64": (1, 0, True, False),
    "fwd_gqa_repeat_s128_d64": (1, 0, False, False),
    "two_layers_s128_d64": (2, 0, True, False),
    "bwd_grad_added_mask_s128_d64": (1, 1, True, False),
    # regression: the second's Q was the first's P.V as matched, kept alive beside the first's kernel, which died
    "fwd_chained_bhqd_s128_d64": (2, 0, True, False),
    "bwd_grad_chained_bhqd_s128_d64": (2, 2, True, False),
    "fwd_dpa_s128_d64": (1, 0, False, False),            # jax.nn.dot_product_attention: rank 5, transposed scores
    "fwd_dpa_causal_s128_d64": (1, 0, True, False),
    "fwd_dpa_bias_s128_d64": (1, 0, False, True),
    "fwd_gqa_groups_s128_d64": (1, 0, False, False),     # query groups merged into the heads, K and V repeated
    "fwd_dpa_gqa_causal_s128_d64": (1, 0, True, False),  # dot_product_attention, 2 K/V heads: the same
    "fwd_dpa_gqa_bias_s128_d64": (1, 0, False, True),    # and a bias [1, heads]: the kernel's _bias_b1
}

# fixture: the rule the report gives (a regular expression)
REFUSED = {
    "neg_dpa_grad_s128_d64": r"near miss \(backward\).*\n.*not rewritten: the backward of attention with query "
                             r"groups \(jax.nn.dot_product_attention's rank-5 dS",
    "neg_dpa_mask_s128_d64": r"the mask depends on argument %arg3: data, not a causal mask",
    "neg_f32_s128_d64": r"Q, K, V are f32: the kernels take bf16 or f16",
    "neg_scan_layers_s128_d64": r"it is inside the region of 'stablehlo.while' at .*: only attention in a "
                                r"function's top-level block is rewritten",
}


def test_every_unseen_fixture_is_covered():
    assert set(ALL) == set(REWRITTEN) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_unseen_forms_are_rewritten(name):
    forwards, backwards, causal, biased = REWRITTEN[name]
    module, report = rewrite(f"unseen/{name}")
    fwd, bwd = ops_named(module, "tessera.attention"), ops_named(module, "tessera.attention_bwd")
    assert (len(fwd), len(bwd)) == (forwards, backwards) and report.replaced() == forwards + backwards
    assert all(op.is_causal == causal and (op.bias is not None) == biased for op in fwd)
    assert not ops_named(module, "stablehlo.exponential")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unseen_near_misses_name_their_rule(name):
    module, report = rewrite(f"unseen/{name}")
    assert report.replaced() == 0 and not ops_named(module, "tessera.attention")
    text = report.text()
    assert "near miss" in text and re.search(REFUSED[name], text), text


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_unseen_rewrites_agree_with_the_original(name, capsys):
    assert tessera_run.main([str(FIXTURES / f"{name}.mlir"), "-p", "rewrite-attention{match=patterns}", "--compare", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    outputs = re.findall(r"tolerance \S+: (ok|MISMATCH)", out)
    assert outputs and all(v == "ok" for v in outputs), out


@pytest.mark.parametrize("fill, causal", [("-1.000000e+09", True), ("-1.000000e+02", False), ("-inf", True)])
def test_an_added_mask_is_causal_only_when_it_hides(fill, causal, tmp_path):
    """s + where(tril, 0, fill): a fill at or below -1e4 (or -inf) hides keys, so the mask is causal; -100 does
    not (exp(-100) is not 0 in float32), so the addition stays the bias it is written as."""
    from tessera.graph.rewrite_report import take_reports
    from tessera.tools.tessera_opt import load_module, opt_context, parse_pipeline, run_pipeline

    text = (FIXTURES / "fwd_added_mask_q64_k128_d64.mlir").read_text()
    text = checked(text).replace("dense<-1.000000e+09> : tensor<f32>",
                        "dense<0xFF800000> : tensor<f32>" if fill == "-inf" else f"dense<{fill}> : tensor<f32>")
    module = load_module(opt_context(), text, str(tmp_path / "edited.mlir"))
    run_pipeline(parse_pipeline("rewrite-attention{match=patterns}"), opt_context(), module)
    take_reports()
    (op,) = ops_named(module, "tessera.attention")
    assert op.is_causal == causal and (op.bias is None) == causal


# (fixture, text replaced, by, the rule the report gives): seeded edits of jax.nn.dot_product_attention's graph
EDITS = [
    # the scores transposed with the queries and keys swapped: the max is no longer over the softmax's axis
    ("fwd_dpa_s128_d64", "permutation = array<i64: 3, 0, 1, 2, 4>", "permutation = array<i64: 3, 0, 1, 4, 2>",
     r"the max or the sum of the softmax at .* is not taken over the axis it normalises"),
    # the sum over the queries (dimension 3), the max over the keys
    ("fwd_dpa_s128_d64", "%17 = \"stablehlo.reduce\"(%15, %16) <{dimensions = array<i64: 4>}>",
     "%17 = \"stablehlo.reduce\"(%15, %16) <{dimensions = array<i64: 3>}>",
     r"the max or the sum of the softmax at .* is not taken over the axis it normalises"),
    # the causal mask broadcast transposed (upper triangular)
    ("fwd_dpa_causal_s128_d64", "broadcast_dimensions = array<i64: 2, 3>", "broadcast_dimensions = array<i64: 3, 2>",
     r"the mask at .* is not causal"),
    # the scores transposed (queries and keys swapped) before the mask: K's side has the query groups
    ("fwd_dpa_causal_s128_d64", "permutation = array<i64: 3, 0, 1, 2, 4>", "permutation = array<i64: 3, 0, 1, 4, 2>",
     r"K of BMM1 at .* has dimensions other than batch, heads, keys and head_dim"),
]


@pytest.mark.parametrize("name, old, new, rule", EDITS)
def test_seeded_edits_of_dot_product_attention_are_refused(name, old, new, rule, tmp_path):
    assert_edit_refused(FIXTURES / f"{name}.mlir", old, new, rule, tmp_path)


def assert_edit_refused(path: Path, old: str, new: str, rule: str, tmp_path: Path) -> None:
    """Never a wrong rewrite: an edit that changes what the graph computes leaves it a near miss with its rule."""
    from tessera.graph.rewrite_report import take_reports
    from tessera.tools.tessera_opt import load_module, opt_context, parse_pipeline, run_pipeline

    text = path.read_text()
    assert text.count(old) == 1
    module = load_module(opt_context(), checked(text).replace(old, new), str(tmp_path / "edited.mlir"))
    run_pipeline(parse_pipeline("rewrite-attention{match=patterns}"), opt_context(), module)
    (report,) = take_reports()
    text = report.text()
    assert report.replaced() == 0 and not ops_named(module, "tessera.attention")
    assert "near miss" in text and re.search(rule, text), text


@pytest.mark.slow
def test_a_transposed_bias_is_read_transposed(tmp_path, capsys):
    """jax.nn.dot_product_attention(bias=) with the bias's transpose edited to swap queries and keys: the bias's
    dimensions are followed, so the rewrite passes it transposed back and agrees with the edited graph."""
    text = (FIXTURES / "fwd_dpa_bias_s128_d64.mlir").read_text()
    old = "permutation = array<i64: 2, 0, 1, 3, 4>"
    assert text.count(old) == 1
    path = tmp_path / "transposed_bias.mlir"
    path.write_text(checked(text).replace(old, "permutation = array<i64: 2, 0, 1, 4, 3>"))
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare", "--seed", "5"]) == 0
    assert re.search(r"tolerance \S+: ok", capsys.readouterr().out)
