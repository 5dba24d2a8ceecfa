"""Attention variants of round 24 written in torch, through `tessera.runtime.autograd.attention`, against torch's
autograd through an eager float64 attention that runs the same hooks on broadcast index grids: a Gemma-2
soft-cap whose cap is a learned per-head parameter (its gradient tanh(s/c) - (s/c)(1 - tanh^2(s/c))), in bf16 and
f16; ALiBi slopes kept as a bf16 parameter under GQA 4:1 with a causal mask_mod (their .grad bf16); HF
transformers' T5 `_relative_position_bucket`, verbatim (`torch.min`, `torch.full_like`, `math.log`,
`.to(torch.long)`), bidirectional and causal, indexing an nn.Embedding's weight [buckets, heads]; prefix-LM from
a per-batch int32 length tensor through torch's own `create_block_mask` and Tessera's as `block_mask=`; causal
documents with a learned [2S - 1] table through `block_mask=`; FlexAttention's own `noop_mask`, `and_masks` and
`or_masks`; refusals by name; and a loss that reads the LSE beside O
(`return_lse=True`), with rows a mask_mod empties, a caller's scale and head_dim 96 and 128. Tile level by default;
`-m slow` a slice in the CTA simulator and the PTX executor, and a mask that empties a whole query block and key
block on the GPU path through the fake driver (NaN-filled fresh memory). Skipped without torch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera.runtime.autograd  # noqa: E402
from tessera.variants import create_block_mask  # noqa: E402
from test_captured_gradients_gpu_path import fake_gpu, private_cache  # noqa: E402, F401 - fixtures

S = 177


def eager(q, k, v, score_mod, mask_mod, causal=False, scale=None):
    """(O, LSE) in the inputs' precision (float64 here) by torch ops: the hooks on broadcast index grids, GQA by
    repeating K and V, bottom-right `causal`, rows that see no key 0 with LSE -inf."""
    batch, heads, seq_q, dim = q.shape
    heads_k, seq_k = k.shape[1], k.shape[2]
    k, v = (x.repeat_interleave(heads // heads_k, 1) for x in (k, v))
    s = q @ k.transpose(-1, -2) * (dim ** -0.5 if scale is None else scale)
    b, h, q_idx, kv_idx = (torch.arange(n).view(*(n if i == j else 1 for j in range(4)))
                           for i, n in enumerate((batch, heads, seq_q, seq_k)))
    if score_mod is not None:
        s = score_mod(s, b, h, q_idx, kv_idx)
    visible = torch.ones(s.shape, dtype=torch.bool)
    if mask_mod is not None:
        visible = visible & mask_mod(b, h, q_idx, kv_idx)
    if causal:
        visible = visible & (q_idx + seq_k - seq_q >= kv_idx)
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return (torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v), lse


def assert_close(name, got, want, relative=2e-2, absolute=2e-3):
    got, want = got.detach().double(), want.detach().double()
    error, tolerance = (got - want).abs().max().item(), relative * want.abs().max().item() + absolute
    assert error <= tolerance, f"{name}: error {error:.3g} over {tolerance:.3g}"


def check(shape, make_mods, level="tile", dtype=torch.bfloat16, head_dim=64, causal=False, scale=None,
          block_mask_of=None, lse_weight=0.0):
    """The loss sum(O^2) + lse_weight * sum(LSE^2) (over the rows that see a key) through autograd at `level`:
    O, LSE and the gradients of q, k, v and the hooks' parameters against `eager` in float64.
    `make_mods(*params)` returns (score_mod, mask_mod, params), made with the given parameters (float64 copies)
    or new ones; `block_mask_of(mask_mod, shape)`, the block mask passed instead of the mask_mod."""
    batch, heads, heads_k, seq_q, seq_k = shape
    gen = torch.Generator().manual_seed(24)
    q = torch.randn(batch, heads, seq_q, head_dim, generator=gen).to(dtype).requires_grad_()
    k, v = (torch.randn(batch, heads_k, seq_k, head_dim, generator=gen).to(dtype).requires_grad_() for _ in range(2))
    score_mod, mask_mod, params = make_mods()
    hooks = {"score_mod": score_mod, "causal": causal, "scale": scale}
    hooks.update({"block_mask": block_mask_of(mask_mod, shape)} if block_mask_of else {"mask_mod": mask_mod})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rung taken below Tile level
        o, lse = tessera.runtime.autograd.attention(q, k, v, level=level, return_lse=True, **hooks)
        seen = torch.isfinite(lse)
        (o.float().pow(2).sum() + lse_weight * lse[seen].pow(2).sum()).backward()
    wanted = [x.detach().double().requires_grad_() for x in (q, k, v, *params)]
    score64, mask64, _ = make_mods(*wanted[3:])
    o64, lse64 = eager(*wanted[:3], score64, mask64, causal, scale)
    assert torch.equal(seen, torch.isfinite(lse64))
    (o64.pow(2).sum() + lse_weight * lse64[seen].pow(2).sum()).backward()
    assert_close("O", o.float(), o64)
    assert_close("LSE", lse[seen], lse64[seen], 1e-3, 1e-2)
    for name, got, want in zip(("dQ", "dK", "dV"), (q, k, v), wanted):
        assert_close(name, got.grad, want.grad)
    for i, (got, want) in enumerate(zip(params, wanted[3:])):
        assert got.grad is not None and got.grad.dtype == got.dtype, f"parameter {i}: {got.grad}"
        assert_close(f"d parameter {i}", got.grad, want.grad)


# region modifiers

def learned_softcap(cap=None):
    cap = torch.nn.Parameter(torch.tensor([20.0, 30.0, 50.0, 10.0])) if cap is None else cap

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap[h] * torch.tanh(score / cap[h])
    return score_mod, None, [cap]


def alibi_bf16(slopes=None):
    if slopes is None:
        slopes = torch.nn.Parameter((-(2.0 ** -torch.arange(1, 9, dtype=torch.float32))).bfloat16())

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (q_idx - kv_idx).abs()

    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    return score_mod, mask_mod, [slopes]


def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """HF transformers' T5Attention._relative_position_bucket, as written there."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def hf_t5(weight=None, bidirectional=True):
    if weight is None:
        embedding = torch.nn.Embedding(32, 4)
        torch.nn.init.normal_(embedding.weight, std=0.5, generator=torch.Generator().manual_seed(5))
        weight = embedding.weight

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + weight[_relative_position_bucket(kv_idx - q_idx, bidirectional=bidirectional), h]
    causal = None if bidirectional else (lambda b, h, q_idx, kv_idx: q_idx >= kv_idx)
    return score_mod, causal, [weight]


