"""The hand-written examples: they parse, describe the kernels they say, match the builders op for op, and
(once the Tile IR interpreter exists) compute attention and GEMM."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.ir import parse_module
from tessera.kernel_abi import kernels, signature
from tessera.kernels import flash_attention, gemm

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"



def load(name: str):
    path = EXAMPLES / name
    return parse_module(path.read_text(), str(path))


def op_counts(module) -> Counter:
    return Counter(op.name for op in module.walk())


def test_flash_attention_example_parses():
    module = load("flash_attention.mlir")
    (fn,) = kernels(module)
    sig = signature(fn)
    assert (sig.name, sig.kind, sig.causal) == ("flash_attention_d128_bf16", "attention", False)
    assert sig.scale == pytest.approx(1 / math.sqrt(128), rel=1e-7)
    assert [a.name for a in sig.args] == ["Q", "K", "V", "O"]


def test_gemm_example_parses():
    module = load("gemm.mlir")
    (fn,) = kernels(module)
    sig = signature(fn)
    assert (sig.name, sig.kind) == ("gemm_bf16", "gemm")
    assert [(a.name, a.role) for a in sig.args] == [("A", "in"), ("B", "in"), ("C", "out")]


@pytest.mark.parametrize(
    "name, build", [("flash_attention.mlir", lambda: flash_attention(block_n=128)), ("gemm.mlir", gemm)]
)
def test_examples_hold_the_builders_ops(name, build):
    # Written by hand for reading, but the same kernel: the same ops, as many of each.
    assert op_counts(load(name)) == op_counts(build())


# region Numerics (need the interpreter)


def _output(result, name: str) -> np.ndarray:
    """The output array, whether the interpreter returns it alone, in a sequence or by name."""
    if isinstance(result, dict):
        result = result[name]
    elif isinstance(result, list | tuple):
        (result,) = result
    return np.asarray(result, dtype=np.float64)


def _attention_reference(q, k, v, scale, *, p_dtype=None):
    """softmax(scale q k^T) v in float64; with p_dtype, the probabilities are rounded to it first (what a
    straightforward same-precision implementation does)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.swapaxes(-1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if p_dtype is not None:
        p = p.astype(p_dtype).astype(np.float64)
    return p @ v


def test_flash_attention_example_computes_attention():
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    # seq_q != seq_k, and neither a multiple of the 128-row blocks.
    q = rng.standard_normal((1, 2, 200, 128)).astype(bf16)
    k = rng.standard_normal((1, 2, 300, 128)).astype(bf16)
    v = rng.standard_normal((1, 2, 300, 128)).astype(bf16)
    out = _output(tessera.interpret(load("flash_attention.mlir"), q, k, v), "O")
    scale = 1 / math.sqrt(128)
    exact = _attention_reference(q, k, v, scale)
    baseline = _attention_reference(q, k, v, scale, p_dtype=bf16).astype(bf16).astype(np.float64)
    # FlashAttention's criterion: at most twice the error of a same-precision computation, plus a little.
    assert np.abs(out - exact).max() <= 2 * np.abs(baseline - exact).max() + 1e-3


def test_gemm_example_computes_a_product():
    rng = np.random.default_rng(1)
    bf16 = ml_dtypes.bfloat16
    a = rng.standard_normal((130, 70)).astype(bf16)  # M, K, N: none a multiple of the tiles
    b = rng.standard_normal((70, 150)).astype(bf16)
    out = _output(tessera.interpret(load("gemm.mlir"), a, b), "C")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert out.shape == exact.shape
    np.testing.assert_allclose(out, exact, rtol=0, atol=1e-4 * np.abs(exact).max())


# endregion
