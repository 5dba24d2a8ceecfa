"""Attention variants in torch as FlexAttention users and attention-gym write them (issue 29, round 22), against
the float64 reference of `mods_reference` through NumPy twins of each modifier: what this round found refused,
each now traced (`F.softplus`, `F.logsigmoid`, `F.gelu`, `F.silu`, `torch.erf`, a `torch.library.custom_op` as
attention-gym's approximate tanh, `F.relu` passed into a generator, a captured tensor's `.shape` / `.size()` /
`len()`), autograd through them, and attention-gym's JetSpec, shared-prefix and Sandwich modifiers, which traced as
found. Tile level by default; `-m slow` the fixes at target and PTX level. Skipped without torch."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from mods_reference import assert_close, check, grids
from test_attention_mods_unseen22 import H, HK, LEVELS, REL2, W, sinks_window

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera.runtime.autograd  # noqa: E402
from tessera.variants import ModTraceError, trace_mod  # noqa: E402


def test_a_captured_tensors_shape_sizes_its_index():
    table = torch.tensor(REL2)

    def sized(score, b, h, q_idx, kv_idx):
        d = torch.clamp(kv_idx - q_idx + W, 0, table.shape[1] - 1)
        return score + table[h % len(table), torch.clamp(d, max=table.size(1) - 1)] + 0 * (table.numel() + table.dim())

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return score + REL2[h, np.clip(kv_idx - q_idx + W, 0, 2 * W)]
    check((1, H, HK, 60, 80), "tile", sized, None, reference_mods=(numpy_twin, None))


@pytest.mark.parametrize("level", LEVELS)
def test_softplus_and_logsigmoid(level):
    """`F.softplus(x, beta, threshold)` (torch's form: x past the threshold) and `F.logsigmoid` are traced (they
    were refused by name), against NumPy's logaddexp."""
    functional = torch.nn.functional

    def softplus(score, b, h, q_idx, kv_idx):
        return functional.softplus(score, beta=2.0, threshold=3.0) + functional.logsigmoid(score - 0.1 * kv_idx)

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return np.where(2 * score > 3, score, np.logaddexp(0, 2 * score) / 2) - np.logaddexp(0, 0.1 * kv_idx - score)

    def d_twin(s, b, h, q_idx, kv_idx):
        return np.where(2 * s > 3, 1.0, 1 / (1 + np.exp(-2 * s))) + 1 / (1 + np.exp(s - 0.1 * kv_idx))
    check((1, H, HK, 60, 80), level, softplus, None, d_twin, reference_mods=(numpy_twin, None))