def hf_t5_causal(weight=None):
    return hf_t5(weight, bidirectional=False)


LENGTHS = torch.tensor([3, 0, 60], dtype=torch.int32)                   # a prefix per batch entry, one empty


def prefix_lm():
    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < LENGTHS[b]) | (q_idx >= kv_idx)
    return None, mask_mod, []


DOCUMENTS = torch.repeat_interleave(torch.arange(4), torch.tensor([40, 1, 50, 86]))


def documents(rel=None):
    rel = torch.nn.Parameter(torch.linspace(-1, 1, 2 * S - 1)) if rel is None else rel

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + rel[q_idx - kv_idx + S - 1]

    def mask_mod(b, h, q_idx, kv_idx):
        return (DOCUMENTS[q_idx] == DOCUMENTS[kv_idx]) & (q_idx >= kv_idx)
    return score_mod, mask_mod, [rel]


def rows_left_empty():
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx % 5 != 2) & ((kv_idx < 2) | (q_idx - kv_idx < 20))
    return None, mask_mod, []

# endregion


def tessera_block_mask(mask_mod, shape):
    return create_block_mask(mask_mod, shape[0], shape[1], shape[3], shape[4], device="cpu", BLOCK_SIZE=128)


def torch_block_mask(mask_mod, shape):
    from torch.nn.attention.flex_attention import create_block_mask as torch_create_block_mask

    return torch_create_block_mask(mask_mod, shape[0], None, shape[3], shape[4], device="cpu")


