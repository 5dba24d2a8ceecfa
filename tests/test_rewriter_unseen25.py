"""The attention rewriter on graphs written by hand, round 25 of the unseen cases (`hand_graphs_unseen25`): reduce
bodies with their operands swapped, the causal mask compared three other ways, the scale as a splat constant of the
scores' shape, batching dimensions paired heads before batch (output transposed back to [batch, seq, heads,
head_dim]), a float32 softmax whose max is over the bf16 scores, a two-sided window added with -inf (whole key
blocks hidden), the mask's compare turned (keys at or after the query) added with -1e9, Q K^T V before the
softmax (attention of queries Q K^T over V^T), a composite "tessera.attention", chlo.erf after the attention,
Q, K, V through custom_call @Sharding, and PyTorch's math SDPA as torch_xla exports it (Q and K^T each scaled,
bmm over [batch * heads, seq, d]).
Each is rewritten and its outputs agree at Tile level with a float64 NumPy reference of the graph's semantics
written here (one also in the PTX executor, one through `tessera-run --compare`). Left alone with their rule: the
mask's compare turned, selected; a padding mask from a lengths argument; a max over the heads; dropout of rate 0
as a keep-mask argument; a padded query row hidden with -inf (alone or beside ALiBi); a composite with
`is_causal` or attributes its decomposition contradicts; graphs of batch 0 or no key. jax.grad through causal
attention with products batching (heads, batch) and swapped reduce bodies is rewritten with its backward and
right. Malformed graphs exit 1 with their line, never a traceback. About 5 s.

Regressions: (1) a composite's attributes other than `causal`, `scale` and `layout` were ignored: `is_causal =
true` became a non-causal kernel; it is a near miss naming the attribute. So is a composite whose decomposition
the forward matcher reads as another attention than its attributes say (causal written inside the composed
function and not passed as its keyword was a non-causal kernel; a scale or a layout of its own). (2) An added -inf mask hiding every key
from a query (a padded query row) became the kernel's bias: the graph computes NaN on that row, the kernel 0
(`tessera-run --compare` said MISMATCH of its own rewrite); a near miss, as a causal mask with seq_q > seq_k is,
and so is any bias computed from iota and constants that does so (ALiBi with padded query rows).
(3) A reduce over a dimension out of range passed tessera-opt and crashed tessera-run with NumPy's "axis 9 is out
of bounds" and no location: the reduce verifier refuses it at its line; so does the compare verifier a
compare_type that does not order the operands' type (UNSIGNED on i32, which the interpreter compared signed).
(4) tessera-run printed NumPy's RuntimeWarning ("invalid value encountered in subtract", from the interpreter's
source line) on a graph whose padding mask hides every key of a row: binary ops give IEEE results without a
warning, as unary ones do. (5) A graph of batch 0 or no key (or a composite of no query) was rewritten into an
attention no kernel runs ("sizes must be positive" when tessera-run ran it), and with a causal mask crashed the
pass ("internal error in pass 'rewrite-attention': IndexError"): a near miss naming the empty tensor; the op's
verifier refuses one too. (6) The pretty form JAX prints by default was refused with xDSL's bare "Operation
stablehlo.dot_general does not have a custom format.": the diagnostic says how to print the generic form. (7) A
graph whose Q, K, V pass through JAX's sharding annotation, custom_call @Sharding, was rewritten but could not be
run ("'stablehlo.custom_call' is not an op the StableHLO interpreter runs"): @Sharding runs as the identity, and
another target is named. (8) A float8 argument or op was refused by tessera-run without a place ("element type
f8E4M3FN is not supported by the StableHLO interpreter"): the argument or the op is named with its line.
"""

from __future__ import annotations

import math
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import hand_graphs_unseen25 as graphs
from hand_graphs import graph
from test_rewriter import ops_named, rewrite_file
from tessera.graph.graph_runtime import run_graph
from tessera.graph.stablehlo_interpreter import entry_function
from tessera.tools import tessera_opt, tessera_run


