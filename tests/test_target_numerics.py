"""The Target IR that convert-tile-to-sm90 produces, run in the CTA simulator, matches the Tile IR
interpreter and NumPy over the foundation issue's matrix (tessera.interpret(..., level="target")).

The matrix lowers with the single-stage `TARGET_PIPELINE`, the conversion alone: the full default pipeline
(`DEFAULT_PIPELINE`, twice the simulator time) has its own matrix in test_pipeline_matrix.py."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import dtype_from_name
from tessera.passes import TARGET_PIPELINE
from tessera.reference_attention import attention_operands

from conftest import build_kernel

SEQ_PAIRS = [(1, 1), (17, 17), (200, 200), (17, 200), (200, 17), (1, 300)]
"""The Tile-level tests run the whole shape matrix; the CTA simulator (with its register-file check) costs
~50x more, so the Target-level matrix keeps the shapes that exercise different paths: single rows,
partial blocks, seq_q != seq_k both ways, a decoding query, and (below) one long sequence per head_dim."""
BATCH, HEADS = 2, 1  # heads > 1 is exercised by the long-sequence tests (1 x 2)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_attention_target_matches(head_dim, causal, dtype, rng):
    module = build_kernel("flash_attention", head_dim=head_dim, causal=causal, dtype=dtype)
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, batch=BATCH, heads=HEADS)
        out = tessera.interpret(module, q, k, v, level="target", pipeline=TARGET_PIPELINE)
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"seq_q={seq_q} seq_k={seq_k}: {comparison}"
        tile_out = tessera.interpret(module, q, k, v)
        # Same algorithm, same roundings except ex2.approx/rcp.approx and the wgmma summation order.
        assert np.abs(out.astype(np.float32) - tile_out.astype(np.float32)).max() <= 2 * comparison.tolerance


MULTIPASS_SEQ_PAIRS = [(1, 1), (130, 200), (200, 17)]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("variant", ["two_pass_attention", "three_pass_attention"])
def test_multipass_attention_target_matches(variant, head_dim, causal, dtype, rng):
    module = build_kernel(variant, head_dim=head_dim, causal=causal, dtype=dtype)
    for seq_q, seq_k in MULTIPASS_SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, batch=BATCH, heads=HEADS)
        out = tessera.interpret(module, q, k, v, level="target", pipeline=TARGET_PIPELINE)
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"seq_q={seq_q} seq_k={seq_k}: {comparison}"


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (17, 40, 72), (128, 128, 64), (200, 136, 296)])
def test_gemm_target_matches(m, n, k, dtype, rng):
    module = build_kernel("gemm", dtype=dtype)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = tessera.interpret(module, a, b, level="target", pipeline=TARGET_PIPELINE)
    comparison = reference.check_gemm(c, a, b, dtype_from_name(dtype))
    assert comparison.ok, str(comparison)


def test_gemm_rows_tma_cannot_address(rng):
    """TMA needs global row strides that are multiples of 16 bytes: K = 300 bf16 (600-byte rows). The default
    kernel is specialized for the sizes (A copied by threads, B still by TMA) and computes it; the kernel that
    promises 16-byte rows (aligned=True) refuses the launch by name rather than computing it wrong."""
    a, b = rng.standard_normal((64, 300)), rng.standard_normal((300, 64))
    out = tessera.interpret(build_kernel("gemm", dtype="bf16"), a, b, level="target", pipeline=TARGET_PIPELINE)
    assert reference.check_gemm(out, a, b, dtype_from_name("bf16")).ok
    with pytest.raises(ValueError, match=r"promises \(tile.divisible\) that K is a multiple of 8, got K = 300"):
        tessera.interpret(build_kernel("gemm", dtype="bf16", aligned=True), a, b, level="target",
                          pipeline=TARGET_PIPELINE)


@pytest.mark.parametrize("head_dim,causal,dtype", [(64, True, "bf16"), (128, False, "f16")])
def test_flash_attention_target_long_sequences(head_dim, causal, dtype, rng):
    module = build_kernel("flash_attention", head_dim=head_dim, causal=causal, dtype=dtype)
    q, k, v = (rng.standard_normal((1, 2, 1000, head_dim)) for _ in range(3))
    out = tessera.interpret(module, q, k, v, level="target", pipeline=TARGET_PIPELINE)
    assert reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal).ok
