"""The forward's log-sum-exp output (issue 14): `return_lse=True` adds LSE[batch, heads, seq_q] (f32, stored as a
[.., 1] column), the natural log of each row's softmax denominator, within 1e-4 of float64 logsumexp
(`reference.check_lse`) at Tile level on every builder that offers it, and on a slice at target and PTX level
through the default pipeline (tile.log lowered to lg2.approx.ftz.f32 times ln 2); -inf for a row that sees no
key (whose O is 0); without the option the kernel is the same kernel; ptxas accepts the LSE kernels cleanly."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.kernels import flash_attention, three_pass_attention, two_pass_attention
from tessera.numerics import BF16, F16
from tessera.reference_attention import attention_operands
from tessera.toolchain import compile_ptx, find_all_ptxas

DTYPES = {"bf16": BF16, "f16": F16}


def _check(out, lse, q, k, v, dtype, causal):
    o_check = reference.check_attention(out, q, k, v, DTYPES[dtype], causal=causal)
    lse_check = reference.check_lse(lse, q, k, DTYPES[dtype], causal=causal)
    assert o_check.ok, o_check
    assert lse_check.ok, lse_check
    assert lse.dtype == np.float32 and lse.shape == q.shape[:3] + (1,)


TILE_CASES = [
    (flash_attention, 64, False, "bf16", (2, 2, 200, 150)),
    (flash_attention, 128, True, "f16", (1, 2, 200, 150)),   # causal, seq_q > seq_k: 50 rows see no key
    (flash_attention, 256, True, "bf16", (1, 1, 129, 300)),
    (three_pass_attention, 64, True, "bf16", (1, 2, 150, 100)),
    (three_pass_attention, 128, False, "f16", (1, 1, 130, 257)),
    (two_pass_attention, 64, True, "f16", (1, 2, 150, 100)),
]


@pytest.mark.parametrize("builder,head_dim,causal,dtype,shape", TILE_CASES,
                         ids=[f"{b.__name__}-d{d}-{'causal' if c else 'full'}-{t}" for b, d, c, t, _ in TILE_CASES])
def test_lse_matches_float64_logsumexp_at_tile_level(builder, head_dim, causal, dtype, shape, rng):
    batch, heads, seq_q, seq_k = shape
    q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, batch=batch, heads=heads)
    out, lse = tessera.interpret(builder(head_dim, causal=causal, dtype=dtype, return_lse=True), q, k, v)
    _check(out, lse, q, k, v, dtype, causal)


def test_a_row_that_sees_no_key_has_lse_minus_infinity_and_output_zero(rng):
    q, k, v = attention_operands(rng, 130, 40, 64)  # causal: query i sees keys up to i - 90
    out, lse = tessera.interpret(flash_attention(64, causal=True, return_lse=True), q, k, v)
    assert np.all(np.isneginf(lse[0, 0, :90, 0])) and np.all(np.isfinite(lse[0, 0, 90:, 0]))
    assert not np.any(out[0, 0, :90].astype(np.float32)) and not np.isnan(out.astype(np.float32)).any()


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_lse_through_the_default_pipeline(level, rng):
    """The very kernel the GPU runs (warp-specialized, overlap-softmax, peeled; lg2.approx for the log), in
    the CTA simulator and from its PTX text in the executor: LSE within 1e-4, empty rows -inf."""
    q, k, v = attention_operands(rng, 200, 150, 64)
    out, lse = tessera.interpret(flash_attention(64, causal=True, return_lse=True), q, k, v, level=level)
    _check(out, lse, q, k, v, "bf16", True)
    assert np.all(np.isneginf(lse[0, 0, :50, 0]))


def test_without_return_lse_the_kernel_is_unchanged():
    """Off by default costs nothing: the same IR, no LSE argument, no logarithm."""
    plain = tessera.print_module(flash_attention(128, causal=True))
    assert tessera.print_module(flash_attention(128, causal=True, return_lse=False)) == plain
    assert "LSE" not in plain and "tile.log" not in plain
    with_lse = tessera.print_module(flash_attention(128, causal=True, return_lse=True))
    assert "@flash_attention_d128_bf16_causal_lse" in with_lse and "tile.log" in with_lse
    assert "#tile.dims<batch, heads, seq_q, 1>" in with_lse


def test_bad_return_lse_and_unsupported_configurations_are_refused_by_name():
    with pytest.raises(ValueError, match="return_lse must be True or False"):
        flash_attention(64, return_lse=1)
    with pytest.raises(ValueError, match="two_pass_attention: return_lse=True supports head_dim up to 64"):
        two_pass_attention(128, return_lse=True)


def test_lse_kernels_use_lg2_approx_and_assemble_without_warning_or_spill():
    """tile.log is lg2.approx.ftz.f32 times ln 2 (0f3F317218); under the newest ptxas found (the one CI uses)
    the LSE kernel at head_dim 128, causal, which sits at the consumer warpgroups' 240-register budget,
    assembles with no warning, spill or stack frame."""
    ptx = tessera.compile(flash_attention(128, causal=True, return_lse=True))
    assert "lg2.approx.ftz.f32" in ptx and "0f3F317218" in ptx
    result = compile_ptx(ptx, ptxas=find_all_ptxas()[0].path)
    entry = result.entry()
    assert not result.warnings and not result.log.diagnostics
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0


def test_column_stores_read_back_as_target_ir():
    """The LSE column store ([BM, 1], written by the lane of each quad whose column base is 0) lowers to IR the
    sm90 verifier accepts, so the Target IR prints and reads back (two-pass attention's statistics columns
    before this were written with an sm90.selp of a scalar condition that did not read back)."""
    from tessera.ir import parse_module, print_module

    text = print_module(tessera.compile(two_pass_attention(64, causal=True, return_lse=True), target="target"))
    assert print_module(parse_module(text)) == text
