"""The attention rewriter (issue 18): reading JAX's StableHLO, the matcher's rewrites and refusals, and the
rewritten graphs agreeing with the originals.

Fixtures: tests/rewriter/*.mlir, exported by bench/make_rewriter_fixtures.py (needs jax; these tests do
not). The seq-1000 fixtures are compared end to end by `bench/rewriter.py`, not here (seconds each).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from tessera.graph.rewrite_report import take_reports
from tessera.graph.stablehlo_interpreter import constant_value, run_function
from tessera.tools import tessera_opt, tessera_run
from tessera.tools.tessera_opt import load_module, opt_context
from text_edits import checked

FIXTURES = Path(__file__).parent / "rewriter"
ALL = sorted(p.stem for p in FIXTURES.glob("*.mlir"))

# fixture: (forward ops, backward ops, causal, scale) after rewrite-attention{match=patterns}
REWRITTEN = {
    "fwd_plain_s256_d64": (1, 0, False, 1.0),
    "fwd_divide_s1000_d128": (1, 0, False, np.float32(1 / 11.3125)),
    "fwd_multiply_s256_d128": (1, 0, False, 0.08837890625),
    "fwd_causal_s1000_d64": (1, 0, True, 0.125),
    "fwd_causal_q256_k1000_d64": (1, 0, True, 0.125),
    "fwd_bwd_causal_s256_d64": (1, 1, True, 0.125),
    "block_s256_d64": (1, 0, True, 0.125),
    "composite_s256_d128": (1, 0, True, np.float32(1 / np.sqrt(128))),
    "fwd_bias_s256_d64": (1, 0, False, 0.125),
}

BIASED = {"fwd_bias_s256_d64"}
"""Positive fixtures whose attention adds a bias: rewritten with the bias as the op's fourth operand."""

# fixture: the rule the report gives (a regular expression), and whether the pattern matched as a whole
REFUSED = {
    "neg_dropout_s256_d64": (r"matched, not rewritten: dropout", True),
    "neg_softmax_axis_s256_d64": (r"the softmax normalises axis 2 of the scores, but BMM2 .* sums over axis 3", False),
    "neg_p_escapes_s256_d64": (r"P \(the softmax output\) has another user: 'func.return'", False),
    "neg_scale_argument_s256_d64": (r"the scale at .* is not a constant: it is argument %arg3", False),
    "neg_head_dim_s256_d80": (r"head_dim 80 is not one the kernels support", False),
    "neg_boolean_mask_s256_d64": (r"the mask depends on argument %arg3: data, not a causal mask", False),
    "neg_causal_offset_s256_d64": (r"causal mask .* with offset -1 .* bottom-right, offset seq_k - seq_q = 0", False),
    "neg_bwd_forward_refused_s256_d64": (r"near miss \(backward\).*\n.*its forward at .* was not rewritten: the "
                                         r"scale .* is not a constant", False),
}


def load(name: str):
    path = FIXTURES / f"{name}.mlir"
    return load_module(opt_context(), path.read_text(), str(path))


def rewrite(name: str, spec: str = "rewrite-attention{match=patterns}"):
    from tessera.tools.tessera_opt import parse_pipeline, run_pipeline

    module = load(name)
    take_reports()
    run_pipeline(parse_pipeline(spec), opt_context(), module)
    reports = take_reports()
    assert len(reports) == 1
    return module, reports[0]


def ops_named(module, name: str) -> list:
    return [op for op in module.walk() if op.name == name]


def test_every_fixture_is_covered():
    assert sorted(REWRITTEN) + sorted(REFUSED) and set(ALL) == set(REWRITTEN) | set(REFUSED)


# region Reading JAX's text


