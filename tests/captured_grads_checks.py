"""The reference for gradients of captured tensors (`tessera.attention_backward(..., captured_grads=)`,
`tessera.runtime.autograd.attention` with a learned table): torch's autograd through an eager float64 attention
with the same score_mod and mask_mod on torch tensors, and the same computation with O rounded as the kernels
hold it (the tolerance's same-precision term). Needs torch."""

from __future__ import annotations

import numpy as np
import torch


def _grids(batch, heads, seq_q, seq_k):
    return (torch.arange(batch)[:, None, None, None], torch.arange(heads)[None, :, None, None],
            torch.arange(seq_q)[None, None, :, None], torch.arange(seq_k)[None, None, None, :])


def eager_captured_grads(q, k, v, do, make_mods, tables, o_rounded=None):
    """{name: gradient (float64)} of sum(attention(q, k, v) * do) with respect to each table, the modifiers
    `make_mods(tables) -> (score_mod, mask_mod)` run on float64 torch tensors (GQA by repeating heads, scale
    1/sqrt(head_dim)). With `o_rounded` (the kernel's O), dS = P (dP - rowsum(dO O_rounded)) as the kernels compute
    it, and the gradient is dS backpropagated through score_mod alone (the same-precision reference)."""
    q, k, v, do = (torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v, do))
    leaves = {name: torch.tensor(np.asarray(t, np.float64), requires_grad=True) for name, t in tables.items()}
    score_mod, mask_mod = make_mods(leaves)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    grids = _grids(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    raw = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    scores = score_mod(raw, *grids) if score_mod is not None else raw
    if mask_mod is not None:
        scores = scores.masked_fill(~torch.broadcast_to(mask_mod(*grids), scores.shape), -torch.inf)
    p = torch.softmax(scores, -1).nan_to_num(0.0)  # a row that sees no key: P = 0
    if o_rounded is None:
        (p @ v * do).sum().backward()
    else:
        o = torch.from_numpy(np.asarray(o_rounded, np.float64))
        dp = do @ v.transpose(-1, -2)
        ds = (p * (dp - (do * o).sum(-1, keepdim=True))).detach()
        scores.backward(torch.where(torch.isfinite(scores), ds, 0.0))
    return {name: leaf.grad.numpy() if leaf.grad is not None else np.zeros(leaf.shape) for name, leaf in leaves.items()}


F32_FLOOR = 1e-5
"""The absolute term: a gradient that is exactly 0 in float64 (one key: dS = P (dP - dPsum) = 0) is a sum of f32
roundings of dS terms of order sqrt(head_dim) in the kernels (2e-7 seen at length 1)."""


BF16_ROUNDING = 2.0 ** -8
"""The relative rounding of a bf16 tensor's gradient (autograd casts the kernels' f32 sum to the tensor's dtype)."""


def assert_captured_grads(got: dict, q, k, v, do, o, make_mods, tables, rounding: dict | None = None):
    """Each gradient within FlashAttention's tolerance of the float64 one: at most twice the same-precision
    reference's error (O rounded as the kernel holds it), plus 1e-3 of the largest float64 entry and `F32_FLOOR`;
    `rounding` adds, by name, that fraction of the largest entry for a gradient returned in a narrower type than
    f32 (`BF16_ROUNDING`)."""
    exact = eager_captured_grads(q, k, v, do, make_mods, tables)
    same = eager_captured_grads(q, k, v, do, make_mods, tables, o_rounded=o)
    for name, reference in exact.items():
        value = np.asarray(got[name].detach().double() if isinstance(got[name], torch.Tensor) else got[name],
                           np.float64)
        assert value.shape == reference.shape, (name, value.shape, reference.shape)
        error = np.abs(value - reference).max()
        relative = 1e-3 + (rounding or {}).get(name, 0.0)
        bound = 2 * np.abs(same[name] - reference).max() + relative * np.abs(reference).max() + F32_FLOOR
        assert error <= bound, (name, error, bound)


def assert_assembles_under_every_ptxas(ptx: str) -> None:
    """Every ptxas found (`tessera.toolchain.find_all_ptxas`: 13.0 and the wheels' 12.x and 13.x) assembles `ptx`
    without a warning or a spill."""
    from tessera import toolchain

    tools = toolchain.find_all_ptxas()
    assert tools
    for tool in tools:
        result = toolchain.compile_ptx(ptx, ptxas=tool.path)
        assert result.warnings == () and not any(e.spills for e in result.entries.values()), tool.release