SHAPES = [(1, 4, 2, S, S), (2, 4, 4, 7, 130)]  # (batch, heads, heads_k, seq_q, seq_k)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_learned_softcap(dtype, shape):
    check(shape, learned_softcap, dtype=dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_alibi_slopes_in_bf16_under_gqa(shape):
    check((shape[0], 8, 2, *shape[3:]), alibi_bf16)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("make_mods", [hf_t5, hf_t5_causal], ids=lambda f: f.__name__)
def test_hf_t5_relative_position_bucket(make_mods, shape):
    check(shape, make_mods)


@pytest.mark.parametrize("block_mask_of", [torch_block_mask, tessera_block_mask], ids=lambda f: f.__name__)
def test_prefix_lm_from_a_length_tensor_through_block_mask(block_mask_of):
    check((3, 4, 2, S, S), prefix_lm, block_mask_of=block_mask_of)


@pytest.mark.parametrize("block_mask_of", [torch_block_mask, tessera_block_mask], ids=lambda f: f.__name__)
def test_documents_with_a_learned_table_through_block_mask(block_mask_of):
    check((1, 4, 2, S, S), documents, block_mask_of=block_mask_of)


@pytest.mark.parametrize("shape", [(1, 4, 2, 100, 130), (2, 4, 1, 1, 7)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", ["softcap", "scale", "f16-causal", "empty-rows", "head_dim-96", "head_dim-128"])
def test_a_loss_that_reads_the_lse(case, shape):
    options = {"scale": {"scale": 0.3}, "f16-causal": {"dtype": torch.float16, "causal": True},
               "head_dim-96": {"head_dim": 96}, "head_dim-128": {"head_dim": 128}}.get(case, {})
    check(shape, rows_left_empty if case == "empty-rows" else learned_softcap, lse_weight=0.3,
          causal=case == "empty-rows" or options.pop("causal", False), **options)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("make_mods", [learned_softcap, alibi_bf16, hf_t5, documents], ids=lambda f: f.__name__)
def test_below_tile_level(make_mods, level):
    shape = (1, 8 if make_mods is alibi_bf16 else 4, 2, 50, S if make_mods is documents else 70)
    check(shape, make_mods, level=level, lse_weight=0.3)


@pytest.mark.slow
def test_empty_blocks_on_the_gpu_path_write_every_output(fake_gpu):
    """On the GPU path (the fake driver: the PTX the runtime loads, in the PTX executor; pretend CUDA tensors whose
    fresh memory reads as NaN), a mask_mod that leaves query block 0 and key block 0 without a visible key: the
    forward still stores that block's O (0) and LSE (-inf), the backward its dQ, dK and dV (0), as level "ptx"
    does into zeroed memory (about 12 s)."""
    from mods_reference import assert_close as assert_close_numpy
    from mods_reference import inputs, reference
    from test_captured_gradients_gpu_path import _on_device

    _, fake = fake_gpu

    def late_blocks(b, h, q_idx, kv_idx):
        return (q_idx >= 128) & (kv_idx >= 128) & (kv_idx <= q_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return 30 * np.tanh(score / 30)
    q, k, v, do = inputs((1, 1, 1, 200, 200), 4)
    hooks = {"score_mod": softcap, "mask_mod": late_blocks}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a rung taken below Tile level
        o, lse = tessera.attention(*(_on_device(fake, x) for x in (q, k, v)), return_lse=True, **hooks)
        lse = _on_device(fake, lse.detach())  # the fake's lse[..., 0] is a host tensor; a GPU's stays on it
        grads = tessera.attention_backward(*(_on_device(fake, x) for x in (q, k, v)), o, lse, _on_device(fake, do),
                                           **hooks)
    want = reference(q, k, v, do, softcap, late_blocks, lambda s, b, h, q_idx, kv_idx: 1 - np.tanh(s / 30) ** 2)
    for name, got, expected in zip(("O", "dQ", "dK", "dV"), (o, *grads), (want[0], *want[2:5])):
        assert_close_numpy(name, got.detach().float().numpy(), expected)
    assert_close_numpy("LSE", lse.detach().numpy(), want[1], 1e-3, 1e-2)


_IDS = torch.repeat_interleave(torch.arange(2), torch.tensor([10, 20]))
_SLOPES = torch.nn.Parameter(torch.tensor([0.5, 0.25]))


@pytest.mark.parametrize("hooks, error, message", [
    ({"mask_mod": lambda b, h, q_idx, kv_idx: _IDS.to(torch.int32)[q_idx] == _IDS[kv_idx]}, "ModTraceError",
     r"mask_mod '.*' at .*: cannot trace .to\(torch.int32\) of the captured array _IDS"),
    ({"mask_mod": lambda b, h, q_idx, kv_idx: q_idx - kv_idx < _SLOPES[h] * 40}, "ValueError",
     "the mask_mod reads _SLOPES, which requires grad: a mask passes no gradient"),
    ({"score_mod": lambda score, b, h, q_idx, kv_idx: score + score.new_tensor(0.5)}, "ModTraceError",
     r"score_mod '.*' at .*: cannot trace the attribute .new_tensor of a traced value"),
], ids=["to-dtype", "mask-requires-grad", "new_tensor"])
def test_refused_by_name(hooks, error, message):
    """What the docs refuse (a captured tensor's .to(dtype), a mask_mod's tensor that requires grad) and what has
    no traced counterpart (`score.new_tensor`), refused by name before anything runs."""
    q, k, v = (torch.randn(1, 2, 30, 64, generator=torch.Generator().manual_seed(i)).bfloat16().requires_grad_()
               for i in range(3))
    with pytest.raises(Exception, match=message) as raised:
        tessera.runtime.autograd.attention(q, k, v, level="tile", **hooks)
    assert type(raised.value).__name__ == error


def _causal_numpy(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _everything_numpy(b, h, q_idx, kv_idx):
    return np.ones((), bool)


@pytest.mark.parametrize("case", ["noop_mask", "and_masks", "or_masks", "new_ones"])
def test_flex_attentions_own_masks(case):
    """FlexAttention's `noop_mask` (its `b.new_ones(size=(), dtype=torch.bool, device=b.device)`) alone and in
    `and_masks` / `or_masks`, and a mask made with `b.new_ones`, against NumPy twins."""
    from mods_reference import check as check_numpy
    from torch.nn.attention import flex_attention as flex

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 20

    mask_mod, twin = {
        "noop_mask": (flex.noop_mask, _everything_numpy),
        "and_masks": (flex.and_masks(causal, flex.noop_mask), _causal_numpy),
        "or_masks": (flex.or_masks(window, flex.noop_mask), _everything_numpy),
        "new_ones": (lambda b, h, q_idx, kv_idx: b.new_ones(size=(), dtype=torch.bool) & (q_idx >= kv_idx),
                     _causal_numpy)}[case]
    check_numpy((1, 2, 1, 37, 45), "tile", None, mask_mod, reference_mods=(None, twin))