def attention(q, k, v, visible=None, bias=None):
    """softmax(Q K^T / 8 [+ bias], keys hidden where `visible` [seq_q, seq_k] is False) V in float64."""
    s = q @ np.swapaxes(k, -1, -2) / 8.0
    if bias is not None:
        s = s + bias
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def causal(sq: int, sk: int) -> np.ndarray:
    """Bottom-right causal: query i sees keys up to i + sk - sq."""
    return np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq


def window(seq: int, left: int = 40, right: int = 24) -> np.ndarray:
    i, j = np.arange(seq)[:, None], np.arange(seq)[None]
    return (i - j <= left) & (j - i <= right)


def at_or_after(sq: int, sk: int) -> np.ndarray:
    """The causal mask's mirror image: query i sees keys from i + sk - sq on (an added -1e9 hides the others)."""
    return np.arange(sk)[None] >= np.arange(sq)[:, None] + sk - sq


def heads_before_batch(q, k, v):
    """[batch, seq, heads, head_dim] in and out, causal."""
    q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    return np.swapaxes(attention(q, k, v, causal(q.shape[2], k.shape[2])), 1, 2)


def v_before_softmax(q, k, v):
    """softmax((Q K^T / 8) V / 8, over head_dim) V^T, with Q K^T / 8 rounded to bf16 as the graph keeps it."""
    s = (q @ np.swapaxes(k, -1, -2) / 8.0).astype(ml_dtypes.bfloat16).astype(np.float64)
    return attention(s, np.swapaxes(v, -1, -2), np.swapaxes(v, -1, -2))


def torch_math(q, k, v):
    """Causal, Q and K each times sqrt(1/8) as bf16 rounds it (PyTorch's math SDPA), no other scale."""
    c = float(ml_dtypes.bfloat16(0.3535534))
    return attention(q * c * c * 8.0, k, v, causal(q.shape[2], k.shape[2]))  # (`attention` divides by 8)


def composite(q, k, v):
    """BSHD, causal, scale 1/8."""
    q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    return np.swapaxes(attention(q, k, v, causal(q.shape[2], k.shape[2])), 1, 2)


erf = np.vectorize(math.erf)
CAUSAL_FORMS = ["cols LE rows", "cols LT rows + 1", "not (rows LT cols)"]

# name: (graph text, the pass, [causal of each op], the float64 outputs from the float64 inputs)
REWRITTEN = {
    "swapped-reduce-bodies": (graphs.swapped_reduce_bodies(), "patterns", [True],
                              lambda q, k, v: attention(q, k, v, causal(64, 64))),
    **{f"causal {form}, {how}": (graphs.causal_written(form, how), "patterns", [True],
                                 lambda q, k, v: attention(q, k, v, causal(48, 80)))
       for form in CAUSAL_FORMS for how in ("select", "add")},
    "keys at or after the query, added -1e9": (
        graphs.causal_written("rows LE cols (anti-causal)", "add"), "patterns", [False],
        lambda q, k, v: attention(q, k, v, at_or_after(48, 80))),
    "scale splat of the scores' shape": (graphs.scale_constants(), "patterns", [False], attention),
    "heads before batch": (graphs.heads_before_batch(), "patterns", [True], heads_before_batch),
    "f32 softmax, max over bf16": (graphs.f32_softmax_one_side(), "patterns", [True],
                                   lambda q, k, v: attention(q, k, v, causal(64, 64))),
    "two-sided window, -inf": (graphs.two_sided_window(), "patterns", [False],
                               lambda q, k, v: attention(q, k, v, window(256))),
    "Q K^T V before the softmax": (graphs.v_before_softmax(), "patterns", [False], v_before_softmax),
    "composite causal": (graphs.composite("causal = true", causal=True), "composite", [True], composite),
    "composite causal, Q scaled in the decomposition": (
        graphs.composite("causal = true, scale = 0.125 : f64", causal=True, q_scaled=True), "composite", [True],
        composite),
    "chlo.erf after attention": (graphs.gelu_around(), "patterns", [True],
                                 lambda q, k, v: erf(attention(q, k, v, causal(64, 64)))),
    "ALiBi -0.5 |i - j| from iota, no padded row": (
        graphs.alibi_and_padded_rows(valid=64), "patterns", [False],
        lambda q, k, v: attention(q, k, v, bias=-0.5 * np.abs(np.arange(64)[:, None] - np.arange(64)[None]))),
    "PyTorch's math SDPA as torch_xla exports it": (graphs.torch_sdpa_math(), "patterns", [True], torch_math),
    "Q, K, V through custom_call @Sharding": (graphs.sharded(), "patterns", [True],
                                              lambda q, k, v: attention(q, k, v, causal(64, 64))),
}

