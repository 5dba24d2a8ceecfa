"""Differentiable attention for PyTorch: `tessera.runtime.autograd.attention(q, k, v, ...)`.

    o = attention(q, k, v, causal=False, scale=None, deterministic=False, level=None, score_mod=None,
                  mask_mod=None)
    o.sum().backward()        # q.grad, k.grad, v.grad from tessera.attention_backward
    o, lse = attention(q, k, v, return_lse=True)   # lse differentiable too (attention_backward's dlse)

`AttentionFunction` is a `torch.autograd.Function`: its forward runs `tessera.attention(..., return_lse=True)`
and keeps q, k, v, O and LSE (f32, [batch, heads, seq_q]); its backward runs `tessera.attention_backward` on
them and the incoming gradient of O (with FlexAttention's `score_mod` / `mask_mod`, both take them:
`tessera.runtime.flex`). A tensor the score_mod reads that requires grad (a learned bias table, ALiBi slopes)
is an input of the Function too: the backward returns its gradient (`tessera.attention_backward(...,
captured_grads=)`: accumulated in f32 by the main kernel's atomic adds, then cast to the tensor's dtype and put
on its device, as FlexAttention does), so `loss.backward()` fills its `.grad` as FlexAttention's does. Both run
on the GPU with CUDA tensors (`level=None`), or with `level=` in an interpreter on CPU tensors (the same
kernels, on NumPy). The forward's `return_lse` is the forward's own option (issue 14's LSE output): where
`tessera.attention` does not take it, calling this raises the TypeError that says so. There is no second
derivative: the gradients, computed under `create_graph=True`, raise `SECOND_ORDER` where autograd differentiates
them (they came back as constants, and a gradient penalty silently lost its second-order terms).

Importing this module imports PyTorch (it is the one module of Tessera that does); `import tessera` does not.
"""

from __future__ import annotations

try:
    import torch
except ModuleNotFoundError as error:  # say how to get it, as the GPU runtime does for cuda-bindings
    raise ModuleNotFoundError("tessera.runtime.autograd needs PyTorch, which is not installed: pip install torch "
                              "(a CPU build is enough), or from a Tessera checkout pip install '.[torch]'",
                              name=error.name) from None

from tessera.runtime.no_backward import raising_backward


class AttentionFunction(torch.autograd.Function):
    """softmax(q k^T * scale [+ bottom-right causal mask]) v with Tessera's forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale, deterministic: bool, level, score_mod=None, mask_mod=None,
                return_lse: bool = False, captured_grads=(), *captured):
        from tessera.runtime.attention import attention

        options = {} if level is None else {"level": level}
        mods = {name: fn for name, fn in (("score_mod", score_mod), ("mask_mod", mask_mod)) if fn is not None}
        o, lse = attention(q, k, v, causal=causal, scale=scale, return_lse=True, **options, **mods)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, scale=scale, deterministic=deterministic, level=level, **mods)
        ctx.captured = [(name, tensor.dtype, tensor.device) for name, tensor in zip(captured_grads, captured)]
        return (o, lse) if return_lse else o

    @staticmethod
    def backward(ctx, do, dlse=None):
        """dlse: the loss's gradient in the LSE output, with `return_lse` (zeros where the loss does not read it)."""
        saved = ctx.saved_tensors
        with torch.no_grad():  # the kernels' gradients are constants to torch (below: create_graph=True)
            grads = _gradients(ctx, *saved, do, dlse)
        if torch.is_grad_enabled():  # create_graph=True: a loss on these gradients has no derivative here
            inputs = [x for x in (*saved, do, dlse) if x is not None and x.requires_grad]
            grads = [None if g is None else raising_backward(torch, SECOND_ORDER, g, inputs) for g in grads]
        return tuple(grads)


SECOND_ORDER = ("tessera.runtime.autograd.attention has no second derivative: its gradients come from "
                "tessera.attention_backward's kernels, outside torch's graph (a loss on them, e.g. a gradient "
                "penalty under create_graph=True, cannot be differentiated)")
"""The refusal raised where autograd differentiates a gradient of `AttentionFunction` (computed under
`create_graph=True`): without it, those gradients were constants to torch and a gradient penalty lost its
second-order terms silently."""


def _gradients(ctx, q, k, v, o, lse, do, dlse) -> list:
    """`AttentionFunction.backward`'s results, one per input of its forward (None where it takes none: the eight
    options between v and the captured tensors)."""
    from tessera.runtime.attention_backward import attention_backward

    do = do.contiguous().to(q.dtype)
    options = [None] * 8
    if not ctx.captured:
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, dlse=dlse, **ctx.options)
        return [dq, dk, dv, *options]
    dq, dk, dv, grads = attention_backward(q, k, v, o, lse, do, captured_grads=[n for n, *_ in ctx.captured],
                                           dlse=dlse, **ctx.options)
    return [dq, dk, dv, *options, *(_as_captured(grads[name], dtype, device) for name, dtype, device in ctx.captured)]


