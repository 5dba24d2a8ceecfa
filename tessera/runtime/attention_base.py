"""What the attention entry points (`attention`, its plan, the varlen and backward ones) share: the element
types and layout they take, the configuration of the forward kernel, the check of a tensor argument, the error
for what no kernel computes, and the backward's LSE gradient (`with_lse_gradient`, the dense and the modified
backward's). It sits below them all, so that they import it and not each other."""

from __future__ import annotations

import numpy as np

from tessera.runtime.compiler import KernelConfig, remembered

DTYPES = {"bfloat16": "bf16", "float16": "f16"}
"""The element types of q, k and v the kernels take, and the builders' names for them."""
LAYOUT = "[batch, heads, seq, head_dim]"


class UnsupportedKernel(ValueError):
    """The arguments are well formed, but no Tessera kernel computes this (a head_dim, a dtype)."""


@remembered
def attention_config(head_dim: int, causal: bool = False, dtype: str = "bf16", scale: float | None = None,
                     return_lse: bool = False, num_splits: int = 1, cluster: int = 1,
                     bias_broadcast: tuple[str, ...] | None = None) -> KernelConfig:
    """The configuration of the flash attention kernel for these parameters, checked by the builder's own
    rules (`AttentionConfig.checked`), with the scale resolved so that scale=None and 1/sqrt(head_dim)
    share one kernel. `return_lse`, `num_splits`, `cluster` and the bias join the options only when they are
    not the defaults, so the default kernel keeps its cache key. `cluster` > 1: clusters of that many query
    blocks sharing K and V (TMA multicast). `bias_broadcast` (None: no bias) is the kernel's with an additive
    bias: the dimensions, of "batch" and "heads", in which the bias has size 1."""
    from tessera.kernels import AttentionConfig

    check_head_dim(head_dim)
    if isinstance(scale, np.floating | np.integer):
        scale = float(scale)
    bias = bias_broadcast is not None
    checked = AttentionConfig.checked(head_dim, causal, dtype, scale, return_lse=return_lse, num_splits=num_splits,
                                      bias=bias, bias_broadcast=bias_broadcast or ())
    extra = {"return_lse": True} if checked.return_lse and not checked.split else {}
    if bias:
        extra["bias"] = True
        if checked.bias_broadcast:
            extra["bias_broadcast"] = checked.bias_broadcast
    if checked.split:
        extra["num_splits"] = checked.num_splits
    if cluster != 1:
        extra["cluster"] = cluster
    return KernelConfig.of("flash_attention", head_dim=checked.head_dim, causal=checked.causal, dtype=checked.dtype,
                           scale=checked.scale, block_n=checked.block_n, **extra)


def check_head_dim(head_dim: int) -> None:
    """UnsupportedKernel naming `head_dim` and the supported ones unless a forward kernel takes it (every
    forward path checks this before it builds a kernel: with score_mod/mask_mod too)."""
    from tessera.kernels import HEAD_DIMS

    if head_dim not in HEAD_DIMS:
        raise UnsupportedKernel(f"head_dim {head_dim} is not supported by Tessera's attention kernels "
                                f"(supported: {', '.join(map(str, HEAD_DIMS))})")


def check_tensor(where: str, name: str, x) -> tuple:
    """The shape of `x` if it is a NumPy array or a PyTorch tensor that is not masked and holds real numbers;
    TypeError (ValueError for a masked array) naming `where`, the argument and the rule otherwise."""
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{where}: {name} is a masked array; the kernel reads every element and would ignore the "
                         "mask (pass np.ma.filled(x, fill) or x.data)")
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise TypeError(f"{where}: {name} must be a NumPy array or a PyTorch tensor, got {type(x).__name__}")
    if isinstance(x, np.ndarray) and x.dtype.kind in "cbOUSM":
        rule = ("complex numbers would lose their imaginary part" if x.dtype.kind == "c" else
                f"{where} takes real floating-point numbers")
        raise TypeError(f"{where}: {name} has element type {x.dtype}; {rule}")
    return tuple(shape)


def with_lse_gradient(dpsum, dlse):
    """The preprocess's `dpsum` ([batch, heads, padded rows], NumPy or torch) less `dlse` on its first seq_q rows,
    in place: a loss that reads the forward's LSE as well as O adds P dLSE to dS (d LSE_i / d S_ij = P_ij), and
    dS = P (dP - dPsum) with dPsum - dLSE for dPsum is that sum, so the main kernel computes the gradients of
    both unchanged (as with a score_mod: dLSE is in the modified scores' LSE). A row that sees no key has P = 0,
    and so no gradient from a finite dLSE. `dlse` None changes nothing."""
    if dlse is not None:
        dpsum[:, :, : dlse.shape[2]] -= dlse
    return dpsum
