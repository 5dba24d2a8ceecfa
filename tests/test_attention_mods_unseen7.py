"""Attention variants as a FlexAttention user writes them next (issue 29, round 7), none of which the earlier
rounds hold: document masking from a per-batch [B, S] id table with a sliding window inside each document, a
prefix-LM with a per-batch prefix beside ALiBi whose slopes the mod computes with `np.exp2(-8 * (h + 1) / H)`, a
tanh soft-cap followed by a relative-position bias from a learned [2 S - 1] table, a strided window in both
directions, chunked causal attention (`q_idx // C >= kv_idx // C`), a three-branch `np.where` over clamped
differences with `abs`, `np.minimum` and `np.maximum` of index expressions, biases read by (b, q_idx) and
(b, kv_idx) from [B, S] tables, a mask_mod and a score_mod reading one captured table, lambdas, a
functools.partial, closures over a loop variable (late-bound, as Python binds them, and bound by a default), and
a GQA mask reading the query head against its K/V head; then the same idioms written in torch (`torch.exp2`,
`torch.where`, `torch.clamp`, `.abs()`, captured tensors), methods of an `nn.Module`, and modifiers decorated with
`torch.compile`. Each runs forward and backward through `tessera.attention` / `tessera.attention_backward` at
Tile level against the float64 reference over seq_q != seq_k both ways, lengths 1, 17, 129, 1000, GQA and batch 2
(`mods_checks`); the torch ones also against torch's own `flex_attention` on CPU (`-m slow`), and through
`tessera.runtime.autograd.attention`.

The default run takes a slice (`FAST`); `-m slow` runs every variant over the shapes at Tile level, at target and
PTX level at one shape, head_dim 128 and float16 at target level, and ptxas on each variant's forward and
backward kernels (no spill). Then the bugs this round found, each with its
regression test: modifiers decorated with `torch.compile` (a RecursionError), random draws in a modifier (traced
as the one value drawn), autograd with modifiers (refused by TypeError), block lists reused at other lengths (a
silently wrong O)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from mods_checks import (assert_variant_kernels_assemble, check_named_variant, check_variant_forward_and_backward,
                         variant_inputs)

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.variants import ModTraceError, trace_mod

try:
    import torch
except ImportError:  # the torch variants are skipped
    torch = None

H, HK = 4, 2
S = 1000                                                             # the tables' length (the longest shape)
_rng = np.random.default_rng(70)
DOC2 = np.stack([np.repeat([0, 1, 2, 3], [20, 30, 1, 949]), np.repeat([5, 6], [44, 956])])  # [B, S] document ids
PREFIX = np.array([13, 40])                                          # per batch entry
REL = _rng.standard_normal(2 * S - 1).astype(np.float32) * 0.5       # learned, by q_idx - kv_idx + S - 1
QBIAS = _rng.standard_normal((2, S)).astype(np.float32) * 0.3        # [B, S] by (b, q_idx)
KBIAS = _rng.standard_normal((2, S)).astype(np.float32) * 0.3        # [B, S] by (b, kv_idx)


# region modifiers

def document_window(b, h, q_idx, kv_idx):
    """Packed documents from a per-batch id table, causal inside a window of 8 within each document."""
    return (DOC2[b, q_idx] == DOC2[b, kv_idx]) & (q_idx >= kv_idx) & (q_idx - kv_idx < 8)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def alibi_exp2(score, b, h, q_idx, kv_idx):
    """ALiBi with its slope computed in the mod, as attention-gym writes it."""
    return score + np.exp2(-8 * (h + 1) / H) * (kv_idx - q_idx)


def softcap_relative(score, b, h, q_idx, kv_idx):
    """A tanh soft-cap, then a relative-position bias from a [2 S - 1] table."""
    return 30.0 * np.tanh(score / 30.0) + REL[q_idx - kv_idx + S - 1]


def strided_window(b, h, q_idx, kv_idx):
    """Dilated both ways: every third key within 40 positions."""
    return ((q_idx - kv_idx) % 3 == 0) & (abs(q_idx - kv_idx) < 40)


def chunked_causal(b, h, q_idx, kv_idx):
    return q_idx // 16 >= kv_idx // 16


def three_branches(score, b, h, q_idx, kv_idx):
    """np.where of three branches over a clamped difference, abs, and the min / max of index expressions."""
    d = np.clip(q_idx - kv_idx, -10, 10)
    branch = np.where(d > 5, score - 1.0, np.where(d < -5, score + 0.5, score * 0.5))
    return branch + 0.02 * abs(d) + 0.001 * np.minimum(q_idx, kv_idx) - 0.001 * np.maximum(q_idx - 3, kv_idx)


def batch_position_bias(score, b, h, q_idx, kv_idx):
    return score + QBIAS[b, q_idx] - KBIAS[b, kv_idx]


def same_document(b, h, q_idx, kv_idx):
    return DOC2[b, q_idx] == DOC2[b, kv_idx]


def first_document_bonus(score, b, h, q_idx, kv_idx):
    """Reads the mask's table too: keys of the batch entry's first document get a bonus."""
    return score + 0.75 * (DOC2[b, kv_idx] == DOC2[b, 0])


def window(b, h, q_idx, kv_idx, width):
    return abs(q_idx - kv_idx) <= width


LATE_BOUND = [lambda score, b, h, q_idx, kv_idx: score * (i + 1) * 0.5 for i in range(3)]  # all see i = 2
EARLY_BOUND = [lambda score, b, h, q_idx, kv_idx, i=i: score * (i + 1) * 0.5 for i in range(3)]


def kv_group(b, h, q_idx, kv_idx):
    """GQA: the first query head of each K/V head's group sees every key, the others are causal."""
    return (h % (H // HK) == 0) | (q_idx >= kv_idx)


# endregion

VARIANTS = {
    "document-window": (None, document_window),
    "prefix+alibi-exp2": (alibi_exp2, prefix_lm),
    "softcap-relative+strided": (softcap_relative, strided_window),
    "three-branches+chunked": (three_branches, chunked_causal),
    "batch-position-bias+same-document": (batch_position_bias, same_document),
    "shared-table": (first_document_bonus, same_document),
    "lambda+partial": (lambda score, b, h, q_idx, kv_idx: score - 0.1 * abs(q_idx - kv_idx),
                       functools.partial(window, width=6)),
    "late-bound+kv-group": (LATE_BOUND[0], kv_group),
    "early-bound": (EARLY_BOUND[0], None),
}
SHAPES = [  # (batch, heads, heads_k, seq_q, seq_k)
    (2, H, HK, 70, 45),
    (1, H, HK, 1, 1),
    (2, H, 1, 17, 129),
    (2, H, H, 129, 17),
    (2, H, HK, 1000, 1000),
]
FAST = ["document-window", "softcap-relative+strided", "three-branches+chunked", "shared-table"]


@pytest.mark.parametrize("name", FAST)
def test_variant_at_tile_level(name):
    check_named_variant(VARIANTS, name, SHAPES[0], "tile")


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_over_shapes_at_tile_level(name, shape):
    check_named_variant(VARIANTS, name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_below_tile_level(name, level):
    check_named_variant(VARIANTS, name, SHAPES[0], level)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["document-window", "softcap-relative+strided", "prefix+alibi-exp2"])
def test_head_dim_128_at_target_level(name):
    check_named_variant(VARIANTS, name, SHAPES[0], "target", head_dim=128)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_kernels_assemble_without_spills(name):
    assert_variant_kernels_assemble(*VARIANTS[name])


@pytest.mark.slow
def test_head_dim_256_forward_and_its_backward_refused():
    """At head_dim 256 the forward runs (Tile level) and the backward is refused by name, as documented."""
    from tessera.runtime.attention_base import UnsupportedKernel

    score_mod, mask_mod = VARIANTS["softcap-relative+strided"]
    q, k, v, do = variant_inputs(SHAPES[0], 83, 256)
    o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse).ok
    with pytest.raises(UnsupportedKernel, match="head_dim 256 is not supported by the backward kernels"):
        tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level="tile")