# name: (graph text, the pass, the rule the report gives)
REFUSED = {
    "keys at or after the query, selected": (graphs.causal_written("cols GE rows (anti-causal)"), "patterns",
                                             r"the mask at .* is not causal"),
    "padding from a lengths argument": (graphs.padding_from_lengths(), "patterns",
                                        r"the mask depends on argument %arg3: data, not a causal mask"),
    "max over the heads": (graphs.max_over_heads(), "patterns", r"is not taken over the axis it normalises"),
    "dropout of rate 0": (graphs.dropout_rate_zero(), "patterns", r"matched, not rewritten: dropout"),
    "padded query rows, -inf": (graphs.query_padding(), "patterns",
                                r"the bias at .* hides every key from query 40 with -inf: the graph computes NaN"),
    "ALiBi with padded query rows, -inf": (graphs.alibi_and_padded_rows(), "patterns",
                                           r"the bias at .* hides every key from query 40 with -inf"),
    "composite is_causal": (graphs.composite("is_causal = true", causal=True), "composite",
                            r"composite_attributes has is_causal: the contract names only layout, causal, scale"),
    "composite, causal inside, no attribute": (graphs.composite("", causal=True), "composite",
                                                r"its decomposition @tessera.attention is causal: the attributes and "
                                                r"the decomposition must say one attention"),
    "composite, scale 0.25, decomposition 1/8": (graphs.composite("scale = 0.25 : f64"), "composite",
                                                 r"its decomposition @tessera.attention scales by 0.125, not 0.25"),
    "composite BHSD over a BSHD decomposition": (
        graphs.composite('layout = "BHSD"'), "composite",
        r"reads Q as \[batch or heads, seq, batch or heads, head_dim\], not \[batch or heads, batch or heads, seq"),
    "batch 0, causal": (graph(batch=0, mask="select"), "patterns",
                        r"Q has an empty dimension \(\[0, 2, 64, 64\]\): the kernels take sizes of at least 1"),
    "no key": (graph(seq_k=0), "patterns", r"K has an empty dimension \(\[1, 2, 0, 64\]\)"),
    "composite of no query": (graphs.composite("causal = true", causal=True, seq=0), "composite",
                              r"Q has an empty dimension \(\[1, 0, 2, 64\]\)"),
}


def _spec(mode: str) -> str:
    return "rewrite-attention" if mode == "composite" else "rewrite-attention{match=patterns}"


def _check(module, name: str, level: str = "tile") -> None:
    rng = np.random.default_rng(25)
    inputs = [rng.standard_normal(a.type.get_shape()).astype(ml_dtypes.bfloat16)
              for a in entry_function(module).body.blocks.first.args]
    (got,) = run_graph(module, inputs, level=level)
    want = REWRITTEN[name][3](*(x.astype(np.float64) for x in inputs))
    error = np.abs(got.astype(np.float64) - want).max()
    assert got.shape == want.shape and error <= 0.02 * max(1.0, np.abs(want).max()), f"{name}: off by {error:.3g}"


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewritten_and_right_against_numpy(name, tmp_path):
    text, mode, is_causal, _ = REWRITTEN[name]
    path = tmp_path / "graph.mlir"
    path.write_text(text)
    module, report = rewrite_file(path, _spec(mode))
    assert [op.is_causal for op in ops_named(module, "tessera.attention")] == is_causal, report.text()
    assert "near miss" not in report.text() and not ops_named(module, "stablehlo.exponential"), report.text()
    _check(module, name)


