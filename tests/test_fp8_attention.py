"""FP8 attention forward at Tile level: `flash_attention(dtype="e4m3")` and `tessera.attention` on
`ml_dtypes.float8_e4m3fn` inputs with descale factors, against `tessera.reference.check_attention_fp8`
(float64 attention of the dequantized inputs; at most twice the error of the same-precision computation).

The lowered kernel (levels "target" and "ptx") is tested in test_fp8_lowering.py; its refusals here, and the
check of an output past bf16's range at every level.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference as R
from tessera import reference_fp8
from tessera.kernels import flash_attention
from tessera.runtime.attention_base import UnsupportedKernel
from fp8_inputs import E4M3, fp8_inputs


@pytest.mark.parametrize("batch, heads, heads_k, seq_q, seq_k, d, causal", [
    (2, 4, 2, 1, 77, 64, True),       # GQA, a single query row (decoding), causal
    (1, 2, 2, 100, 160, 128, True),   # seq_q != seq_k, partial key blocks, causal
    (1, 3, 1, 65, 50, 256, False),    # MQA, head_dim 256, fewer keys than one block
])
def test_fp8_attention_through_the_public_api(batch, heads, heads_k, seq_q, seq_k, d, causal):
    q, k, v, (dq, dk, dv) = fp8_inputs(seq_q + d, batch, heads, heads_k, seq_q, seq_k, d)
    o, lse = tessera.attention(q, k, v, causal=causal, descale_q=dq, descale_k=dk, descale_v=dv,
                               return_lse=True, level="tile")
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and o.shape == q.shape and lse.shape == q.shape[:3]
    check = R.check_attention_fp8(o, q, k, v, dq, dk, dv, causal=causal)
    assert check.ok, check
    ref_lse = reference_fp8.attention_fp8_lse(q, k, dq, dk, causal=causal)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max() < R.LSE_TOLERANCE


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal, return_lse", [(False, False), (True, False), (False, True), (True, True)])
def test_v_transposed_true_is_refused_where_the_kernel_is_built(head_dim, causal, return_lse):
    """V^T with its keys in their own order cannot be lowered (the packed P holds its keys in P8 key order, and
    V^T's rows need not start on TMA's 16 bytes): refused by the builder, saying why and what to use instead,
    at every head_dim, causal or not, with or without the LSE (before, it ran at Tile level and failed in
    overlap-softmax)."""
    with pytest.raises(ValueError) as refused:
        flash_attention(head_dim=head_dim, causal=causal, return_lse=return_lse, dtype="e4m3", v_transposed=True)
    message = str(refused.value)
    assert message.startswith("v_transposed=True (V^T [batch, heads_k, head_dim, seq_k] with its keys in their own "
                              "order) is not supported")
    for why in ("P8 key order", "16 bytes TMA needs", "v_transposed=False", "v_transposed='p8'", "p8_key_positions"):
        assert why in message


def test_descales_are_exact_factors():
    """Halving q and k (exact in e4m3 away from the subnormals) with descale 2 gives the same scores bit for bit;
    missing descales are 1."""
    q, k, v, _ = fp8_inputs(3, 1, 2, 2, 40, 60, 64, spread=1.0)
    q, v = (np.where(np.abs(x.astype(np.float32)) < 2.0**-5, 0, x.astype(np.float32)).astype(E4M3) for x in (q, v))
    ones = np.ones((1, 2), np.float32)
    base = tessera.attention(q, k, v, level="tile")
    np.testing.assert_array_equal(base.view(np.uint16), tessera.attention(q, k, v, descale_q=ones, descale_k=ones,
                                                                          descale_v=ones, level="tile").view(np.uint16))
    q_half, v_half = ((x.astype(np.float32) / 2).astype(E4M3) for x in (q, v))
    assert np.array_equal(q_half.astype(np.float32) * 2, q.astype(np.float32))  # no subnormal lost a bit
    assert np.array_equal(v_half.astype(np.float32) * 2, v.astype(np.float32))
    two = 2 * ones
    scaled = tessera.attention(q_half, k, v_half, descale_q=two, descale_v=two, level="tile")
    np.testing.assert_array_equal(base.view(np.uint16), scaled.view(np.uint16))


def test_p_is_rounded_to_e4m3_before_p_v():
    """One key block (seq_k <= BN, not causal): O = sum_j e4m3(2^8 P_j) v_j / sum_j 2^8 P_j * descale_v with
    P = exp(S - max S). The kernel matches this within bf16 rounding, and not the same sum with P unrounded."""
    q, k, v, (dq, dk, dv) = fp8_inputs(11, 1, 1, 1, 64, 96, 64, spread=2.0)
    o = tessera.attention(q, k, v, descale_q=dq, descale_k=dk, descale_v=dv, level="tile").astype(np.float64)
    q32, k32, v32 = (x.astype(np.float64) for x in (q, k, v))
    s = q32[0, 0] @ k32[0, 0].T * float(np.float32(dq[0, 0] * dk[0, 0] * np.float32(1 / 8)))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    total = (256 * p).sum(axis=1, keepdims=True)
    p8 = (256 * p).astype(np.float32).astype(E4M3).astype(np.float64)
    rounded = p8 @ v32[0, 0] / total * dv[0, 0]
    unrounded = 256 * p @ v32[0, 0] / total * dv[0, 0]
    bf16_step = 2.0**-8 * np.abs(rounded) + 1e-6  # the output's rounding, per element
    assert np.all(np.abs(o[0, 0] - rounded) <= bf16_step)
    assert np.max(np.abs(o[0, 0] - unrounded) / bf16_step) > 4


def test_saturated_inputs_stay_finite():
    """q, k at e4m3's largest value (448) and a large descale: huge scores, but finite; the softmax's max
    subtraction keeps O finite and right."""
    q, k, v, _ = fp8_inputs(5, 1, 1, 1, 20, 30, 64)
    q = np.where(np.arange(64) % 2 == 0, np.float32(448), q.astype(np.float32)).astype(E4M3)
    big = np.full((1, 1), 64.0, np.float32)
    o = tessera.attention(q, k, v, descale_q=big, level="tile")
    assert np.all(np.isfinite(o.astype(np.float32)))
    assert R.check_attention_fp8(o, q, k, v, big).ok


def _column_of_448(descale_v: float, level: str = "tile"):
    """Inputs whose V has 448 (e4m3's largest) in column 0 of head 0, with that head's descale_v `descale_v`:
    the exact output's column 0 there is 448 descale_v in every row, and the kernel's output at `level`."""
    q, k, v, (dq, dk, dv) = fp8_inputs(7, 1, 2, 2, 20, 40, 64)
    v = v.astype(np.float32)
    v[0, 0, :, 0] = 448
    v, dv = v.astype(E4M3), dv.copy()
    dv[0, 0] = descale_v
    o = tessera.attention(q, k, v, descale_q=dq, descale_k=dk, descale_v=dv, level=level).astype(np.float32)
    return o, (q, k, v, dq, dk, dv)


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("descale_v, overflows", [(1e36, 20), (5e35, 0)])
def test_the_lowered_kernel_overflows_where_the_exact_output_does(level, descale_v, overflows):
    o, inputs = _column_of_448(descale_v, level)
    check = R.check_attention_fp8(o, *inputs)
    assert check.ok and np.isinf(o).sum() == overflows and ("overflows bf16" in check.note) == bool(overflows)


def test_an_output_past_bf16s_range_is_held_to_inf_and_said():
    """448 x 1e36 overflows bf16: the kernel's inf there is right, and the verdict says the exact output
    overflows. The same-precision computation overflows there too, which made the head's tolerance infinite:
    the check passed any output in that head (a value doubled, an inf where the exact output is 1.1e36) and
    reported the other head's numbers."""
    o, inputs = _column_of_448(1e36)
    assert np.isinf(o[0, 0, :, 0]).all() and np.isfinite(o[0, 0, :, 1:]).all()
    check = R.check_attention_fp8(o, *inputs)
    assert check.ok and check.tolerance < 1e37, check
    assert "the exact output overflows bf16 in 20 element(s), first output[0, 0, 0, 0] = 4.48e+38" in check.note
    doubled = o.copy()
    doubled[0, 0, 0, 1] *= 2  # 1.24e36 to 2.48e36, against a tolerance of 7.2e35 in head 0
    assert not R.check_attention_fp8(doubled, *inputs).ok
    lost = o.copy()
    lost[0, 0, 5, 1] = np.inf
    check = R.check_attention_fp8(lost, *inputs)
    assert not check.ok and "output[0, 0, 5, 1] (batch 0, head 0, row 5) is inf where the exact output" in str(check)


def test_an_inf_or_nan_where_the_exact_output_fits_bf16_is_a_mismatch_naming_its_row():
    """448 x 5e35 = 2.24e38 fits bf16: the kernel's output is finite and right; an inf or NaN in its place is a
    MISMATCH that names the (batch, head, row)."""
    o, inputs = _column_of_448(5e35)
    check = R.check_attention_fp8(o, *inputs)
    assert np.isfinite(o).all() and check.ok and check.note == "", check
    for bad in (np.inf, np.nan):
        wrong = o.copy()
        wrong[0, 0, 7, 0] = bad
        check = R.check_attention_fp8(wrong, *inputs)
        assert not check.ok
        assert f"output[0, 0, 7, 0] (batch 0, head 0, row 7) is {bad} where the exact output 2.24e+38 is finite " \
               "in bf16" in check.note


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(level="tile", num_splits=2), ValueError, "not supported with num_splits=2"),
    (dict(level="tile", cluster=2), ValueError, "not supported with cluster=2"),
    (dict(level="tile", mask_mod=lambda b, h, i, j: i >= j), ValueError,
     "not supported with score_mod/mask_mod/block_mask"),
    (dict(level="tile", descale_k=np.ones((1, 3))), ValueError, r"descale_k must have shape \[batch, heads_k\]"),
    (dict(level="tile", descale_v=np.array([[np.inf, 1.0]])), ValueError, "descale_v must be finite"),
    (dict(level="tile", scale=[1.0]), ValueError, "scale must be a positive finite number"),
    (dict(level=None, causal="yes"), ValueError, "causal must be True or False"),
])
def test_the_api_refuses_what_fp8_does_not_support(kwargs, error, message):
    q, k, v, _ = fp8_inputs(0, 1, 2, 2, 8, 8, 64)
    with pytest.raises(error, match=message):
        tessera.attention(q, k, v, **kwargs)