@pytest.mark.parametrize("name", ["document-window", "prefix+alibi-exp2", "three-branches+chunked",
                                  "late-bound+kv-group", "lambda+partial"])
def test_block_classes_at_other_block_sizes_match_a_brute_force(name):
    """FlexAttention's `create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE=)` with sizes other than the
    default (a pair: 64 queries, 32 keys) against a brute-force classification."""
    from mods_checks import brute_block_kinds

    from tessera.variants import create_block_mask

    mask_mod = VARIANTS[name][1]
    mask = create_block_mask(mask_mod, 2, H, 200, 150, device="cpu", BLOCK_SIZE=(64, 32))
    np.testing.assert_array_equal(mask.kinds, brute_block_kinds(mask_mod, 2, H, 200, 150, 64, 32))


def test_closures_bind_as_python_binds_them():
    """Closures made in a loop see the loop variable's last value (Python's late binding), a default binds
    each its own: the kernels follow the functions, so the late-bound three give one O and the early-bound
    three three."""
    q, k, v, _ = variant_inputs((1, 2, 2, 20, 30), 7)
    late = [np.asarray(tessera.attention(q, k, v, score_mod=fn, level="tile"), np.float32) for fn in LATE_BOUND]
    early = [np.asarray(tessera.attention(q, k, v, score_mod=fn, level="tile"), np.float32) for fn in EARLY_BOUND]
    assert all(np.array_equal(late[0], o) for o in late) and np.array_equal(late[0], early[2])
    assert not np.array_equal(early[0], early[1]) and not np.array_equal(early[1], early[2])