def training(q, k, v, do):
    """(O, dQ, dK, dV) of causal attention in float64: dS = P (dP - rowsum(P dP)) / 8, dP = dO V^T."""
    s = np.where(causal(q.shape[2], k.shape[2]), q @ np.swapaxes(k, -1, -2) / 8.0, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) / 8.0
    return p @ v, ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do


@pytest.mark.parametrize("heads_first, swapped, seq_q, seq_k", [(False, True, 64, 64), (True, False, 64, 64),
                                                                 (True, True, 64, 64), (True, True, 48, 80)])
def test_training_graphs_rewritten_and_right_against_numpy(heads_first, swapped, seq_q, seq_k, tmp_path):
    """jax.grad through causal attention, products batching (heads, batch) and/or reduce bodies (b, a)."""
    path = tmp_path / "training.mlir"
    path.write_text(graphs.training(heads_first, swapped, seq=seq_q, seq_k=seq_k))
    module, report = rewrite_file(path)
    assert len(ops_named(module, "tessera.attention")) == len(ops_named(module, "tessera.attention_bwd")) == 1, \
        report.text()
    rng = np.random.default_rng(25)
    inputs = [rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
              for shape in ((2, 2, seq_q, 64), (2, 2, seq_k, 64), (2, 2, seq_k, 64), (2, 2, seq_q, 64))]
    for name, got, want in zip(("o", "dq", "dk", "dv"), run_graph(module, inputs),
                               training(*(x.astype(np.float64) for x in inputs))):
        error = np.abs(got.astype(np.float64) - want).max()
        assert error <= 0.02 * max(1.0, np.abs(want).max()), f"{name}: off by {error:.3g}"


def test_a_rewritten_window_in_the_ptx_executor_and_through_tessera_run(tmp_path, capsys):
    """The two-sided window hides whole key blocks of 128 from most rows: the bias's -inf blocks in the PTX."""
    path = tmp_path / "window.mlir"
    path.write_text(REWRITTEN["two-sided window, -inf"][0])
    module, _ = rewrite_file(path)
    _check(module, "two-sided window, -inf", level="ptx")
    path.write_text(REWRITTEN["heads before batch"][0])
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "replaced 1 attention (1 forward, 0 backward)" in out, out
    assert re.findall(r": (ok|MISMATCH)\n", out) == ["ok"], out


@pytest.mark.parametrize("name", REFUSED)
def test_left_alone_with_its_rule(name, tmp_path):
    text, mode, rule = REFUSED[name]
    path = tmp_path / "graph.mlir"
    path.write_text(text)
    module, report = rewrite_file(path, _spec(mode))
    assert report.replaced() == 0 and not ops_named(module, "tessera.attention"), report.text()
    assert re.search(rule, report.text()), report.text()