def test_a_block_mask_is_refused_not_ignored():
    """Regression (unseen23f): FlexAttention's `block_mask` stands for a mask_mod, which the FP8 kernel does not
    take; FP8 inputs with one were run without it (the unmasked output, silently). Refused by name, as a
    mask_mod is, at every level."""
    from tessera.variants import create_block_mask

    q, k, v, _ = fp8_inputs(0, 1, 2, 2, 8, 8, 64)
    block_mask = create_block_mask(lambda b, h, i, j: j <= i, 1, 2, 8, 8)
    for level in ("tile", "target", None):
        with pytest.raises(ValueError, match="FP8 attention .* not supported with score_mod/mask_mod/block_mask"):
            tessera.attention(q, k, v, block_mask=block_mask, level=level)


def test_autograd_refuses_fp8_inputs_that_require_grad_before_the_forward():
    """Regression (unseen23f): `tessera.runtime.autograd.attention` on FP8 tensors that require grad ran the
    forward and failed in the backward on o's type ("q, k, v, o and do must have one element type"). FP8
    attention has no backward: refused by name before the forward; without grad it runs the forward."""
    torch = pytest.importorskip("torch")
    from tessera.runtime import autograd

    arrays = fp8_inputs(0, 1, 2, 2, 8, 8, 64)[:3]
    q, k, v = (torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn) for x in arrays)
    with pytest.raises(ValueError, match="FP8 .* require grad: FP8 attention has no backward"):
        autograd.attention(q.clone().requires_grad_(), k, v, level="tile")
    o = autograd.attention(q, k, v, level="tile")
    assert o.dtype == torch.bfloat16 and not o.requires_grad