# region the idioms written in torch

def torch_variants() -> dict:
    """The torch spellings (attention-gym's): captured tensors (one moved with `.to(q_idx.device)`),
    torch.exp2 / where / clamp / tanh / sigmoid / rsqrt, F.relu, tensor methods (`.mul`, `.lt`, `.masked_fill`),
    an nn.Module's methods."""
    doc = torch.from_numpy(DOC2)
    prefix = torch.from_numpy(PREFIX)
    rel = torch.from_numpy(REL)

    def document_window_t(b, h, q_idx, kv_idx):
        ids = doc.to(q_idx.device)  # the table moved to the indices' device, as users write for the GPU
        return (ids[b, q_idx] == ids[b, kv_idx]) & (q_idx >= kv_idx) & (q_idx - kv_idx < 8)

    def prefix_lm_t(b, h, q_idx, kv_idx):
        return (kv_idx < prefix[b]) | (q_idx >= kv_idx)

    def alibi_t(score, b, h, q_idx, kv_idx):
        return score + torch.exp2(-8 * (h + 1) / H) * (kv_idx - q_idx)

    def softcap_relative_t(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(score / 30.0) + rel[q_idx - kv_idx + S - 1]

    def three_branches_t(score, b, h, q_idx, kv_idx):
        d = torch.clamp(q_idx - kv_idx, -10, 10)
        branch = torch.where(d > 5, score - 1.0, torch.where(d < -5, score + 0.5, score * 0.5))
        return branch + 0.02 * d.abs() + 0.001 * torch.minimum(q_idx, kv_idx) - 0.001 * torch.maximum(q_idx - 3, kv_idx)

    class Biases(torch.nn.Module):
        """A module whose methods are the modifiers, its tables buffers."""

        def __init__(self):
            super().__init__()
            self.register_buffer("qbias", torch.from_numpy(QBIAS))
            self.register_buffer("doc", doc)

        def score_mod(self, score, b, h, q_idx, kv_idx):
            return score + self.qbias[b, q_idx]

        def mask_mod(self, b, h, q_idx, kv_idx):
            return (self.doc[b, q_idx] == self.doc[b, kv_idx]) & (q_idx >= kv_idx)

    gate = torch.from_numpy(np.linspace(-2.0, 2.0, H).astype(np.float32))

    def gated(score, b, h, q_idx, kv_idx):
        """A per-head sigmoid gate, a relu'd distance penalty, rsqrt decay and method spellings of operators."""
        distance = (q_idx - kv_idx).abs()
        decayed = score.mul(torch.sigmoid(gate[h]) + 0.5).sub(0.05 * torch.nn.functional.relu(distance - 4))
        return decayed.add(torch.rsqrt(distance.float() + 1.0)).masked_fill(q_idx.lt(kv_idx - 20), -float("inf"))

    module = Biases()
    return {
        "torch-gated": (gated, None),
        "torch-document-window+alibi": (alibi_t, document_window_t),
        "torch-softcap-relative+prefix": (softcap_relative_t, prefix_lm_t),
        "torch-three-branches": (three_branches_t, None),
        "torch-module-methods": (module.score_mod, module.mask_mod),
    }


TORCH_VARIANTS = torch_variants() if torch is not None else {}
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install -e '.[torch]')")


