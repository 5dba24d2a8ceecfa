"""`tessera.attention(q, k, v, causal=False, scale=None)`: attention on the GPU with a Tessera kernel.

    o = softmax(q k^T * scale [+ causal mask]) v     q, o: [batch, heads, seq_q, head_dim]
                                                      k, v: [batch, heads, seq_k, head_dim]

`scale` defaults to 1/sqrt(head_dim); causal masking is aligned bottom-right (query i sees keys
0 .. i + seq_k - seq_q), as in FlashAttention 2.1 and later. q, k and v are NumPy arrays (bf16 as
`ml_dtypes.bfloat16`, or float16) or PyTorch tensors (bfloat16 or float16; CUDA tensors are used in place),
and the output is of the same kind and type.

The kernel for (head_dim, causal, dtype, scale) is compiled once and kept on disk (`tessera.runtime.cache`).
The arguments are checked before anything is compiled or launched, and before a GPU is looked for:
TypeError for what is not an array or tensor of real numbers, ValueError for shapes that disagree, masked
arrays and bad options (`causal`, `scale`, by the builders' rules), and `UnsupportedKernel` (a ValueError)
for what the kernels do not support. Then a GPU that runs sm_90a kernels is found (else `CudaUnavailable`),
and only then is the kernel, built with `tessera.passes.DEFAULT_PIPELINE`, compiled or fetched from the cache.
"""

from __future__ import annotations

import numpy as np

from tessera.runtime.compiler import CompiledKernel, KernelConfig, compile_kernel
from tessera.runtime.launch import dtype_name, is_torch_tensor, run, usable_device

DTYPES = {"bfloat16": "bf16", "float16": "f16"}
"""The element types of q, k and v the kernels take, and the builders' names for them."""
LAYOUT = "[batch, heads, seq, head_dim]"


class UnsupportedKernel(ValueError):
    """The arguments are well formed, but no Tessera kernel computes this (a head_dim, a dtype)."""


def attention_config(head_dim: int, causal: bool = False, dtype: str = "bf16", scale: float | None = None,
                     cluster: int = 1) -> KernelConfig:
    """The configuration of the flash attention kernel for these parameters, checked by the builder's own
    rules (`AttentionConfig.checked`), with the scale resolved so that scale=None and 1/sqrt(head_dim)
    share one kernel. `cluster` > 1: clusters of that many query blocks sharing K and V (TMA multicast)."""
    from tessera.kernels import HEAD_DIMS, AttentionConfig

    if head_dim not in HEAD_DIMS:
        raise UnsupportedKernel(f"head_dim {head_dim} is not supported by Tessera's attention kernels "
                                f"(supported: {', '.join(map(str, HEAD_DIMS))})")
    if isinstance(scale, np.floating | np.integer):
        scale = float(scale)
    checked = AttentionConfig.checked(head_dim, causal, dtype, scale)
    clustered = {} if cluster == 1 else {"cluster": cluster}  # cluster 1 keeps the kernels' cache keys
    return KernelConfig.of("flash_attention", head_dim=checked.head_dim, causal=checked.causal, dtype=checked.dtype,
                           scale=checked.scale, block_n=checked.block_n, **clustered)


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


def check_attention_arguments(q, k, v) -> tuple[int, str]:
    """(head_dim, dtype) of well-formed q, k, v. Otherwise, naming the argument and the rule: TypeError for
    what is not an array or tensor of real numbers (complex, bool, objects, strings), ValueError for masked
    arrays and shapes that disagree, UnsupportedKernel (a ValueError) for a type or head_dim no kernel takes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = check_tensor("attention", name, x)
        if len(shape) != 4:
            raise ValueError(f"attention: {name} must be 4-D {LAYOUT}, got shape {tuple(shape)}")
        if any(int(d) <= 0 for d in shape):
            raise ValueError(f"attention: {name} has an empty dimension: shape {tuple(shape)}")
    kinds = {is_torch_tensor(x) for x in (q, k, v)}
    if len(kinds) != 1:
        raise ValueError("attention: q, k and v must be all NumPy arrays or all PyTorch tensors")
    q_shape, k_shape, v_shape = (tuple(int(d) for d in x.shape) for x in (q, k, v))
    if not q_shape[:2] == k_shape[:2] == v_shape[:2]:
        raise ValueError(f"attention: q, k and v must have the same batch and heads {LAYOUT}, got shapes "
                         f"{q_shape}, {k_shape}, {v_shape}")
    if k_shape[2] != v_shape[2]:
        raise ValueError(f"attention: k and v must have the same sequence length, got {k_shape[2]} and {v_shape[2]}")
    if not q_shape[3] == k_shape[3] == v_shape[3]:
        raise ValueError(f"attention: q, k and v must have the same head_dim, got {q_shape[3]}, {k_shape[3]}, "
                         f"{v_shape[3]}")
    names = [dtype_name(x) for x in (q, k, v)]
    if len(set(names)) != 1:
        raise ValueError(f"attention: q, k and v must have one element type, got {', '.join(names)}")
    if names[0] not in DTYPES:
        raise UnsupportedKernel(f"attention: element type {names[0]} is not supported (supported: "
                                f"{', '.join(DTYPES)}; convert with .astype(ml_dtypes.bfloat16) or .to(torch.bfloat16))")
    if is_torch_tensor(q) and len({x.device for x in (q, k, v)}) != 1:
        raise ValueError(f"attention: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    return q_shape[3], DTYPES[names[0]]


def attention_kernel(q, k, v, causal: bool = False, scale: float | None = None) -> CompiledKernel:
    """The compiled kernel `attention` would run for these arguments (checked first)."""
    head_dim, dtype = check_attention_arguments(q, k, v)
    return compile_kernel(attention_config(head_dim, causal, dtype, scale))


def attention(q, k, v, causal: bool = False, scale: float | None = None, cluster: int = 1):
    """softmax(q k^T * scale [+ bottom-right causal mask]) v on the GPU; see the module docstring. `cluster=2`:
    pairs of query blocks of a head share each K/V tile through TMA multicast (not with `causal`, refused
    by name); where the query blocks are odd in number the launch falls back to clusters of one."""
    head_dim, dtype = check_attention_arguments(q, k, v)
    if cluster != 1:  # refuse what cannot be clustered (causal, a bad size) by name, before looking for a GPU
        from tessera.kernels import flash_attention

        flash_attention(head_dim=head_dim, causal=causal, dtype=dtype, cluster=cluster)
    config = attention_config(head_dim, causal, dtype, scale, cluster)
    usable_device((q, k, v))  # no GPU, no compile
    return run(compile_kernel(config), q, k, v)
