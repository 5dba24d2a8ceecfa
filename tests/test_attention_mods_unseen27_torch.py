"""Attention variants of round 27 written in torch, through `tessera.runtime.autograd.attention`, against torch's
autograd through an eager float64 attention (`test_attention_mods_unseen24_torch.check`): a bf16 relative-bias
parameter read at the difference of an int32 position tensor (mixed dtypes, one batch entry left-padded); an f16
temperature per batch and head with `torch.clamp` to a learned per-head cap (tensor bounds: two gradients); a bool
[B, H, S] tensor read at [b, h, q_idx] under a causal mask, emptying some rows in some heads only, with a loss
that reads the LSE; a sigmoid-gated key bias beside a signed `torch.log1p` distance (three parameters); chunks of
48 over 191 positions or-ed with each chunk's last key, through Tessera's and torch's own `create_block_mask`; and
this round's fix in torch: a uint8 tensor's difference wraps in torch as in NumPy, refused by name, and `.long()`
of each read runs. Tile level by default over three shapes; `-m slow` a slice in the CTA simulator and the PTX
executor, and a learned key bias alone (the score unread) through autograd on the GPU path of the fake driver.
Skipped without torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera.runtime.autograd  # noqa: E402
from tessera.variants import ModTraceError  # noqa: E402
from test_attention_mods_unseen24_torch import assert_close, check, tessera_block_mask, torch_block_mask  # noqa: E402
from test_captured_gradients_gpu_path import fake_gpu, private_cache  # noqa: E402, F401 - fixtures

H, S, P = 8, 191, 300
POS = torch.stack([torch.arange(P), torch.cat([torch.zeros(9, dtype=torch.long), torch.arange(P - 9)])]).int()
KEEP = torch.rand(2, H, S, generator=torch.Generator().manual_seed(27)) > 0.2


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


# region modifiers

def mixed_dtypes(bias=None):
    if bias is None:
        bias = torch.nn.Parameter((torch.randn(H, 2 * P - 1, generator=_seeded(1)) * 0.5).bfloat16())

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, POS[b, q_idx] - POS[b, kv_idx] + P - 1]
    return score_mod, None, [bias]


def clamped_temperature(temp=None, caps=None):
    temp = torch.nn.Parameter((0.5 + torch.rand(2, H, generator=_seeded(2))).half()) if temp is None else temp
    caps = torch.nn.Parameter(torch.linspace(1.0, 4.0, H)) if caps is None else caps

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.clamp(score / temp[b, h], min=-caps[h], max=caps[h])
    return score_mod, None, [temp, caps]


def keep_rows():
    def mask_mod(b, h, q_idx, kv_idx):
        return KEEP[b, h, q_idx] & (q_idx >= kv_idx)
    return None, mask_mod, []


def gated(gate=None, key_bias=None, weight=None):
    gate = torch.nn.Parameter(torch.randn(H, generator=_seeded(3))) if gate is None else gate
    key_bias = torch.nn.Parameter(torch.randn(H, P, generator=_seeded(4)) * 0.5) if key_bias is None else key_bias
    weight = torch.nn.Parameter(torch.full((H,), 0.3)) if weight is None else weight

    def score_mod(score, b, h, q_idx, kv_idx):
        d = kv_idx - q_idx
        return score + torch.sigmoid(gate[h]) * key_bias[h, kv_idx] - weight[h] * torch.sign(d) * torch.log1p(d.abs())
    return score_mod, None, [gate, key_bias, weight]


def chunks():
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx // 48 == kv_idx // 48) | (kv_idx % 48 == 47)
    return None, mask_mod, []

# endregion


SHAPES = [(2, H, 2, S, S), (2, H, 1, 16, P), (2, H, 8, 1, 33)]  # (batch, heads, heads_k, seq_q, seq_k)
MODS = [mixed_dtypes, clamped_temperature, keep_rows, gated, chunks]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("make_mods", MODS, ids=lambda f: f.__name__)
def test_variant_at_tile_level(make_mods, shape):
    check(shape, make_mods, lse_weight=0.3 if make_mods is keep_rows else 0.0)


@pytest.mark.parametrize("block_mask_of", [tessera_block_mask, torch_block_mask], ids=lambda f: f.__name__)
def test_chunks_through_block_mask(block_mask_of):
    check((2, H, 2, S, S), chunks, block_mask_of=block_mask_of)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("head_dim", [96, 128])
def test_head_dims_and_types(head_dim, dtype):
    check((2, H, 2, 33, 100), clamped_temperature, dtype=dtype, head_dim=head_dim)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("make_mods", MODS, ids=lambda f: f.__name__)
def test_below_tile_level(make_mods, level):
    check((2, 2, 1, 50, 70), make_mods, level=level, lse_weight=0.3)


_IDS = torch.arange(S, dtype=torch.uint8) % 200


def test_a_uint8_tensors_wrapping_difference_is_refused_and_long_runs():
    """torch subtracts uint8 tensors modulo 256 as NumPy does: refused by name, where the kernel computed the
    difference in i32 (silently not torch's mask); converted with `.long()` it runs against the float64 twin."""
    q, k, v = (torch.randn(1, 2, S, 64, generator=_seeded(i)).bfloat16() for i in range(3))
    with pytest.raises(ModTraceError, match=r"cannot trace 'sub' of uint8 values read from a captured array, which "
                                            r"reaches \[-190, 190\].*\(torch: \.long\(\)\)"):
        tessera.runtime.autograd.attention(q, k, v, level="tile",
                                           mask_mod=lambda b, h, q_idx, kv_idx: _IDS[q_idx] - _IDS[kv_idx] < 40)

    def converted():
        return None, lambda b, h, q_idx, kv_idx: (_IDS[q_idx].long() - _IDS[kv_idx].long()).abs() < 40, []
    check((1, 2, 1, 40, S), converted)


@pytest.mark.slow
def test_a_key_bias_alone_on_the_gpu_path(fake_gpu, monkeypatch):
    """On the GPU path (the fake driver: the PTX the runtime loads, in the PTX executor), a score_mod that ignores
    the score (a learned key bias alone: K's ring stages are never read, and each is released only once its fill
    has landed) through autograd, the bias's gradient among the rest (about 15 s)."""
    from test_captured_gradients_gpu_path import _captured_on_device, _keep_on_device, _on_device

    _, fake = fake_gpu
    _keep_on_device(monkeypatch, fake)
    gen = _seeded(8)
    q, k, v = (_on_device(fake, torch.randn(1, 2, 70, 64, generator=gen).bfloat16(), requires_grad=True)
               for _ in range(3))
    bias = _captured_on_device(fake, torch.randn(2, 150, generator=gen).numpy() * 0.5, torch.float32)
    o = tessera.runtime.autograd.attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: bias[h, kv_idx])
    o.float().pow(2).sum().backward()
    leaves = [x.detach().cpu().double().requires_grad_() for x in (q, k, v, bias)]
    p = torch.softmax(leaves[3][None, :, None, :70].expand(1, 2, 70, 70), -1)
    (p @ leaves[2]).pow(2).sum().backward()
    for name, got, want in zip(("dQ", "dK", "dV", "d bias"), (q, k, v, bias), leaves):
        assert_close(name, got.grad.cpu(), torch.zeros_like(want) if want.grad is None else want.grad)