@needs_torch
@pytest.mark.parametrize("name", ["torch-module-methods", "torch-gated"])  # the others: autograd's test, -m slow
def test_torch_variant_at_tile_level(name):
    check_named_variant(TORCH_VARIANTS, name, SHAPES[0], "tile")


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(TORCH_VARIANTS))
def test_torch_variant_over_shapes_at_tile_level(name, shape):
    check_named_variant(TORCH_VARIANTS, name, shape, "tile")


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(TORCH_VARIANTS))
def test_torch_variant_below_tile_level(name, level):
    check_named_variant(TORCH_VARIANTS, name, SHAPES[0], level)


@pytest.mark.slow
@needs_torch
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(TORCH_VARIANTS))
def test_torch_variant_kernels_assemble_without_spills(name):
    assert_variant_kernels_assemble(*TORCH_VARIANTS[name])


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("name", sorted(TORCH_VARIANTS))
def test_torch_variant_against_torch_flex_attention(name):
    """torch's own flex_attention (eager, CPU, float64, its block mask from the same mask_mod) as a second
    reference: O within the bf16 tolerance the float64 reference gives, LSE (natural log) too."""
    from torch.nn.attention.flex_attention import create_block_mask as torch_block_mask
    from torch.nn.attention.flex_attention import flex_attention

    score_mod, mask_mod = TORCH_VARIANTS[name]
    batch, heads, heads_k, seq_q, seq_k = SHAPES[0]
    q, k, v, _ = variant_inputs(SHAPES[0], 71)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
        block_mask = None if mask_mod is None else torch_block_mask(  # torch's takes functions, not methods
            lambda b, h, q_idx, kv_idx: mask_mod(b, h, q_idx, kv_idx), batch, heads, seq_q, seq_k, device="cpu")
        ref, ref_lse = flex_attention(*(torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v)),
                                      score_mod=score_mod, block_mask=block_mask, enable_gqa=True, return_lse=True)
    check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
    error = np.abs(np.asarray(o, np.float64) - ref.numpy()).max()
    assert error <= check.tolerance, (error, check)
    seen = np.isfinite(np.asarray(lse))
    np.testing.assert_allclose(np.asarray(lse)[seen], ref_lse.numpy()[seen], atol=2e-2)

# endregion




# region bugs found by this round, each with its regression test

def test_a_compile_wrapper_is_traced_as_what_it_wraps():
    """What `@torch.compile` makes, as the tracer sees it: a wrapper that cannot run on the tracer's values,
    holding the original as `_torchdynamo_orig_callable`. The tracer, the reference and the block mask call
    the original (the real decorator: `test_torch_compiled_modifiers_are_traced_as_what_they_wrap`)."""
    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 9)

    def compiled(*args):
        raise RuntimeError("compiled code runs on tensors only")

    compiled._torchdynamo_orig_callable = window
    q, k, v, do = variant_inputs((1, 2, 2, 33, 40), 73)
    check_variant_forward_and_backward(q, k, v, do, None, compiled, "tile")


@pytest.mark.slow
@needs_torch
def test_torch_compiled_modifiers_are_traced_as_what_they_wrap():
    """A modifier decorated with `@torch.compile` (and a `torch.compile`d nn.Module) raised a RecursionError, a
    traceback: the tracer walked the wrapper's closure (torch's dynamo machinery) for captured arrays. It is
    traced, and the reference and the block mask call it, as the function or module it wraps."""
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])

    @torch.compile
    def causal_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 9)

    class Alibi(torch.nn.Module):
        def forward(self, score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)

    alibi = torch.compile(Alibi())
    assert trace_mod(causal_window, "mask_mod").name.endswith("causal_window")
    assert [a.name for a in trace_mod(alibi, "score_mod").arrays] == ["score_mod_slopes"]
    q, k, v, do = variant_inputs((2, H, HK, 45, 70), 72)
    check_variant_forward_and_backward(q, k, v, do, alibi, causal_window, "tile")


RNG = np.random.default_rng(74)


def numpy_noise(score, b, h, q_idx, kv_idx):
    return score + np.random.rand()


def generator_noise(score, b, h, q_idx, kv_idx):
    scaled = score * 0.5
    return scaled + RNG.normal()


def default_noise(score, b, h, q_idx, kv_idx, rng=np.random.default_rng(75)):
    return score + rng.random()


