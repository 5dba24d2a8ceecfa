"""The Tile IR interpreter runs every attention variant and GEMM right, over the foundation issue's matrix:
sequence lengths 1, 17, 128, 200, 1000 (and seq_q != seq_k), causal or not, head_dim 64 and 128, bf16 and
f16, batch 2 and 3 heads, under the tolerance rule of DESIGN.md section 9 (tessera.reference)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import dtype_from_name
from tessera.reference_attention import attention_operands

from conftest import build_kernel

VARIANTS = ("flash_attention", "two_pass_attention", "three_pass_attention")
SEQ_PAIRS = [(1, 1), (17, 17), (128, 128), (200, 200), (1000, 1000), (17, 200), (200, 17), (1, 1000), (1000, 128)]
BATCH, HEADS = 2, 3


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_matches_reference(variant, head_dim, causal, dtype, rng):
    module = build_kernel(variant, head_dim=head_dim, causal=causal, dtype=dtype)
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, batch=BATCH, heads=HEADS)
        out = tessera.interpret(module, q, k, v)
        assert out.dtype == dtype_from_name(dtype)
        assert out.shape == (BATCH, HEADS, seq_q, head_dim)
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"{variant} seq_q={seq_q} seq_k={seq_k}: {comparison}"


def test_causal_rows_that_see_no_key_are_zero(rng):
    """Bottom-right alignment: with seq_q > seq_k the first seq_q - seq_k queries see no key."""
    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")
    q, k, v = attention_operands(rng, 40, 10, 64, batch=BATCH, heads=HEADS)
    out = tessera.interpret(module, q, k, v).astype(np.float32)
    assert np.all(out[:, :, :30] == 0)
    assert np.all(np.abs(out[:, :, 30:]).sum(axis=-1) > 0)


def test_single_decoding_query_sees_whole_cache(rng):
    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")
    full = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    q, k, v = attention_operands(rng, 1, 300, 64, batch=BATCH, heads=HEADS)
    np.testing.assert_array_equal(tessera.interpret(module, q, k, v), tessera.interpret(full, q, k, v))


def test_custom_scale(rng):
    module = build_kernel("flash_attention", head_dim=128, causal=False, dtype="bf16", scale=0.5)
    q, k, v = attention_operands(rng, 70, 90, 128, batch=BATCH, heads=HEADS)
    out = tessera.interpret(module, q, k, v)
    assert reference.check_attention(out, q, k, v, dtype_from_name("bf16"), scale=0.5).ok
    assert not reference.check_attention(out, q, k, v, dtype_from_name("bf16")).ok


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 70), (128, 128, 64), (200, 130, 300), (256, 384, 128)])
def test_gemm_matches_reference(m, n, k, dtype, rng):
    module = build_kernel("gemm", dtype=dtype)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    c = tessera.interpret(module, a, b)
    assert c.shape == (m, n)
    comparison = reference.check_gemm(c, a, b, dtype_from_name(dtype))
    assert comparison.ok, str(comparison)


def test_batched_blocks_equal_one_block_at_a_time(rng, monkeypatch):
    """Running many blocks at once is an optimisation only: the result is bit-identical."""
    from tessera.interpreters import launch

    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="f16")
    q, k, v = attention_operands(rng, 300, 260, 64, batch=BATCH, heads=HEADS)
    batched = tessera.interpret(module, q, k, v)
    monkeypatch.setattr(launch, "MAX_BLOCKS_PER_BATCH", 1)
    np.testing.assert_array_equal(batched, tessera.interpret(module, q, k, v))