def _check_backward(q, causal, scale, deterministic) -> None:
    """Refuse by name, before the forward runs, what the backward's kernels do not compute (head_dim 256,
    deterministic=True at 192): a training step failed only in its backward, after a forward compiled and run.
    Malformed arguments are left to the forward, which names them."""
    from tessera.runtime.attention_base import DTYPES
    from tessera.runtime.attention_backward import backward_config

    dtype = DTYPES.get(str(q.dtype).removeprefix("torch."))
    if isinstance(q, torch.Tensor) and q.dim() == 4 and dtype is not None:
        backward_config(int(q.shape[-1]), causal, dtype, scale, deterministic)


def _as_captured(grad, dtype, device):
    """A captured tensor's gradient (f32, on q's device) in that tensor's dtype (one rounding of the f32 sum, as
    FlexAttention casts its captured gradients) and on its device (a bias table kept elsewhere than q)."""
    return (grad if grad.device == device else grad.to(device)).to(dtype)


def attention(q, k, v, causal: bool = False, scale: float | None = None, deterministic: bool = False,
              level: str | None = None, bias=None, score_mod=None, mask_mod=None, block_mask=None, enable_gqa=None,
              return_lse: bool = False):
    """Differentiable `tessera.attention` (see the module docstring); an additive `bias` is refused by name
    (`tessera.attention_backward` takes none). `return_lse=True` returns (o, lse), lse f32 [batch, heads, seq_q]
    (natural log, -inf for a row that sees no key) and differentiable too: a loss that reads it (a log-sum-exp
    merge of two attentions, a z-loss) gets its part of the gradients (`attention_backward(dlse=)`). A tensor
    that requires grad read by `score_mod` gets its gradient
    (`tessera.runtime.captured_gradients.captured_tensor_inputs`), on the GPU and in the interpreters; read by
    `mask_mod`, 0-d, where no gradient reaches it (used as an index, read at constant indices), or with
    `deterministic=True` (its gradient is added by atomics, in no fixed order), it is refused by name here,
    before the forward runs, rather than leave its gradient silently unset; so are FP8 q, k, v that require grad
    (FP8 attention has no backward). `block_mask`: FlexAttention's, for its mask_mod
    (`tessera.runtime.flex.block_mask_mod`); `enable_gqa`: FlexAttention's (`check_enable_gqa`)."""
    from tessera.runtime.attention import check_enable_gqa
    from tessera.runtime.attention_fp8 import is_fp8_call

    check_enable_gqa("attention", enable_gqa, q, k)
    wants_grad = torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in (q, k, v))
    if wants_grad and is_fp8_call(q, k, v, ()):  # else its backward failed on o's type, after the forward
        raise ValueError("attention: FP8 (8-bit float) q, k, v that require grad: FP8 attention has no backward, as "
                         "in FlashAttention-3 (tessera.attention_backward takes bfloat16 and float16); detach them "
                         "or call under torch.no_grad() for the forward, or train in bfloat16")
    if bias is not None:
        raise ValueError("attention: bias is not supported with autograd: tessera.attention_backward takes no bias; "
                         "a score_mod that adds it has a backward, and gives the bias its gradient where it requires "
                         "grad: score_mod=lambda s, b, h, q_idx, kv_idx: s + bias[b, h, q_idx, kv_idx]")
    from tessera.variants.rebinding import captured_tensors_requiring_grad

    if block_mask is not None:  # FlexAttention's block mask stands for its mask_mod
        from tessera.runtime.flex import block_mask_mod

        mask_mod = block_mask_mod("attention", block_mask, mask_mod, q.shape[-2], k.shape[-2])

    names, tensors = [], []
    if torch.is_grad_enabled():
        from tessera.runtime.captured_gradients import captured_tensor_inputs

        from tessera.runtime.captured_gradients import read_by

        wanted = {kind: read_by(fn, kind, captured_tensors_requiring_grad(fn)) if fn is not None else {}
                  for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod"))}
        if wanted["mask_mod"]:
            raise ValueError(f"attention: the mask_mod reads {', '.join(wanted['mask_mod'])}, which requires grad: a "
                             "mask passes no gradient (pass it detached, .detach(), or under torch.no_grad())")
        if wanted["score_mod"]:
            if deterministic:
                raise ValueError(f"attention: the score_mod reads {', '.join(wanted['score_mod'])}, which requires "
                                 "grad, and deterministic=True: the gradients of captured tensors are added by "
                                 "atomic scatter-adds, in no fixed order (pass it detached, or deterministic=False)")
            names, tensors = captured_tensor_inputs("attention", score_mod, mask_mod, wanted["score_mod"])
    if not isinstance(return_lse, bool):
        raise ValueError(f"attention: return_lse must be True or False, got {return_lse!r}")
    if torch.is_grad_enabled() and (names or any(x.requires_grad for x in (q, k, v))):
        _check_backward(q, causal, scale, deterministic)
    return AttentionFunction.apply(q, k, v, causal, scale, deterministic, level, score_mod, mask_mod, return_lse,
                                   tuple(names), *tensors)