def python_noise(score, b, h, q_idx, kv_idx):
    import random
    return score + random.uniform(0.0, 1.0)


class Jitter:
    """A callable object holding its generator."""

    def __init__(self):
        self.rng = np.random.default_rng(84)

    def __call__(self, score, b, h, q_idx, kv_idx):
        return score + self.rng.random()


def keyword_noise(score, b, h, q_idx, kv_idx, *, rng):
    return score + rng.standard_normal()


def seeded(score, b, h, q_idx, kv_idx):
    """A generator made and seeded in the modifier draws the same each call: a constant, traced."""
    return score + np.random.default_rng(0).random()


@pytest.mark.parametrize("fn,source,line", [
    (numpy_noise, "NumPy's np.random, whose state it changed", "return score + np.random.rand()"),
    (generator_noise, "RNG, whose state it changed", "return scaled + RNG.normal()"),
    (default_noise, "rng, whose state it changed", "return score + rng.random()"),
    (python_noise, "random's Random.random", "return score + random.uniform(0.0, 1.0)"),
    (Jitter(), "self.rng, whose state it changed", "return score + self.rng.random()"),
    (functools.partial(keyword_noise, rng=np.random.default_rng(85)), "rng, whose state it changed",
     "return score + rng.standard_normal()"),
])
def test_random_draws_are_refused_naming_the_source_and_line(fn, source, line):
    """A draw in a modifier was the one value drawn while tracing, a constant of the kernel, while the
    reference drew anew (a silently wrong O: max error inf against it). Refused naming the source and the
    modifier's line; a generator seeded in the modifier is a constant and traced."""
    import inspect
    import linecache
    import re

    from tessera.variants.callables import underlying

    q, k, v, _ = variant_inputs((1, 2, 2, 20, 30), 76)
    with pytest.raises(ModTraceError, match=rf"score_mod '.*' at .*unseen7.py:(\d+): cannot trace a "
                                            rf"random draw \({re.escape(source)}\)") as caught:
        tessera.attention(q, k, v, score_mod=fn, level="tile")
    at = int(str(caught.value).split("unseen7.py:")[1].split(":")[0])
    assert linecache.getline(inspect.getsourcefile(type(fn) if isinstance(fn, Jitter) else underlying(fn)),
                             at).strip() == line
    o = tessera.attention(q, k, v, score_mod=seeded, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, seeded).ok


def test_an_empty_closure_cell_is_no_generator():
    """The draw watch read every closure cell: one the enclosing function never assigned (legal Python, read on
    no path the modifier takes) made the trace fail with "ValueError: Cell is empty"."""
    def make():
        def mod(b, h, q_idx, kv_idx):
            if False:
                return never_assigned  # noqa: F821
            return q_idx >= kv_idx
        return mod
        never_assigned = 1  # noqa: F841

    assert trace_mod(make(), "mask_mod").result.op == "ge"


@needs_torch
def test_torch_draws_are_refused():
    gen = torch.Generator().manual_seed(0)
    for fn, name in ((lambda s, b, h, q_idx, kv_idx: s + torch.rand(()), "torch.rand"),
                     (lambda s, b, h, q_idx, kv_idx: s + torch.randn((), generator=gen), "torch.randn"),
                     (lambda s, b, h, q_idx, kv_idx: s + torch.rand_like(s), "torch.rand_like")):
        with pytest.raises(ModTraceError, match=rf"at .*unseen7.py:\d+: cannot trace a random draw \({name}\)"):
            trace_mod(fn, "score_mod")