def test_the_api_refuses_mixed_and_e5m2_inputs():
    q, k, v, (dq, _, _) = fp8_inputs(0, 1, 2, 2, 8, 8, 64)
    bf16 = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    with pytest.raises(ValueError, match="mixed FP8 and other inputs are not supported"):
        tessera.attention(q, k, bf16[2], level="tile")
    with pytest.raises(ValueError, match="descale_q, descale_k and descale_v apply to FP8 attention"):
        tessera.attention(*bf16, descale_q=dq, level="tile")
    with pytest.raises(UnsupportedKernel, match="element type float8_e5m2 is not supported"):
        tessera.attention(*(x.astype(ml_dtypes.float8_e5m2) for x in (q, k, v)), level="tile")


@pytest.mark.parametrize("kwargs, message", [
    (dict(dtype="e5m2"), "dtype 'e5m2' is not supported"),
    (dict(dtype="float8_e4m3fn"), r"dtype must be one of 'bf16', 'f16', 'e4m3'; got 'float8_e4m3fn'"),
    (dict(dtype="e4m3", bias=True), "not supported with bias"),
    (dict(dtype="e4m3", num_splits=2), r"not supported with num_splits > 1"),
    (dict(dtype="bf16", v_transposed=True), "v_transposed=True applies to the FP8 kernel"),
])
def test_the_builder_refuses_what_fp8_does_not_support(kwargs, message):
    with pytest.raises(ValueError, match=message):
        flash_attention(head_dim=64, **kwargs)


def test_the_fp8_kernel_steps_over_keys_in_multiples_of_32():
    """The P.V product contracts over the key block on the k32 e4m3 wgmma (the 16-bit kernels' 48 at 256 is not)."""
    from tessera.kernels.attention_fp8 import FP8_BLOCK_N

    assert all(n % 32 == 0 for n in FP8_BLOCK_N.values())
    assert "64x256xf8E4M3FN" in str(flash_attention(head_dim=256, dtype="e4m3"))  # the K block