def test_autograd_through_softplus_of_a_learned_slope_and_a_table_sized_by_len():
    """`tessera.runtime.autograd.attention` with GQA, a bottom-right causal mask with sinks, and a score_mod that
    takes F.softplus of a learned per-head slope and reads a learned table clamped by `len(rel)`: the gradients
    of q, k, v and both parameters against torch's autograd through an eager float64 attention."""
    functional = torch.nn.functional
    seq_q, seq_k = 70, 90
    gen = torch.Generator().manual_seed(22)
    q = torch.randn(1, H, seq_q, 64, generator=gen).bfloat16().requires_grad_()
    k, v = (torch.randn(1, HK, seq_k, 64, generator=gen).bfloat16().requires_grad_() for _ in range(2))
    slope = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.0]))
    rel = torch.nn.Parameter(torch.randn(2 * W + 1, generator=gen) * 0.3)
    do = torch.randn(1, H, seq_q, 64, generator=gen)

    def biases(slopes, table, h, q_idx, kv_idx):
        d = torch.clamp(kv_idx - q_idx + W, 0, len(table) - 1)
        return table[d] - functional.softplus(slopes[h]) * 0.05 * (q_idx - kv_idx).abs()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + biases(slope, rel, h, q_idx, kv_idx)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx + (seq_k - seq_q) >= kv_idx) | (kv_idx < 4)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = tessera.runtime.autograd.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, level="tile")
    (o.float() * do).sum().backward()
    wanted = [x.detach().double().requires_grad_() for x in (q, k, v, slope, rel)]
    q64, k64, v64, slope64, rel64 = wanted
    grid = [torch.from_numpy(np.ascontiguousarray(np.broadcast_to(g, (1, H, seq_q, seq_k))))
            for g in grids(1, H, seq_q, seq_k)]
    s = q64 @ k64.repeat_interleave(H // HK, 1).transpose(-1, -2) / 8 + biases(slope64, rel64, *grid[1:])
    s = s.masked_fill(~mask_mod(*grid), float("-inf"))
    (torch.softmax(s, -1) @ v64.repeat_interleave(H // HK, 1) * do.double()).sum().backward()
    for name, got, want in zip(("dQ", "dK", "dV", "d slope", "d rel"), (q, k, v, slope, rel), wanted):
        assert_close(name, got.grad.double().numpy(), want.grad.numpy())


@functools.cache
def _tanh_approx():
    """attention-gym's `approx::tanh`, registered once a process (under a name of this test's)."""
    @torch.library.custom_op("tessera_unseen22::tanh_approx", mutates_args=(), schema="(Tensor x) -> Tensor")
    def tanh_approx(x):
        return torch.tanh(x)
    return tanh_approx


@pytest.mark.parametrize("level", LEVELS)
def test_a_custom_op_is_traced_as_its_python_definition(level):
    """attention-gym's soft-cap with `approx=True` calls an operator made with `torch.library.custom_op` (was
    refused as 'torch.tanh.default'): traced as the function it was defined from, which the reference runs; an
    operator with no Python definition is refused by its `torch.ops` name."""
    tanh_approx = _tanh_approx()

    def generate_tanh_softcap(soft_cap, approx=False):
        tanh = tanh_approx if approx else torch.tanh

        def tanh_softcap(score, b, h, q_idx, kv_idx):
            return soft_cap * tanh(score / soft_cap)
        return tanh_softcap

    def numpy_twin(score, b, h, q_idx, kv_idx):
        return 5 * np.tanh(score / 5)
    check((1, H, HK, 60, 80), level, generate_tanh_softcap(5, approx=True), sinks_window,
          lambda s, b, h, q_idx, kv_idx: 1 - np.tanh(s / 5) ** 2, reference_mods=(numpy_twin, sinks_window))
    with pytest.raises(ModTraceError, match=r"torch.ops.aten.tanh \(an operator with no Python definition"):
        trace_mod(lambda score, b, h, q_idx, kv_idx: torch.ops.aten.tanh.default(score), "score_mod")


@pytest.mark.parametrize("level", LEVELS)
def test_attention_gym_generators_with_torch_functions_passed_in(level):
    """attention-gym's generators as written there: `generate_activation_score_mod(activation=F.relu)` calls the
    torch function it closes over (was refused as 'torch.relu': the rebinding copied F.relu as a user's helper,
    so the tracer no longer knew it), the block diffusion mask and `batchify_mask_mod(causal_mask, 16)`."""

    def generate_activation_score_mod(activation, offset=1.0):
        def activation_score_mod(score, b, h, q_idx, kv_idx):
            return torch.log(activation(score) + offset)
        return activation_score_mod

    def generate_block_diffusion_mask(seq_len, block_size):
        def block_diffusion_mask(b, h, q_idx, kv_idx):
            q_noised, kv_noised = q_idx < seq_len, kv_idx < seq_len
            q_block, kv_block = (q_idx % seq_len) // block_size, (kv_idx % seq_len) // block_size
            block_diagonal = (q_block == kv_block) & (q_noised == kv_noised)
            offset_block_causal = (q_block > kv_block) & q_noised & ~kv_noised
            return block_diagonal | offset_block_causal | ((q_block >= kv_block) & ~q_noised & ~kv_noised)
        return block_diffusion_mask

    def batchify_mask_mod(mask_mod, size):
        def batched_mask_mod(b, h, q_idx, kv_idx):
            return (q_idx // size == kv_idx // size) & mask_mod(b, h, q_idx % size, kv_idx % size)
        return batched_mask_mod

    def d_relu_log(s, b, h, q_idx, kv_idx):
        return np.where(s > 0, 1 / (s + 1), 0.0)

    relu_twin = (lambda score, b, h, q_idx, kv_idx: np.log(np.maximum(score, 0) + 1.0))
    mask = generate_block_diffusion_mask(45, 8)
    check((1, H, HK, 90, 90), level, generate_activation_score_mod(torch.nn.functional.relu), mask, d_relu_log,
          reference_mods=(relu_twin, mask))
    check((1, H, HK, 90, 90), level, None, batchify_mask_mod(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, 16))


@pytest.mark.parametrize("level", LEVELS)
def test_gelu_silu_and_erf(level):
    """`F.gelu` (exact, through erf to 1.2e-7, and approximate="tanh"), `F.silu`, `torch.erf`, `torch.special.erf`
    and `.erf()` (all refused by name before; attention-gym's activation score_mod takes F.gelu by default),
    against math.erf in float64 with the derivative by hand."""
    functional = torch.nn.functional
    import math

    def activations(score, b, h, q_idx, kv_idx):
        return (score + 0.5 * functional.gelu(score) + 0.25 * functional.gelu(score, approximate="tanh")
                + 0.25 * functional.silu(score) + 0.05 * (torch.erf(score) + torch.special.erf(score) + score.erf()))

    erf = np.vectorize(math.erf)
    c = math.sqrt(2 / math.pi)

    def twin(score, b, h, q_idx, kv_idx):
        gelu_tanh = 0.5 * score * (1 + np.tanh(c * (score + 0.044715 * score ** 3)))
        return (score + 0.25 * score * (1 + erf(score / math.sqrt(2))) + 0.25 * gelu_tanh
                + 0.25 * score / (1 + np.exp(-score)) + 0.15 * erf(score))

    def d_twin(s, b, h, q_idx, kv_idx):
        phi, sigmoid, u = np.exp(-s * s / 2) / math.sqrt(2 * math.pi), 1 / (1 + np.exp(-s)), c * (s + 0.044715 * s ** 3)
        d_gelu_tanh = 0.5 * (1 + np.tanh(u)) + 0.5 * s * (1 - np.tanh(u) ** 2) * c * (1 + 3 * 0.044715 * s * s)
        return (1 + 0.5 * (0.5 * (1 + erf(s / math.sqrt(2))) + s * phi) + 0.25 * d_gelu_tanh
                + 0.25 * sigmoid * (1 + s * (1 - sigmoid)) + 0.15 * 2 / math.sqrt(math.pi) * np.exp(-s * s))
    check((1, H, HK, 60, 80), level, activations, sinks_window, d_twin, reference_mods=(twin, sinks_window))


@pytest.mark.parametrize("name", ["jetspec-tree", "jetspec-training", "shared-prefix", "sandwich"])
def test_attention_gym_masks_and_biases_in_torch(name):
    """attention-gym's JetSpec tree-causal mask (a [nodes, nodes] bool tensor at q_idx and a `.clamp`ed key) and
    training mask (`//` and `%` of negative differences), its shared-prefix mask (offsets read at document ids
    read at positions, three gathers deep) and its Sandwich bias (a cosine table summed in torch, outside the
    modifier), each against a NumPy twin."""
    if name == "jetspec-tree":
        parents = [-1] + [(i - 1) // 2 for i in range(1, 63)]
        ancestor = np.eye(63, dtype=bool)
        for node, parent in enumerate(parents[1:], start=1):
            ancestor[node] |= ancestor[parent]
        tensor = torch.from_numpy(ancestor)

        def tree(table, clamp):
            def mask_mod(b, h, q_idx, kv_idx):
                node = clamp(kv_idx - 37)
                return (kv_idx < 37) | ((kv_idx >= 37) & (kv_idx < 100) & table[q_idx, node])
            return mask_mod
        mods = (None, tree(tensor, lambda x: x.clamp(min=0, max=62)))
        twins, shape = (None, tree(ancestor, lambda x: np.clip(x, 0, 62))), (1, H, HK, 63, 100)
    elif name == "jetspec-training":
        def mask_mod(b, h, q_idx, kv_idx):
            kv_block_idx = kv_idx - 37
            same = (kv_idx >= 37) & (q_idx // 8 == kv_block_idx // 8) & (kv_block_idx % 8 <= q_idx % 8)
            return (kv_idx < 37) | same
        mods = twins = (None, mask_mod)
        shape = (1, H, HK, 64, 101)
    elif name == "shared-prefix":
        offsets = np.array([0, 10, 25, 31, 50, 70, 71, 90])
        prefix_of = np.array([0, 0, 0, 3, 3, 3, 6])
        documents = np.repeat(np.arange(7), np.diff(offsets))

        def shared_prefix(offsets, prefix_of, documents):
            def mask_mod(b, h, q_idx, kv_idx):
                doc = documents[q_idx]
                prefix = prefix_of[doc]
                own = (kv_idx >= offsets[doc]) & (q_idx >= kv_idx)
                return own | ((doc != prefix) & (kv_idx >= offsets[prefix]) & (kv_idx < offsets[prefix + 1]))
            return mask_mod
        mods = (None, shared_prefix(*(torch.from_numpy(a) for a in (offsets, prefix_of, documents))))
        twins, shape = (None, shared_prefix(offsets, prefix_of, documents)), (1, H, HK, 90, 90)
    else:
        freqs = 1.0 / 10000 ** (2 * torch.arange(64, dtype=torch.float32) / 128)
        distances = torch.arange(-(-399 // 8) * 8, dtype=torch.float32) - 199
        rel_bias = torch.cos(distances.abs()[:, None] * freqs).sum(dim=-1)
        head_scale = H / (8.0 * torch.arange(1, H + 1, dtype=torch.float32))

        def sandwich(rel_bias, head_scale):
            def score_mod(score, b, h, q_idx, kv_idx):
                return score + rel_bias[q_idx - kv_idx + 199] * head_scale[h]
            return score_mod
        mods = (sandwich(rel_bias, head_scale), None)
        twins, shape = (sandwich(rel_bias.double().numpy(), head_scale.double().numpy()), None), (1, H, HK, 90, 150)
    check(shape, "tile", *mods, reference_mods=twins)


@pytest.mark.parametrize("level", LEVELS)
def test_leaky_relu_hardtanh_elu_softsign_expit_and_one_sided_clamps(level):
    """`F.leaky_relu`, `F.hardtanh`, `F.elu`, `F.softsign`, `torch.special.expit`, `torch.clamp_min` and the
    methods `.clamp_min()` / `.clamp_max()` (each refused by name before), against NumPy twins with the
    derivative by hand; `inplace=True` is refused by name."""
    functional = torch.nn.functional

    def activations(score, b, h, q_idx, kv_idx):
        return (functional.leaky_relu(score, 0.1) + 0.5 * functional.hardtanh(score, -1.5, 2.0)
                + 0.25 * functional.elu(score, alpha=0.5) + functional.softsign(score)
                + torch.special.expit(score) + 0.01 * torch.clamp_min(q_idx - kv_idx, -8)
                + 0.02 * (kv_idx - q_idx).clamp_max(4) + 0.1 * score.clamp_min(-0.5))

    def twin(s, b, h, q_idx, kv_idx):
        return (np.where(s >= 0, s, 0.1 * s) + 0.5 * np.clip(s, -1.5, 2.0)
                + 0.25 * np.where(s > 0, s, 0.5 * np.expm1(s)) + s / (1 + np.abs(s)) + 1 / (1 + np.exp(-s))
                + 0.01 * np.maximum(q_idx - kv_idx, -8) + 0.02 * np.minimum(kv_idx - q_idx, 4)
                + 0.1 * np.maximum(s, -0.5))

    def d_twin(s, b, h, q_idx, kv_idx):
        sigmoid = 1 / (1 + np.exp(-s))
        return (np.where(s >= 0, 1.0, 0.1) + 0.5 * ((s > -1.5) & (s < 2.0))
                + 0.25 * np.where(s > 0, 1.0, 0.5 * np.exp(s)) + 1 / (1 + np.abs(s)) ** 2
                + sigmoid * (1 - sigmoid) + 0.1 * (s > -0.5))
    check((1, H, HK, 60, 80), level, activations, sinks_window, d_twin, reference_mods=(twin, sinks_window))
    with pytest.raises(ModTraceError, match=r"torch.elu with inplace=True"):
        trace_mod(lambda score, b, h, q_idx, kv_idx: functional.elu(score, inplace=True), "score_mod")


def test_a_score_mod_defined_in_forward_reads_self():
    """The usual FlexAttention model: `forward` defines a score_mod over `self.rel_bias` (a Parameter) and a callable
    `self.window` module it holds. It was refused ('indexing with a traced value a tensor the function makes', or
    "'functools.partial' object has no attribute 'rel_bias'"): `self` in a closure is now read through a copy whose
    tensors are kernel inputs, so the forward is right and autograd fills `rel_bias.grad`."""
    class Window(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("widths", torch.tensor([8, 20, 40, 80]))

        def forward(self, b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < self.widths[h])

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rel_bias = torch.nn.Parameter(torch.randn(159, generator=torch.Generator().manual_seed(3)) * 0.3)
            self.window = Window()

        def forward(self, q, k, v):
            def score_mod(score, b, h, q_idx, kv_idx):
                return score + self.rel_bias[q_idx - kv_idx + 79]

            def mask_mod(b, h, q_idx, kv_idx):
                return self.window(b, h, q_idx, kv_idx)
            return tessera.runtime.autograd.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, level="tile")

    model, gen = Model(), torch.Generator().manual_seed(4)
    q = torch.randn(1, H, 60, 64, generator=gen).bfloat16().requires_grad_()
    k, v = (torch.randn(1, HK, 80, 64, generator=gen).bfloat16().requires_grad_() for _ in range(2))
    do = torch.randn(1, H, 60, 64, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = model(q, k, v)
    (o.float() * do).sum().backward()
    rel = model.rel_bias.detach().double().requires_grad_()
    grid = [torch.from_numpy(np.ascontiguousarray(np.broadcast_to(g, (1, H, 60, 80)))) for g in grids(1, H, 60, 80)]
    s = q.detach().double() @ k.detach().double().repeat_interleave(H // HK, 1).transpose(-1, -2) / 8
    s = (s + rel[grid[2] - grid[3] + 79]).masked_fill(~model.window(*grid), float("-inf"))
    o64 = torch.softmax(s, -1) @ v.detach().double().repeat_interleave(H // HK, 1)
    (o64 * do.double()).sum().backward()
    assert_close("O", o.detach().double().numpy(), o64.detach().numpy())
    assert_close("d rel_bias", model.rel_bias.grad.double().numpy(), rel.grad.numpy())