@needs_torch
def test_autograd_takes_the_modifiers():
    """`tessera.runtime.autograd.attention(..., score_mod=, mask_mod=)` was a TypeError (FlexAttention's users
    train through autograd): its forward and backward take them, q.grad, k.grad and v.grad against the float64
    reference. A captured tensor that requires grad gets its gradient at every level (test_attention_mods_grad.py,
    test_captured_gradients_gpu_path.py); with deterministic=True, which atomic scatter-adds cannot give, it is
    refused by name before the forward runs."""
    from tessera.runtime import autograd

    score_mod, mask_mod = TORCH_VARIANTS["torch-document-window+alibi"]
    arrays = variant_inputs((2, H, HK, 45, 70), 77)
    q, k, v = (torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16).requires_grad_(True)
               for x in arrays[:3])
    do = torch.from_numpy(np.asarray(arrays[3], np.float32)).to(torch.bfloat16)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o = autograd.attention(q, k, v, level="tile", score_mod=score_mod, mask_mod=mask_mod)
        (o.float() * do.float()).sum().backward()
        checks = reference.check_attention_mods_backward(
            [x.grad.float().numpy() for x in (q, k, v)], *arrays[:3], o.detach().float().numpy(), arrays[3], BF16,
            score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]
    table = torch.nn.Parameter(torch.zeros(H))
    with pytest.raises(ValueError, match="the score_mod reads table, which requires grad, and deterministic=True"):
        autograd.attention(q, k, v, level=None, deterministic=True,
                           score_mod=lambda s, b, h, q_idx, kv_idx: s + table[h])
    with torch.no_grad():  # no graph: nothing is missing
        autograd.attention(q, k, v, level="tile", score_mod=lambda s, b, h, q_idx, kv_idx: s + table[h])


def everything(b, h, q_idx, kv_idx):
    return q_idx >= 0


def after_100(b, h, q_idx, kv_idx):
    return kv_idx >= 100


@pytest.mark.parametrize("mask_mod,made,launch,refusal", [
    (everything, (128, 128), (100, 100), "lists key block 1 of query block 0 .* as full"),
    (everything, (100, 128), (100, 70), "lists key block 1 of query block 0 .* as full"),
    (after_100, (100, 100), (100, 128), "leaves out key block 1 of query block 0 .*, which the mask_mod makes "
                                        "visible"),
    (None, (128, 128), (100, 100), None),  # a causal mask's lists at another length: all partial, right
])
def test_block_lists_for_other_lengths_are_refused(mask_mod, made, launch, refusal):
    """Block lists made for other lengths with the same block counts were run: a key block listed full at 128
    keys reaches past 100 and was visited unmasked (its missing keys scoring 0: max error 0.1 against the
    reference), a block empty at 100 keys was skipped at 128. Refused naming the block; lists that are right
    for the launch pass, copies and hand-built ones checked against the mask_mod."""
    from tessera.kernels import flash_attention
    from tessera.variants import create_block_mask

    mask_mod = mask_mod or (lambda b, h, q_idx, kv_idx: q_idx >= kv_idx)
    module = flash_attention(64, mask_mod=mask_mod, block_n=64, block_sparse=True)
    q, k, v, _ = variant_inputs((1, 2, 2, *launch), 78)
    lists = create_block_mask(mask_mod, 1, 2, *made, 128, 64).inputs()
    for given, origin in ((lists, f", made by create_block_mask for seq_q {made[0]}, seq_k {made[1]}, "),
                          ([np.array(x) for x in lists], ", ")):  # made by the mask, and a copy
        if refusal is None:
            o = tessera.interpret(module, q, k, v, *given, level="tile")
            assert reference.check_attention_mods(o, q, k, v, BF16, None, mask_mod).ok
            continue
        with pytest.raises(ValueError, match=f"tessera.interpret: the block lists{origin}{refusal}"):
            tessera.interpret(module, q, k, v, *given, level="tile")
    right = create_block_mask(mask_mod, 1, 2, *launch, 128, 64).inputs()
    o = tessera.interpret(module, q, k, v, *right, level="tile")
    assert reference.check_attention_mods(o, q, k, v, BF16, None, mask_mod).ok
    right[0][...], right[1][...] = 2, [0, 1]  # changed in place to every block full: checked again, not trusted
    with pytest.raises(ValueError, match=r"tessera.interpret: the block lists, lists key block \d of query block 0 "
                                         r".* as full"):
        tessera.interpret(module, q, k, v, *right, level="tile")


@needs_torch
def test_a_captured_tensor_moved_to_a_device_is_the_same_input():
    """`table.to(q_idx.device)` (and `.cuda()`, `.cpu()`) was refused ("the attribute .to of the captured
    array"): it reads the same kernel input; a dtype conversion is refused by name."""
    doc = torch.from_numpy(DOC2)
    trace = trace_mod(lambda b, h, q_idx, kv_idx: doc.cuda()[b, q_idx] == doc.to("cuda")[b, kv_idx], "mask_mod")
    assert [a.name for a in trace.arrays] == ["mask_mod_doc"]
    with pytest.raises(ModTraceError, match=r"cannot trace .to\(torch.float32\) of the captured array doc"):
        trace_mod(lambda s, b, h, q_idx, kv_idx: s + doc.to(torch.float32)[b, q_idx], "score_mod")


