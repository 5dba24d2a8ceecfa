"""score_mod / mask_mod written with PyTorch (issue 29): torch functions, tensor methods and captured tensors
are traced as the NumPy ones are (`tessera.variants.torch_mods`), and the reference runs the same functions on
torch tensors. Skipped without torch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera  # noqa: E402
from tessera import reference  # noqa: E402
from tessera.numerics import BF16, round_to  # noqa: E402
from tessera.variants import ModTraceError, create_block_mask, trace_mod  # noqa: E402
from mods_checks import check_variant_forward_and_backward  # noqa: E402

DOC = torch.tensor([0] * 40 + [1] * 30 + [2] * 100)
SLOPES = torch.tensor([0.5, 0.25])
SLOPES_NP = SLOPES.numpy()
DOC_NP = DOC.numpy()


def torch_score(score, b, h, q_idx, kv_idx):
    return 20 * torch.tanh(score / 20) - SLOPES[h] * (q_idx - kv_idx).abs()


def numpy_score(score, b, h, q_idx, kv_idx):
    return 20 * np.tanh(score / 20) - SLOPES_NP[h] * np.abs(q_idx - kv_idx)


def torch_mask(b, h, q_idx, kv_idx):
    return torch.logical_and(DOC[q_idx] == DOC[kv_idx], q_idx >= kv_idx) | (kv_idx < 4)


def numpy_mask(b, h, q_idx, kv_idx):
    return np.logical_and(DOC_NP[q_idx] == DOC_NP[kv_idx], q_idx >= kv_idx) | (kv_idx < 4)


def clamped(score, b, h, q_idx, kv_idx):
    inside = torch.clamp(score, min=-3.0, max=3.0)
    return torch.where(q_idx >= kv_idx, inside, score.clamp(-1, 1)) + torch.exp(torch.minimum(score, torch.zeros(())))


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [round_to(rng.standard_normal((1, 2, n, 64)), BF16) for n in (100, 150, 150)] + \
        [round_to(rng.standard_normal((1, 2, 100, 64)), BF16)]


def test_torch_and_numpy_modifiers_give_the_same_kernel_bit_for_bit():
    q, k, v, _ = inputs()
    a = tessera.attention(q, k, v, score_mod=torch_score, mask_mod=torch_mask, return_lse=True, level="tile")
    b = tessera.attention(q, k, v, score_mod=numpy_score, mask_mod=numpy_mask, return_lse=True, level="tile")
    for x, y in zip(a, b):
        assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    assert np.array_equal(create_block_mask(torch_mask, 1, 2, 100, 150, 64, 64).kinds,
                          create_block_mask(numpy_mask, 1, 2, 100, 150, 64, 64).kinds)


@pytest.mark.parametrize("score_mod,mask_mod", [(torch_score, torch_mask), (clamped, None)],
                         ids=["tanh-alibi-documents", "where-clamp-minimum"])
def test_torch_modifiers_forward_and_backward_match_float64(score_mod, mask_mod):
    q, k, v, do = inputs(1)
    check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, "tile")


def test_captured_tensors_become_inputs():
    trace = trace_mod(torch_mask, "mask_mod")
    assert [a.name for a in trace.arrays] == ["mask_mod_DOC"]
    assert isinstance(trace.arrays[0].array, np.ndarray) and trace.arrays[0].array.tolist() == DOC.tolist()


def test_unsupported_torch_functions_are_refused_by_name():
    def sine(score, b, h, q_idx, kv_idx):
        return score + torch.sin(q_idx - kv_idx)

    def rounded(score, b, h, q_idx, kv_idx):
        return torch.div(score, 2.0, rounding_mode="nearest")

    with pytest.raises(ModTraceError, match=r"score_mod 'test_unsupported_torch_functions_are_refused_by_name"
                                            r".<locals>.sine' at .*: cannot trace torch.sin"):
        trace_mod(sine, "score_mod")
    with pytest.raises(ModTraceError, match="rounding_mode='nearest'"):
        trace_mod(rounded, "score_mod")


def test_torch_rounding_functions_trace_as_numpy_ones():
    """torch.floor / ceil / round / trunc, tensor methods, torch.div(rounding_mode='trunc'), torch.sign and
    torch.log1p are traced as their NumPy counterparts, and run at Tile level against the reference."""
    def quantized(score, b, h, q_idx, kv_idx):
        return (torch.floor(score * 4) / 4 + score.ceil() * 0.25 + torch.round(score, decimals=1)
                + torch.trunc(score) - torch.log1p((q_idx - kv_idx).abs()) * torch.sign(score) * 0.1
                + torch.div(q_idx - kv_idx, 3, rounding_mode="trunc") * 0.01)

    trace = trace_mod(quantized, "score_mod")
    assert all(trace.uses(op) for op in ("floor", "ceil", "rint", "trunc", "log"))
    q, k, v, _ = inputs(3)
    o = tessera.attention(q, k, v, score_mod=quantized, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, quantized, None).ok


def test_a_tensor_index_outside_a_captured_tensor_is_reported():
    def past_the_end(b, h, q_idx, kv_idx):
        return DOC[q_idx + 100] == DOC[kv_idx]

    with pytest.raises(ModTraceError, match=r"reads DOC\[q_idx \+ 100\], which reaches \[100, 199\] .* "
                                            r"outside \[0, 170\)"):
        create_block_mask(past_the_end, 1, 1, 100, 100, 64, 64)


# region attention-gym's code as written (torch's own and_masks / or_masks start from b.new_ones((), dtype=bool))

def generate_alibi_bias(heads):
    def alibi_mod(score, b, h, q_idx, kv_idx):
        scale = torch.exp2(-((h + 1) * 8.0 / heads))
        return score + (kv_idx - q_idx) * scale
    return alibi_mod


T5_BIAS = torch.linspace(-1, 1, 32).reshape(2, 16)


def t5_bias(score, b, h, q_idx, kv_idx):
    """Hugging Face's T5 bucket in torch: .to(torch.long), .float(), torch.min of two tensors, full_like."""
    relative_position = kv_idx - q_idx
    num_buckets = 8
    buckets = (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(relative_position.float() / max_exact) / np.log(32 / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return score + T5_BIAS[h, buckets + torch.where(relative_position < max_exact, relative_position, large)]


def pow_window(score, b, h, q_idx, kv_idx):
    return score - torch.pow(2.0, -(h + 1.0)) * (q_idx - kv_idx).abs().pow(2) / 64


def gym_masks():
    from torch.nn.attention.flex_attention import and_masks, or_masks

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 24

    def sink(b, h, q_idx, kv_idx):
        return kv_idx < 2

    return or_masks(and_masks(causal, window), sink)


@pytest.mark.parametrize("name", ["alibi+gym-masks", "t5", "pow"])
def test_attention_gym_torch_code_forward_and_backward(name):
    score_mod, mask_mod = {"alibi+gym-masks": (generate_alibi_bias(2), gym_masks()), "t5": (t5_bias, None),
                           "pow": (pow_window, None)}[name]
    q, k, v, do = inputs(2)
    o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse).ok
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level="tile")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def test_torch_reductions_and_non_scalar_constants_are_refused_by_name():
    def row_min(score, b, h, q_idx, kv_idx):
        return torch.min(score, 1)

    def block(b, h, q_idx, kv_idx):
        return b.new_ones((4, 4), dtype=torch.bool) & (q_idx >= kv_idx)

    with pytest.raises(ModTraceError, match="torch.min of one tensor"):
        trace_mod(row_min, "score_mod")
    with pytest.raises(ModTraceError, match=r"torch.new_ones of size \(4, 4\)"):
        trace_mod(block, "mask_mod")

