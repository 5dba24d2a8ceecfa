"""StableHLO's `optimization_barrier` (what `jax.checkpoint` writes around the values its backward recomputes from)
and `reduce_precision` (what a checkpoint policy writes around what it saves): read in JAX's generic and pretty
forms, verified, and run by the StableHLO interpreter, the barrier as the identity and `reduce_precision` as XLA
rounds. (Both were opaque: `tessera-run` refused a graph holding them.)
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from test_rewriter import rewrite_file
from tessera.graph.graph_runtime import run_graph
from tessera.graph.stablehlo_interpreter import reduce_precision
from tessera.tools import tessera_opt


BARRIER_TEXT = '''func.func @main(%a: tensor<4xbf16>, %b: tensor<2x3xf32>) -> (tensor<4xbf16>, tensor<2x3xf32>) {
  %0:2 = stablehlo.optimization_barrier %a, %b : tensor<4xbf16>, tensor<2x3xf32>
  %1:2 = "stablehlo.optimization_barrier"(%0#0, %0#1) : (tensor<4xbf16>, tensor<2x3xf32>) -> (tensor<4xbf16>, tensor<2x3xf32>)
  stablehlo.optimization_barrier()
  "func.return"(%1#0, %1#1) : (tensor<4xbf16>, tensor<2x3xf32>) -> ()
}
'''


def test_optimization_barrier_reads_in_both_forms_and_runs_as_the_identity(tmp_path, capsys):
    path = tmp_path / "barrier.mlir"
    path.write_text(BARRIER_TEXT)
    assert tessera_opt.main([str(path)]) == 0
    assert capsys.readouterr().out.count('"stablehlo.optimization_barrier"') == 3
    module, _ = rewrite_file(path)
    a, b = np.float32([1.5, -2, 3, 0.25]), np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run_graph(module, [a, b])
    assert np.array_equal(out[0], a) and np.array_equal(out[1], b)


@pytest.mark.parametrize("results, message", [
    ("%0:2 = ... -> (tensor<4xf32>, tensor<2x3xf32>)", "result 0 is tensor<4xf32>, but operand 0 is tensor<4xbf16>"),
    ("%0 = ... -> tensor<4xbf16>", "has 2 operands but 1 results: result i is operand i"),
])
def test_optimization_barrier_verifier(results, message, tmp_path, capsys):
    path = tmp_path / "barrier.mlir"
    barrier = '"stablehlo.optimization_barrier"(%a, %b) : (tensor<4xbf16>, tensor<2x3xf32>)'
    path.write_text(f'func.func @main(%a: tensor<4xbf16>, %b: tensor<2x3xf32>) {{\n  {results.replace("...", barrier)}\n'
                    '  "func.return"() : () -> ()\n}\n')
    assert tessera_opt.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err and re.search(r"barrier\.mlir:2:\d+", err) and "Traceback" not in err, err


def test_reduce_precision_rounds_as_xla_does():
    """Against XLA's CPU results (jax 0.10.2, `jax.lax.reduce_precision` of float32): the mantissa rounded to
    nearest even on the bit pattern (subnormals too), the exponent range narrowed to +-inf and +-0."""
    x = np.float32([1e-39, 3.0e38, 1.0000001, 1.00390625, 1.01171875, 65520.0, 7e-5, 6e-8, -2.5e-5, np.nan])
    bf16 = np.float32([1.0101905e-39, 3.0040553e38, 1.0, 1.0, 1.015625, 65536.0, 7.0095062e-05, 6.0070306e-08,
                       -2.5033951e-05, np.nan])
    f16 = np.float32([0.0, np.inf, 1.0, 1.0039062, 1.0117188, np.inf, 6.9975853e-05, 0.0, -0.0, np.nan])
    for got, want in ((reduce_precision(x, 8, 7), bf16), (reduce_precision(x, 5, 10), f16),
                      (reduce_precision(x.astype(np.float64), 5, 10), f16)):
        assert np.allclose(got, want, rtol=1e-7, atol=0, equal_nan=True) and np.array_equal(np.signbit(got),
                                                                                            np.signbit(want))
    assert np.array_equal(reduce_precision(x, 8, 7)[:-1], x[:-1].astype(ml_dtypes.bfloat16).astype(np.float32))
