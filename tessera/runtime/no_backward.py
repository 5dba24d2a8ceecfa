"""Entry points that have no backward, given PyTorch tensors that require grad: `@no_backward("attention")`.

`tessera.attention`, `tessera.attention_with_kvcache`, `tessera.attention_backward`, `tessera.gemm` and
`tessera.launch` compute their outputs through NumPy or the CUDA driver, outside PyTorch's autograd. Called in
grad mode on tensors that require grad, their outputs used to come back detached: a loss through them and
through another path gave the inputs only the other path's gradient, silently. Now such a call's floating-point
tensor outputs (in a tuple or a dict: `captured_grads`) carry a backward that raises, naming the entry point and
the differentiable one (`tessera.runtime.autograd.attention`), as PyTorch does for an op without a derivative;
under `torch.no_grad()`, or on tensors that do not require grad, nothing changes. `raising_backward` is the
mark, also for the gradients `tessera.runtime.autograd` computes under `create_graph=True` (no second order).

This module imports nothing of PyTorch's: it takes the module from `sys.modules` (a tensor exists only once
PyTorch is imported), so `tessera.runtime.autograd` stays the one module that imports it.
"""

from __future__ import annotations

import functools
import sys


def no_backward(name: str):
    """Decorate the entry point `tessera.<name>` (module docstring)."""

    def decorate(entry):
        @functools.wraps(entry)
        def checked(*args, **kwargs):
            out = entry(*args, **kwargs)
            torch = sys.modules.get("torch")
            if torch is None or not torch.is_grad_enabled():
                return out
            inputs = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor) and x.requires_grad]
            if not inputs:
                return out
            message = (f"tessera.{name} has no backward: its inputs require grad, but no gradient flows through "
                       "it; use tessera.runtime.autograd.attention (differentiable attention), or call it under "
                       "torch.no_grad() or on detached tensors")

            def mark(x):
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    return raising_backward(torch, message, x, inputs)
                if isinstance(x, dict):
                    return {key: mark(value) for key, value in x.items()}
                return x

            return tuple(mark(x) for x in out) if isinstance(out, tuple) else mark(out)

        return checked

    return decorate


def raising_backward(torch, message: str, output, inputs):
    """`output` passed through, with a backward that raises RuntimeError(`message`) when autograd reaches it;
    `inputs`, the tensors requiring grad that `output` was computed from, make it part of their graph."""
    return _raising_backward(torch).apply(message, output, *inputs)


@functools.cache
def _raising_backward(torch):
    """A `torch.autograd.Function` passing a tensor computed outside autograd through, whose backward raises."""

    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, message: str, output, *inputs):
            ctx.message = message
            return output.view_as(output)

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(ctx.message)

    return NoBackward