def test_a_graph_whose_rows_see_no_key_runs_without_numpy_warnings(tmp_path, capsys):
    path = tmp_path / "padded.mlir"
    path.write_text(REFUSED["padded query rows, -inf"][0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tessera_run.main([str(path)]) == 0
    assert "3072 not finite" in capsys.readouterr().out  # queries 40 .. 63 of two heads, 64 columns each


SWAPPED = graphs.swapped_reduce_bodies()
CROSS = graphs.causal_written("cols LE rows")  # 48 queries, 80 keys


def _line(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


MALFORMED = {  # name: (graph text, the line the diagnostic names, its words)
    "truncated": (SWAPPED[:900], None, r"expected"),
    "an op of no dialect": (SWAPPED.replace('"stablehlo.exponential"', '"foo.exponential"'),
                            _line(SWAPPED, '"stablehlo.exponential"'), r"Operation foo.exponential is not registered"),
    "an f16 operand": (SWAPPED.replace("(tensor<1x2x64x64xbf16>, tensor<1x2x64x64xbf16>) -> tensor<1x2x64x64xbf16>\n"
                                       "    %5", "(tensor<1x2x64x64xbf16>, tensor<1x2x64x64xf16>) -> "
                                                 "tensor<1x2x64x64xbf16>\n    %5", 1), 5,
                       r"operand is used with type tensor<1x2x64x64xf16>, but has been previously used or defined"),
    "a reduce over dimension 9": (SWAPPED.replace("array<i64: 3>", "array<i64: 9>", 1),
                                  _line(SWAPPED, "array<i64: 3>"),
                                  r"'stablehlo.reduce' op dimensions \[9\] must be distinct dimensions of the inputs"),
    "the pretty form JAX prints": (graphs.pretty_form(), 3, r"Operation stablehlo.dot_general does not have a "
                                   r"custom format here: Tessera reads StableHLO in MLIR's generic form "
                                   r".*print_generic_op_form"),
    "an UNSIGNED compare of i32 iotas": (
        CROSS.replace("comparison_direction LE>}>", "comparison_direction LE>, compare_type = "
                                                    "#stablehlo<comparison_type UNSIGNED>}>", 1),
        _line(CROSS, "comparison_direction LE>}>"), r"'stablehlo.compare' op compare_type UNSIGNED does not order i32 "
                                                   r"\(it takes SIGNED\)"),
    "a reduce over the queries, its result over the keys": (
        CROSS.replace("array<i64: 3>", "array<i64: 2>", 1), _line(CROSS, "array<i64: 3>"),
        r"'stablehlo.reduce' op result 0 must be tensor<1x2x80xbf16> \(the inputs without dimensions \[2\]"),
}


@pytest.mark.parametrize("name", MALFORMED)
@pytest.mark.parametrize("tool", ["tessera-opt", "tessera-run"])
def test_malformed_graphs_exit_1_at_their_line(name, tool, tmp_path, capsys):
    text, line, words = MALFORMED[name]
    assert text != SWAPPED
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    if tool == "tessera-opt":
        status = tessera_opt.main([str(path), "-p", "rewrite-attention{match=patterns}", "-o", str(tmp_path / "out")])
    else:
        status = tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare"])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err, err
    at = str(line) if line else r"\d+"
    assert re.search(rf"bad.mlir:{at}:\d+", err) and re.search(words, err), err


F8_INSIDE = graphs.float8_keys("inside")


@pytest.mark.parametrize("text, at, words", [
    (graphs.gelu_around("chlo.tan"), "chlo.tan", "'chlo.tan' is not an op the StableHLO interpreter runs"),
    (graphs.sharded("SPMDFullToShardShape"), "SPMDFullToShardShape",
     "custom_call @SPMDFullToShardShape is not a target the StableHLO interpreter runs"),
    (graphs.float8_keys("argument"), "1:1", r"func @main: argument %1: element type f8E4M3FN is not supported by the "
                                            r"StableHLO interpreter"),
    (F8_INSIDE, f"{_line(F8_INSIDE, 'f8E4M3FN')}:5", r"'stablehlo.convert': element type f8E4M3FN is not supported"),
])
def test_an_op_outside_the_subset_is_named_where_the_graph_runs(text, at, words, tmp_path, capsys):
    """chlo.tan after the attention, a custom_call of another target than @Sharding before it, a float8 K
    argument or a round trip through float8: read (and the attention rewritten) but named at their line by
    tessera-run, whose interpreter does not run them (`at`: a line:col, or the text on the op's line)."""
    path = tmp_path / "graph.mlir"
    path.write_text(text)
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare"]) == 1
    err = capsys.readouterr().err
    at = at if re.fullmatch(r"\d+:\d+", at) else f"{_line(text, at)}:5"
    assert re.search(rf"graph.mlir:{at}: .*{words}", err) and "Traceback" not in err, err
