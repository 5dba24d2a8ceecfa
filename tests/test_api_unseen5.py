"""The Python entry points given what a PyTorch user passes next (round 5 of the unseen cases): tensors that
require grad. `tessera.attention`, `tessera.gemm` (and `tessera.attention_with_kvcache`, `tessera.launch`) have
no backward; their outputs came back detached, so a loss through them and through another path gave the inputs
only the other path's gradient, silently. Their outputs now carry a backward that raises, naming the entry
point and `tessera.runtime.autograd.attention`; under `torch.no_grad()` or on detached tensors nothing
changes, and the differentiable attention still differentiates. About 1 s."""

from __future__ import annotations

import numpy as np
import pytest

import tessera

torch = pytest.importorskip("torch")


def _qkv(requires_grad: bool):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 17, 64, generator=gen).to(torch.bfloat16) for _ in range(3))
    return q.requires_grad_(requires_grad), k, v


CALLS = {
    "attention": lambda q, k, v: tessera.attention(q, k, v, causal=True, level="tile"),
    "attention with its LSE": lambda q, k, v: tessera.attention(q, k, v, return_lse=True, level="tile")[1],
    "gemm": lambda q, k, v: tessera.gemm(q[0, 0], k[0, 0].T.contiguous(), level="tile"),
}
# tessera.launch carries the same guard; in the interpreters it returns NumPy arrays (docs/validation.md), which
# no gradient reaches, so only its GPU runs return tensors to mark


@pytest.mark.parametrize("name", CALLS)
def test_a_gradient_through_an_entry_point_without_backward_raises(name):
    q, k, v = _qkv(True)
    out = CALLS[name](q, k, v)
    loss = out.float().sum() + (q.float() ** 2).sum()  # the second path alone would give q a gradient
    with pytest.raises(RuntimeError, match=r"tessera\.\w+ has no backward: .*tessera.runtime.autograd.attention"):
        loss.backward()


@pytest.mark.parametrize("name", CALLS)
def test_without_grad_nothing_changes(name):
    q, k, v = _qkv(True)
    with torch.no_grad():
        assert not CALLS[name](q, k, v).requires_grad
    assert not CALLS[name](q.detach(), k, v).requires_grad
    assert not CALLS[name](*_qkv(False)).requires_grad


def test_the_marked_output_is_the_output():
    q, k, v = _qkv(True)
    marked = tessera.attention(q, k, v, causal=True, level="tile")
    plain = tessera.attention(q.detach(), k, v, causal=True, level="tile")
    assert marked.dtype == plain.dtype and torch.equal(marked.detach(), plain)


def test_the_differentiable_attention_still_differentiates():
    from tessera.runtime.autograd import attention

    q, k, v = _qkv(True)
    attention(q, k, v, causal=True, level="tile").float().sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape and np.isfinite(q.grad.float().numpy()).all()