def test_backward_work_lists_for_other_lengths_are_refused():
    """The backward's main kernel reads its work lists (`BlockMask.backward_inputs`) the same way: lists made
    for 128 keys at a launch of 100 are refused at launch naming the block, the launch's own pass."""
    from tessera.kernels import attention_backward
    from tessera.variants import create_block_mask
    from tessera.variants.launch_lists import check_lists_at_launch

    kernels = attention_backward(64, mask_mod=everything, block_sparse=True)
    main, c = kernels.main, kernels.config.attention
    sizes = dict(batch=1, heads=4, heads_k=2, seq_q=100, seq_k=100)
    bm, bn = c.block_m, c.block_n
    for seq_k, refused in ((128, True), (100, False)):
        lists = create_block_mask(everything, 1, 4, 100, seq_k, bm, bn).backward_inputs(2)
        for given in (lists, [np.array(x) for x in lists]):
            inputs = dict(zip(("Q_NUM_VISITS", "Q_VISITS"), given))
            if refused:
                with pytest.raises(ValueError, match="where: the block lists.* as full, where the mask_mod makes"):
                    check_lists_at_launch("where", main, sizes, inputs)
            else:
                check_lists_at_launch("where", main, sizes, inputs)


def branches(b, h, q_idx, kv_idx):
    if q_idx - kv_idx > 4:
        return False
    return q_idx >= kv_idx


def loops(b, h, q_idx, kv_idx):
    steps = 0
    while q_idx - steps > kv_idx:
        steps += 1
    return steps < 3


def python_max(score, b, h, q_idx, kv_idx):
    return score - 0.1 * max(q_idx - kv_idx, 0)


def masked_write(score, b, h, q_idx, kv_idx):
    score[q_idx < kv_idx] = -np.inf
    return score


def table_write(b, h, q_idx, kv_idx):
    DOC2[0, 0] = 7
    return DOC2[b, q_idx] == DOC2[b, kv_idx]


@pytest.mark.parametrize("fn,kind,construct,line", [
    (branches, "mask_mod", "Python control flow on a traced value", "if q_idx - kv_idx > 4:"),
    (loops, "mask_mod", "Python control flow on a traced value", "while q_idx - steps > kv_idx:"),
    (python_max, "score_mod", "Python control flow on a traced value", "return score - 0.1 * max(q_idx - kv_idx, 0)"),
    (masked_write, "score_mod", "an assignment into a traced value", "score[q_idx < kv_idx] = -np.inf"),
    (table_write, "mask_mod", "an assignment into the captured array DOC2", "DOC2[0, 0] = 7"),
])
def test_untraceable_modifiers_are_refused_at_their_line(fn, kind, construct, line):
    """What the tracer cannot take is refused naming the modifier, the construct and the line that does it
    (an assignment into the score was refused as "indexing with a traced value an array that is not
    captured", which named no assignment)."""
    import inspect
    import linecache

    q, k, v, _ = variant_inputs((1, 2, 2, 20, 30), 79)
    with pytest.raises(ModTraceError, match=rf"{kind} '{fn.__name__}' at .*unseen7.py:\d+: cannot trace "
                                            rf"{construct}") as caught:
        tessera.attention(q, k, v, **{kind: fn}, level="tile")
    at = int(str(caught.value).split("unseen7.py:")[1].split(":")[0])
    assert linecache.getline(inspect.getsourcefile(fn), at).strip() == line
    assert DOC2[0, 0] == 0


@needs_torch
def test_untraceable_torch_modifiers_are_refused_at_their_line():
    doc = torch.from_numpy(DOC2)
    for fn, construct in ((lambda b, h, q_idx, kv_idx: q_idx >= doc[b, kv_idx].item(), "the attribute .item"),
                          (lambda s, b, h, q_idx, kv_idx: s.add_(1.0), "the attribute .add_"),
                          (lambda s, b, h, q_idx, kv_idx: s.masked_fill_(q_idx < kv_idx, 0.0), "the attribute "
                                                                                                 ".masked_fill_")):
        kind = "score_mod" if fn.__code__.co_argcount == 5 else "mask_mod"
        with pytest.raises(ModTraceError, match=rf"{kind} '.*<lambda>' at .*unseen7.py:\d+: cannot trace {construct}"):
            trace_mod(fn, kind)