@pytest.mark.parametrize("name", ALL)
def test_tessera_opt_reads_every_fixture(name, capsys):
    assert tessera_opt.main([str(FIXTURES / f"{name}.mlir")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["fwd_bwd_causal_s256_d64", "block_s256_d64", "neg_dropout_s256_d64"])
def test_printed_graphs_read_back(name, tmp_path):
    # xDSL prints `-> (tensor<...>)` for a function with empty result attributes, then reads it back without
    # them: the second print is the fixed point
    first, second, third = (tmp_path / f"out{i}.mlir" for i in range(3))
    assert tessera_opt.main([str(FIXTURES / f"{name}.mlir"), "-o", str(first)]) == 0
    assert tessera_opt.main([str(first), "-o", str(second)]) == 0
    assert tessera_opt.main([str(second), "-o", str(third)]) == 0
    assert third.read_text() == second.read_text()


def test_hex_float_literals_are_bit_patterns():
    """JAX prints -inf as `dense<0xFF800000> : tensor<f32>` (bf16: 0xFF80): the bits, not 4286578688.0."""
    text = FIXTURES.joinpath("fwd_causal_s1000_d64.mlir").read_text()
    assert "dense<0xFF800000> : tensor<f32>" in text and "dense<0xFF80> : tensor<bf16>" in text
    module = load("fwd_causal_s1000_d64")
    values = {float(constant_value(op, exact=True).flat[0]) for op in ops_named(module, "stablehlo.constant")}
    assert -np.inf in values and 4286578688.0 not in values and 65408.0 not in values


LOCATIONS = '''"func.func"() <{function_type = (tensor<2xf32>) -> tensor<2xf32>, sym_name = "main"}> ({
^bb0(%arg0: tensor<2xf32> loc("x")):
  %0 = "stablehlo.exponential"(%arg0) : (tensor<2xf32>) -> tensor<2xf32> loc(#loc7)
  "func.return"(%0) : (tensor<2xf32>) -> () loc(#loc)
}) : () -> () loc(#loc)
#loc = loc(unknown)
#loc5 = loc("model.py":4:8 to :43)
#loc6 = loc("f"(#loc5))
#loc7 = loc(callsite(#loc6 at #loc5))
'''


def test_location_aliases_defined_at_the_end_are_resolved(tmp_path, capsys):
    module = load_module(opt_context(), LOCATIONS, "locs.mlir")
    exp = ops_named(module, "stablehlo.exponential")[0]
    # a name/call-site location is replaced by the op's place in the text read (tessera.ir.location_aliases)
    assert str(exp.location) == 'loc("locs.mlir":3:3)'
    x = np.array([0.0, 1.0])
    assert np.allclose(run_function(module, [x])[0], np.exp(x))


@pytest.mark.parametrize("edit, message", [
    (lambda t: checked(t).replace("#loc7 = loc(callsite(#loc6 at #loc5))\n", ""), "undefined symbol alias '#loc7'"),
    (lambda t: checked(t).replace('#loc6 = loc("f"(#loc5))', '#loc6 = loc("f"(#loc7))'), "defined in terms of itself"),
    (lambda t: t + '#loc5 = loc("again.py":1:1)\n', "redefinition of location alias '#loc5'"),
])
def test_bad_location_aliases_are_located_diagnostics(edit, message, tmp_path, capsys):
    path = tmp_path / "locs.mlir"
    path.write_text(edit(LOCATIONS))
    assert tessera_opt.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err and re.search(r"locs\.mlir:\d+:\d+", err) and "Traceback" not in err


def test_ops_outside_the_subset_are_opaque_but_other_dialects_are_not(tmp_path, capsys):
    path = tmp_path / "opaque.mlir"
    path.write_text('"func.func"() <{function_type = () -> (), sym_name = "f"}> ({\n'
                    '  %0 = "stablehlo.rng_bit_generator"() {x = #stablehlo<rng_algorithm THREE_FRY>} : () -> tensor<2xui32>\n'
                    '  "func.return"() : () -> ()\n}) : () -> ()\n')
    assert tessera_opt.main([str(path)]) == 0
    assert "stablehlo.rng_bit_generator" in capsys.readouterr().out
    path.write_text(checked(path.read_text()).replace("stablehlo.rng_bit_generator", "tile.rng_bit_generator"))
    assert tessera_opt.main([str(path)]) == 1
    assert "tile.rng_bit_generator is not registered" in capsys.readouterr().err


def test_dense_array_of_an_unstorable_width_is_a_diagnostic(tmp_path, capsys):
    """Found by fuzzing the fixtures: xDSL stores dense arrays of i1/i8/i16/i32/i64 only (it raised
    NotImplementedError, an internal error, for `array<i319>`)."""
    text = checked((FIXTURES / "fwd_plain_s256_d64.mlir").read_text()).replace("array<i64: 3>", "array<i319: 3>", 1)
    path = tmp_path / "i319.mlir"
    path.write_text(text)
    assert tessera_opt.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "unsupported dense array" in err and re.search(r"i319\.mlir:\d+:\d+", err) and "internal" not in err


def test_fuzzed_fixtures_never_crash(tmp_path, capsys):
    """Seeded edits of the fixtures (lines dropped or duplicated, numbers and names changed, text cut) read
    cleanly or give a located diagnostic: never a traceback or an internal error."""
    rng = random.Random(18)
    names = ["fwd_bwd_causal_s256_d64", "block_s256_d64", "composite_s256_d128", "neg_dropout_s256_d64"]
    for case in range(12):
        lines = (FIXTURES / f"{names[case % len(names)]}.mlir").read_text().splitlines(keepends=True)
        i = rng.randrange(len(lines))
        kind = case % 6
        if kind == 0:
            del lines[i]
        elif kind == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif kind == 2:
            lines[i] = re.sub(r"\d+", lambda m: str(int(m.group()) + rng.choice([1, 7, 255])), lines[i], count=1)
        elif kind == 3:
            lines[i] = checked(lines[i].replace("stablehlo.", "stablehlo.x", 1)).replace("#loc", "#lok", 1)
        elif kind == 4:
            lines = lines[:i] + [lines[i][: len(lines[i]) // 2]]
        else:
            lines[i] = lines[i].replace("tensor<", "tensor<3x", 1)
        path = tmp_path / f"case{case}.mlir"
        path.write_text("".join(lines))
        code = tessera_opt.main([str(path), "-p", "rewrite-attention{match=patterns}", "--rewrite-report"])
        err = capsys.readouterr().err
        assert code in (0, 1), (case, err)
        assert "Traceback" not in err and "internal error" not in err, (case, err)


# endregion
# region Matching and rewriting


@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_patterns_rewrite_each_positive_fixture(name):
    forwards, backwards, causal, scale = REWRITTEN[name]
    module, report = rewrite(name)
    fwd, bwd = ops_named(module, "tessera.attention"), ops_named(module, "tessera.attention_bwd")
    assert (len(fwd), len(bwd)) == (forwards, backwards)
    assert report.replaced("forward") + report.replaced("composite") == forwards
    assert report.replaced("backward") == backwards
    assert not ops_named(module, "stablehlo.exponential") or name == "block_s256_d64"
    op = fwd[0]
    assert op.is_causal == causal and op.scale.value.data == pytest.approx(float(scale), rel=1e-7)
    assert op.kernel.data == (f"flash_attention_d{op.head_dim.value.data}_bf16" + ("_causal" if causal else "")
                              + ("_bias" if name in BIASED else ""))
    assert (op.bias is not None) == (name in BIASED)
    if backwards:  # the forward hands O and its log-sum-exp to the backward
        assert bwd[0].kernel.data == f"attention_backward_d{op.head_dim.value.data}_bf16" + ("_causal" if causal else "")
        assert len(op.results) == 2 and bwd[0].operands[3] is op.results[0] and bwd[0].operands[4] is op.results[1]
        assert len(ops_named(module, "stablehlo.dot_general")) == 0  # six dot_generals became two ops


def test_transformer_block_keeps_everything_but_the_attention():
    module, _ = rewrite("block_s256_d64")
    assert len(ops_named(module, "stablehlo.dot_general")) == 4  # QKV, output projection, the MLP's two
    assert ops_named(module, "stablehlo.tanh") and ops_named(module, "stablehlo.rsqrt")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_negative_fixtures_are_left_alone_with_the_rule(name):
    rule, matched = REFUSED[name]
    before = load(name)
    module, report = rewrite(name)
    assert str(module) == str(before)
    assert report.replaced() == 0
    text = report.text()
    assert re.search(rule, text), text
    assert ("matched, not rewritten" in text) == matched


def test_default_mode_replaces_only_the_composite():
    module, report = rewrite("composite_s256_d128", "rewrite-attention")
    assert len(ops_named(module, "tessera.attention")) == 1 and not ops_named(module, "stablehlo.composite")
    assert not ops_named(module, "func.func")[1:]  # the decomposition went with the composite
    for name in ("fwd_plain_s256_d64", "fwd_bwd_causal_s256_d64"):
        module, report = rewrite(name, "rewrite-attention")
        assert str(module) == str(load(name)) and report.entries == []


def test_rewrite_report_on_the_command_line(capsys):
    path = FIXTURES / "fwd_bwd_causal_s256_d64.mlir"
    assert tessera_opt.main([str(path), "-p", "rewrite-attention{match=patterns}", "--rewrite-report"]) == 0
    err = capsys.readouterr().err
    assert "1 forward, 1 backward replaced" in err
    assert re.search(r"causal mask at .* \(offset 0 = seq_k - seq_q: bottom-right\)", err)
    assert "softmax gradient (checked in float64)" in err and "became tessera.attention_bwd" in err
    assert tessera_opt.main([str(path), "-p", "rewrite-attention{match=nonsense}"]) == 1
    assert "match must be one of composite, patterns" in capsys.readouterr().err


def test_attention_op_verifier_refuses_what_no_kernel_runs(tmp_path, capsys):
    module, _ = rewrite("fwd_plain_s256_d64")
    text = checked(str(module)).replace("head_dim = 64 : i64", "head_dim = 80 : i64")
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    assert tessera_opt.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "head_dim 80 is not one the kernels support" in err and re.search(r"bad\.mlir:\d+:\d+", err)


def test_attention_op_verifier_refuses_an_empty_dimension(tmp_path, capsys):
    """A hand-written tessera.attention of batch 0 (the kernels launch no grid of none; tessera-run raised the
    interpreter's "sizes must be positive" when it ran): refused where the op is read."""
    from hand_graphs import graph

    path = tmp_path / "batch0.mlir"
    path.write_text(graph(batch=2))
    module, _ = rewrite_file(path)
    path.write_text(str(module).replace("tensor<2x", "tensor<0x"))
    assert tessera_opt.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert re.search(r"batch0\.mlir:\d+:\d+: .*'tessera.attention' op q has an empty dimension \(tensor<0x2x64x64xbf16>\): "
                     r"the kernels take sizes of at least 1", err), err


# endregion
# region Running: the original graph against float64, the rewritten one against the original


def test_interpreter_in_float64_is_the_attention_reference():
    from tessera import reference_attention
    from tessera.numerics import BF16, round_to

    module = load("fwd_causal_q256_k1000_d64")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ((2, 256, 4, 64), (2, 1000, 4, 64), (2, 1000, 4, 64)))
    out = run_function(module, [q, k, v], exact=True)[0]
    q, k, v = (round_to(x, BF16).astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    expected = reference_attention.attention(q, k, v, causal=True, scale=0.125).transpose(0, 2, 1, 3)
    assert np.abs(out - expected).max() < 1e-12


@pytest.mark.parametrize("name, spec", [
    ("fwd_plain_s256_d64", "rewrite-attention{match=patterns}"),
    ("composite_s256_d128", "rewrite-attention"),
    ("fwd_bwd_causal_s256_d64", "rewrite-attention{match=patterns}"),
    ("block_s256_d64", "rewrite-attention{match=patterns form=custom_call}"),
    ("fwd_bias_s256_d64", "rewrite-attention{match=patterns}"),
    ("fwd_bias_s256_d64", "rewrite-attention{match=patterns form=custom_call}"),
])
def test_compare_rewritten_with_original(name, spec, capsys):
    """The rewritten graph (attention in the Tile interpreter) agrees with the original within the tolerance."""
    assert tessera_run.main([str(FIXTURES / f"{name}.mlir"), "-p", spec, "--compare", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    forwards, backwards = REWRITTEN[name][:2]
    assert f"({forwards} forward, {backwards} backward)" in out
    outputs = re.findall(r"max \|rewritten - original\| (\S+);.*tolerance (\S+): (ok|MISMATCH)", out)
    assert len(outputs) == (4 if backwards else 1) and all(v == "ok" for _, _, v in outputs)


def test_compare_fails_when_nothing_is_replaced(capsys):
    assert tessera_run.main([str(FIXTURES / "neg_head_dim_s256_d80.mlir"), "-p",
                             "rewrite-attention{match=patterns}", "--compare"]) == 1
    assert "nothing was replaced" in capsys.readouterr().out


def test_compare_counts_the_attentions_of_the_function_it_runs(tmp_path, capsys):
    """Regression: --compare counted every function's rewrites; with @main free of attention and another public
    function holding one, it said "@main: replaced 1 attention" and exited 0 on a graph it had not changed."""
    from hand_graphs import graph, tensor

    t = tensor((1, 2, 64, 64))
    main = (f'func.func @main(%q: {t}, %k: {t}) -> {t} {{\n    %0 = "stablehlo.add"(%q, %k) : ({t}, {t}) -> {t}\n'
            f'    func.return %0 : {t}\n}}\n')
    path = tmp_path / "main_without_attention.mlir"
    path.write_text("builtin.module {\n" + main + graph(mask="select").replace("@main(", "@other(", 1) + "}\n")
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare"]) == 1
    out = capsys.readouterr().out
    assert "replaced 0 attentions" in out and "nothing was replaced" in out, out


def test_run_a_graph_without_compare(capsys):
    assert tessera_run.main([str(FIXTURES / "neg_boolean_mask_s256_d64.mlir"), "--seed", "2"]) == 0
    assert "output 0: [2, 256, 4, 64] float32" in capsys.readouterr().out
    assert tessera_run.main([str(FIXTURES / "neg_boolean_mask_s256_d64.mlir"), "-d", "seq_q=3"]) == 1
    assert "is a StableHLO graph: -d applies to kernels" in capsys.readouterr().err
    assert tessera_run.main([str(FIXTURES / "neg_dropout_s256_d64.mlir")]) == 1  # opaque ops do not run
    err = capsys.readouterr().err
    assert re.search(r"neg_dropout_s256_d64\.mlir:\d+:\d+: .*'stablehlo\.\w+' is not an op the StableHLO "
                     r"interpreter runs", err), err


def test_python_api_reads_and_rewrites_graphs():
    import tessera
    from tessera.passes import apply_pipeline

    module = tessera.parse_module((FIXTURES / "fwd_plain_s256_d64.mlir").read_text())
    apply_pipeline(module, "rewrite-attention{match=patterns}")
    assert len(ops_named(module, "tessera.attention")) == 1


def test_custom_call_form_is_what_xla_dispatches():
    module, _ = rewrite("fwd_bwd_causal_s256_d64", "rewrite-attention{match=patterns form=custom_call}")
    calls = ops_named(module, "stablehlo.custom_call")
    assert [c.call_target_name.data for c in calls] == ["__tessera$attention", "__tessera$attention_bwd"]
    config = calls[0].backend_config.data
    assert config["kernel"].data == "flash_attention_d64_bf16_causal" and calls[0].api_version.value.data == 4
# endregion


# region Additive bias (the kernel's fourth operand)
#
# Variants of the bias fixture, edited as text: the bias broadcast along batch, heads, queries; added before the
# scale; of another element type; with dropout after the softmax.

BIAS_ARG = "%arg3: tensor<2x4x256x256xbf16>"
BIAS_ADD = '%4 = "stablehlo.add"(%3, %arg3)'


def bias_variant(tmp_path, name: str, source_shape: str | None = None, dims: str = "0, 1, 2, 3",
                 element: str = "bf16", edit=None) -> Path:
    """The bias fixture with its bias argument of `source_shape` (and `element` type) broadcast to the scores
    by `broadcast_in_dim` with `dims` (and converted to bf16) before the add, or edited by `edit`."""
    text = (FIXTURES / "fwd_bias_s256_d64.mlir").read_text()
    if source_shape is not None:
        arg_type = f"tensor<{source_shape}x{element}>"
        text = checked(text).replace(BIAS_ARG, f"%arg3: {arg_type}").replace(
            "tensor<2x256x4x64xbf16>, tensor<2x4x256x256xbf16>) -> tensor<2x256x4x64xbf16>",
            f"tensor<2x256x4x64xbf16>, {arg_type}) -> tensor<2x256x4x64xbf16>")
        value = "%arg3"
        lines = []
        if element != "bf16":
            lines.append(f'%bias_c = "stablehlo.convert"(%arg3) : ({arg_type}) -> tensor<{source_shape}xbf16>')
            value = "%bias_c"
        lines.append(f'%bias_b = "stablehlo.broadcast_in_dim"({value}) <{{broadcast_dimensions = array<i64: {dims}>}}> '
                     f': (tensor<{source_shape}xbf16>) -> tensor<2x4x256x256xbf16>')
        text = checked(text).replace(f"    {BIAS_ADD}", "".join(f"    {line}\n" for line in lines)
                            + f"    {checked(BIAS_ADD).replace('%arg3', '%bias_b')}")
    if edit is not None:
        text = edit(text)
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    return path


def rewrite_file(path: Path, spec: str = "rewrite-attention{match=patterns}"):
    from tessera.tools.tessera_opt import parse_pipeline, run_pipeline

    module = load_module(opt_context(), path.read_text(), str(path))
    take_reports()
    run_pipeline(parse_pipeline(spec), opt_context(), module)
    (report,) = take_reports()
    return module, report


@pytest.mark.parametrize("source_shape, dims, kernel", [
    ("1x4x256x256", "0, 1, 2, 3", "flash_attention_d64_bf16_bias_b1"),
    ("2x1x256x256", "0, 1, 2, 3", "flash_attention_d64_bf16_bias_h1"),
    ("256x256", "2, 3", "flash_attention_d64_bf16_bias_b1_h1"),
])
def test_a_bias_broadcast_over_batch_or_heads_stays_broadcast(source_shape, dims, kernel, tmp_path, capsys):
    """The kernel reads a bias of size 1 in batch and/or heads at index 0: the rewrite passes the bias before
    its broadcast (reshaped to rank 4), and the result agrees with the original graph."""
    path = bias_variant(tmp_path, "broadcast", source_shape, dims)
    module, report = rewrite_file(path)
    (op,) = ops_named(module, "tessera.attention")
    assert op.kernel.data == kernel and report.replaced() == 1
    assert not ops_named(module, "stablehlo.broadcast_in_dim")  # nothing materialises [2, 4, 256, 256]
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare", "--seed", "4"]) == 0
    assert "replaced 1 attention" in capsys.readouterr().out


@pytest.mark.parametrize("variant, rule", [
    (dict(source_shape="2x4x1x256", dims="0, 1, 2, 3"),
     r"the bias at .* \(argument %arg3, \[2, 4, 1, 256\]\) is broadcast along the queries: the kernel reads a bias "
     r"\[batch or 1, heads or 1, seq_q, seq_k\]"),
    (dict(source_shape="2x256", dims="0, 3"), r"is broadcast along the queries: the kernel reads a bias"),
    (dict(edit=lambda t: checked(t).replace('%3 = "stablehlo.multiply"(%0, %2)', '%3 = "stablehlo.add"(%0, %arg3)')
                          .replace(BIAS_ADD, '%4 = "stablehlo.multiply"(%3, %2)')),
     r"the bias at .* is added before a scale \(x 0.125\): the kernel adds its bias after the scale"),
])
def test_a_bias_the_kernel_cannot_take_is_a_near_miss(variant, rule, tmp_path):
    path = bias_variant(tmp_path, "near_miss", **variant)
    before = load_module(opt_context(), path.read_text(), str(path))
    module, report = rewrite_file(path)
    assert str(module) == str(before) and report.replaced() == 0
    text = report.text()
    assert re.search(rule, text) and "near miss" in text and "matched, not rewritten" not in text, text


def test_bias_and_dropout_stays_matched_not_rewritten(tmp_path):
    """Dropout after the softmax of a biased attention (P times a keep mask): dropout is what stops it."""
    def with_dropout(text):
        text = checked(text).replace('%21 = "stablehlo.dot_general"(%arg2, %20)',
                                     '%21 = "stablehlo.dot_general"(%arg2, %dropped)')
        return checked(text).replace('    %21 = "stablehlo.dot_general"',
                            '    %dropped = "stablehlo.multiply"(%20, %arg3) : (tensor<2x4x256x256xbf16>, '
                            'tensor<2x4x256x256xbf16>) -> tensor<2x4x256x256xbf16>\n    %21 = "stablehlo.dot_general"')
    path = bias_variant(tmp_path, "dropout", edit=with_dropout)
    module, report = rewrite_file(path)
    assert report.replaced() == 0
    assert re.search(r"matched, not rewritten: dropout", report.text()), report.text()


def test_bias_fixture_report_and_custom_call(capsys):
    path = FIXTURES / "fwd_bias_s256_d64.mlir"
    assert tessera_opt.main([str(path), "-p", "rewrite-attention{match=patterns}", "--rewrite-report"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"bias at .*fwd_bias_s256_d64.mlir:\d+:\d+ \(argument %arg3\)", err), err
    assert "became tessera.attention (kernel flash_attention_d64_bf16_bias, scale 0.125, causal false, with the bias " \
           "as its fourth operand)" in err
    module, _ = rewrite("fwd_bias_s256_d64", "rewrite-attention{match=patterns form=custom_call}")
    (call,) = ops_named(module, "stablehlo.custom_call")
    assert len(call.operands) == 4 and bool(call.backend_config.data["bias"].value.data)
    assert call.backend_config.data["kernel"].data == "flash_attention_d64_bf16_bias"


def test_the_backward_of_a_biased_forward_is_refused(tmp_path):
    """fwd_bwd_causal with a bias added to the scaled scores: the backward kernels take no bias, so the
    backward is a near miss, and its forward, whose P the graph's backward still reads, stays too."""
    t, scores = (FIXTURES / "fwd_bwd_causal_s256_d64.mlir").read_text(), "tensor<2x4x256x256xbf16>"
    for old, new in [
        ("arg_attrs = [{}, {}, {}, {}]", "arg_attrs = [{}, {}, {}, {}, {}]"),
        ("tensor<2x256x4x64xbf16>) -> (tensor<2x256x4x64xbf16>", f"tensor<2x256x4x64xbf16>, {scores}) -> (tensor<2x256x4x64xbf16>"),
        ('%arg9: tensor<2x256x4x64xbf16> loc("do"))', f'%arg9: tensor<2x256x4x64xbf16> loc("do"), %bias: {scores} loc("bias"))'),
        ("(%22, %19, %23) <{callee = @_where}>", "(%22, %biased, %23) <{callee = @_where}>"),
        ('    %20 = "stablehlo.constant"() <{value = dense<true>',
         f'    %biased = "stablehlo.add"(%19, %bias) : ({scores}, {scores}) -> {scores}\n'
         '    %20 = "stablehlo.constant"() <{value = dense<true>'),
    ]:
        assert old in t
        t = checked(t).replace(old, new, 1)
    path = tmp_path / "fwd_bwd_bias.mlir"
    path.write_text(t)
    module, report = rewrite_file(path)
    assert report.replaced() == 0 and not ops_named(module, "tessera.attention")
    text = report.text()
    assert re.search(r"near miss \(backward\).*\n.*its forward at .* adds a bias: the backward kernels take none", text)
    assert re.search(r"near miss \(forward\).*\n.*P \(the softmax output\) has another user", text), text


def test_attention_op_verifier_checks_the_bias(tmp_path, capsys):
    module, _ = rewrite("fwd_bias_s256_d64")
    text = str(module)
    for edit, message in [
        (lambda t: checked(t).replace('kernel = "flash_attention_d64_bf16_bias"',
                                      'kernel = "flash_attention_d64_bf16"'),
         "a bias operand goes with a '_bias' kernel"),
    ]:
        path = tmp_path / "bad.mlir"
        path.write_text(edit(text))
        assert tessera_opt.main([str(path)]) == 1
        err = capsys.readouterr().err
        assert message in err and re.search(r"bad\.mlir:\d+:\d+", err), err
# endregion
