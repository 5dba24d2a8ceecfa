"""Every kernel of the foundation issue's matrix from its PTX text: each attention builder (flash, two-pass,
three-pass) x head_dim 64/128 x causal or not x bf16/f16, and GEMM in bf16/f16, printed from
register-allocated Target IR of the full pipeline (`SPECIALIZED_PIPELINE`, the single-stage pipeline for
the GEMM as well), run in the PTX executor as `tessera.host` describes the launch, against NumPy.

Shapes, alternating along the matrix (each configuration runs one; the CTA count is what costs): a partial
key block with fewer trips than ring slots (17 x 200, two heads) and a 0-trip causal row block (200 x 17,
two batches), so that blockIdx.y and blockIdx.z are both exercised."""

from __future__ import annotations

import itertools

import pytest

from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described
from tessera.numerics import dtype_from_name
from tessera.passes import PTX_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

from conftest import build_kernel
from test_ptx_exec_kernels import SPECIALIZED_PTX


def compile_to_ptx(module, pipeline):
    """(PTX text, host description, kernel signature) of `module` lowered by `pipeline`."""
    lowered = module.clone()
    apply_pipeline(lowered, pipeline)
    return print_ptx(lowered, registers=allocated_registers), describe(lowered)[0], find_kernel(module)


def run_ptx(compiled, inputs):
    """Run compiled PTX on the Tile-level inputs; returns the output array."""
    text, host, sig = compiled
    arrays, sizes = prepare_arguments(sig, inputs)
    launch_described(text, host, arrays, sizes)
    (out,) = [a for a, arg in zip(arrays, sig.args) if arg.role == "out"]
    return out

MATRIX = list(itertools.product(["flash_attention", "two_pass_attention", "three_pass_attention"], (64, 128),
                                (False, True), ("bf16", "f16")))


@pytest.mark.parametrize("builder, head_dim, causal, dtype", MATRIX,
                         ids=[f"{b}-d{d}-{'causal' if c else 'full'}-{t}" for b, d, c, t in MATRIX])
def test_attention_from_ptx(builder, head_dim, causal, dtype, rng):
    compiled = compile_to_ptx(build_kernel(builder, head_dim=head_dim, causal=causal, dtype=dtype), SPECIALIZED_PTX)
    shapes = [((17, 200), (1, 2)), ((200, 17), (2, 1))]
    for (seq_q, seq_k), (batch, heads) in [shapes[MATRIX.index((builder, head_dim, causal, dtype)) % 2]]:
        q = rng.standard_normal((batch, heads, seq_q, head_dim))
        k, v = (rng.standard_normal((batch, heads, seq_k, head_dim)) for _ in range(2))
        o = run_ptx(compiled, [q, k, v])
        check = reference.check_attention(o, q, k, v, dtype_from_name(dtype), causal=causal)
        assert check.ok, f"{seq_q}x{seq_k}: {check}"


def test_head_dim_256_from_ptx(rng):
    """head_dim 256 (key blocks of 48: 12 score registers per row and thread, [64, 256] accumulators of 128
    registers per thread), causal, from the PTX of the full pipeline."""
    compiled = compile_to_ptx(build_kernel("flash_attention", head_dim=256, causal=True), SPECIALIZED_PTX)
    q = rng.standard_normal((1, 1, 130, 256))
    k, v = (rng.standard_normal((1, 1, 200, 256)) for _ in range(2))
    check = reference.check_attention(run_ptx(compiled, [q, k, v]), q, k, v, dtype_from_name("bf16"), causal=True)
    assert check.ok, str(check)


@pytest.mark.parametrize("pipeline", [PTX_PIPELINE, SPECIALIZED_PTX], ids=["single-stage", "full"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_gemm_from_ptx(dtype, pipeline, rng):
    a, b = rng.standard_normal((130, 200)), rng.standard_normal((200, 136))
    c = run_ptx(compile_to_ptx(build_kernel("gemm", dtype=dtype), pipeline), [a, b])
    check = reference.check_gemm(c, a, b, dtype_from_name(dtype))
    assert check.ok, check
