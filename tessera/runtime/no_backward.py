"""Entry points that have no backward, given PyTorch tensors that require grad: `@no_backward("attention")`.

`tessera.attention`, `tessera.attention_with_kvcache`, `tessera.gemm` and `tessera.launch` compute their outputs
through NumPy or the CUDA driver, outside PyTorch's autograd. Called in grad mode on tensors that require grad,
their outputs used to come back detached: a loss through them and through another path gave the inputs only
the other path's gradient, silently. Now such a call's floating-point tensor outputs carry a backward that
raises, naming the entry point and the differentiable one (`tessera.runtime.autograd.attention`), as PyTorch
does for an op without a derivative; under `torch.no_grad()`, or on tensors that do not require grad, nothing
changes.

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
            function = _raising_backward(torch)

            def mark(x):
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    return function.apply(name, x, *inputs)
                return x

            return tuple(mark(x) for x in out) if isinstance(out, tuple) else mark(out)

        return checked

    return decorate


@functools.cache
def _raising_backward(torch):
    """A `torch.autograd.Function` passing an entry point's output through, whose backward raises."""

    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, name: str, output, *inputs):
            ctx.name = name
            return output.view_as(output)

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(f"tessera.{ctx.name} has no backward: its inputs require grad, but no gradient "
                               "flows through it; use tessera.runtime.autograd.attention (differentiable "
                               "attention), or call it under torch.no_grad() or on detached tensors")

    return NoBackward