# endregion


# region the reference's float64 without global state
def test_the_reference_calls_hooks_in_float64_without_changing_torchs_default_dtype():
    """`call_with_tensors` gives float64 where torch would take its default dtype, as NumPy does, for the calling
    thread only: torch's process-wide default stays float32, and another thread's torch calls keep it."""
    from tessera.variants.torch_mods import call_with_tensors, float64_defaults

    seen = {}

    def hook(h, q_idx):
        seen["default"] = torch.get_default_dtype()
        other = threading.Thread(target=lambda: seen.setdefault("other thread", torch.tensor(2.0).dtype))
        other.start()
        other.join()
        seen["dtypes"] = [x.dtype for x in (torch.tensor(2.0), torch.exp2(h), h / 3, torch.where(h > 1, 0.5, 1),
                                            (h > 1) * 0.5, h.float() * 0.5, h.to(torch.float32) / 3)]
        return torch.exp2(-((h + 1) * 8.0 / 3)) * q_idx

    h, q_idx = np.arange(4), np.arange(4) * 7
    out = call_with_tensors(hook, h, q_idx)
    assert out.dtype == np.float64 and np.array_equal(out, np.exp2(-((h + 1) * 8.0 / 3)) * q_idx)
    assert seen["default"] == seen["other thread"] == torch.float32 == torch.get_default_dtype()
    assert seen["dtypes"] == [torch.float64] * 5 + [torch.float32] * 2
    with float64_defaults():
        assert (torch.arange(3) * 0.5).dtype == torch.float64
    assert (torch.arange(3) * 0.5).dtype == torch.float32
# endregion