def test_block_mask_keyword_as_flex_attention_takes_it():
    """FlexAttention's call `flex_attention(q, k, v, score_mod=, block_mask=)` ported as `tessera.attention(q, k,
    v, score_mod=, block_mask=)` was a TypeError: the block mask (of another BLOCK_SIZE than the kernel's: its
    blocks are made again at the kernel's) stands for its mask_mod, forward and backward. One made for other
    lengths is refused naming both (FlexAttention refuses it too), and so is one of another mask than mask_mod=."""
    from tessera.variants import create_block_mask

    q, k, v, do = variant_inputs((2, H, HK, 70, 45), 80)
    block_mask = create_block_mask(document_window, 2, None, 70, 45, BLOCK_SIZE=64)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=alibi_exp2, block_mask=block_mask, return_lse=True,
                                   level="tile")
        assert reference.check_attention_mods(o, q, k, v, BF16, alibi_exp2, document_window, lse=lse).ok
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=alibi_exp2, block_mask=block_mask,
                                           level="tile")
        checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, alibi_exp2, document_window)
    assert all(c.ok for c in checks), [str(c) for c in checks]
    with pytest.raises(ValueError, match="attention: block_mask was made for seq_q 70, seq_k 45; the call has "
                                         "seq_q 70, seq_k 50"):
        tessera.attention(q, *(np.concatenate([x, x[:, :, :5]], axis=2) for x in (k, v)), block_mask=block_mask,
                          level="tile")
    with pytest.raises(ValueError, match="block_mask was made from another mask_mod than mask_mod="):
        tessera.attention(q, k, v, mask_mod=prefix_lm, block_mask=block_mask, level="tile")


@pytest.mark.slow  # torch's create_block_mask: 3.8 s a first call
@needs_torch
def test_torch_block_mask_keyword():
    """torch's own BlockMask (its `mask_mod` and `seq_lengths`) as `block_mask=`, through autograd too."""
    from torch.nn.attention.flex_attention import create_block_mask as torch_block_mask

    from tessera.runtime import autograd

    score_mod, mask_mod = TORCH_VARIANTS["torch-document-window+alibi"]
    arrays = variant_inputs((2, H, HK, 70, 45), 81)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block_mask = torch_block_mask(mask_mod, 2, None, 70, 45, device="cpu", BLOCK_SIZE=64)
        o = tessera.attention(*arrays[:3], score_mod=score_mod, block_mask=block_mask, level="tile")
        assert reference.check_attention_mods(o, *arrays[:3], BF16, score_mod, mask_mod).ok
        q = torch.from_numpy(np.asarray(arrays[0], np.float32)).to(torch.bfloat16).requires_grad_(True)
        k, v = (torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16) for x in arrays[1:3])
        autograd.attention(q, k, v, level="tile", score_mod=score_mod, block_mask=block_mask).sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def _float16_variant(level):
    q, k, v, do = (x.astype(np.float16) for x in variant_inputs((2, H, HK, 33, 40), 82))
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=softcap_relative, mask_mod=document_window, return_lse=True,
                                   level=level)
        assert o.dtype == np.float16
        assert reference.check_attention_mods(o, q, k, v, np.float16, softcap_relative, document_window, lse=lse).ok
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=softcap_relative, mask_mod=document_window,
                                           level=level)
        checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, np.float16, softcap_relative,
                                                         document_window)
    assert all(c.ok for c in checks), [str(c) for c in checks]
    return q, k, v


def test_float16_runs_and_float32_is_refused_by_name():
    """The documented element types with modifiers: float16 forward and backward as bf16 (at Tile level here,
    target level under -m slow), float32 refused naming the types taken."""
    from tessera.runtime.attention_base import UnsupportedKernel

    q, k, v = _float16_variant("tile")
    with pytest.raises(UnsupportedKernel, match="element type float32 is not supported .*bfloat16, float16"):
        tessera.attention(*(x.astype(np.float32) for x in (q, k, v)), mask_mod=document_window, level="tile")


@pytest.mark.slow
def test_float16_at_target_level():
    _float16_variant("target")
