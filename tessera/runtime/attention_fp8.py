"""`tessera.attention` on FP8 inputs: q, k, v in e4m3 (`ml_dtypes.float8_e4m3fn` NumPy arrays or
`torch.float8_e4m3fn` tensors) with optional f32 descale factors of shape [batch, heads_k] (FlashAttention-3's
`q_descale`, `k_descale`, `v_descale`; NumPy arrays or tensors; None is 1).

    o = softmax((q descale_q)(k descale_k)^T * scale [+ causal mask]) (v descale_v)    o: bf16

The kernel is `tessera.kernels.flash_attention(dtype="e4m3")` (`tessera.kernels.attention_fp8`). At
`level="tile"` it runs in the Tile IR interpreter with V as given. On the GPU (`level=None`) and at "target"
(CTA simulator) and "ptx" (PTX executor) it is the lowered kernel (`LOWERED_V_LAYOUT`, built the same way for
all three, compiled by the default pipeline `passes.DEFAULT_PIPELINE`): V is handed to it in the layout its ABI
asks for (`kernel_v`, read from the Tile IR signature, `tessera.kernel_abi`: today V as given, [batch, heads_k,
seq_k, head_dim], which the kernel's producer warpgroup transposes in shared memory into V^T in P8 key order,
the order the e4m3 P.V wgmma reads P's registers in, passes/convert_tile_to_sm90/transpose.py; for a kernel
that takes V^T in P8 key order the rearrangement is a host or device copy), and seq_k must meet the kernel's
promise (`tile.divisible`: none today, any seq_k; a kernel with V^T in P8 key order promises a multiple of 16,
refused by name otherwise). The GPU path launches like the bf16 one (`tessera.launch`:
NumPy arrays are copied to the device and back, CUDA tensors used in place, the output a CUDA tensor on
torch's current stream). Descales of CUDA tensors stay on the device (not read on the host: their
finiteness is not checked there, as FlashAttention-3 does not); host ones must be finite.

PyTorch tensors on the CPU levels are converted to NumPy bit for bit (through their bytes: e4m3 is the same
OCP format in both) and the results returned as CPU tensors. What the FP8 kernel does not combine with (bias,
score_mod/mask_mod/block_mask, packed sequences, split-KV, clusters), e5m2 inputs (torch or ml_dtypes), and q, k, v of
mixed FP8 and 16-bit types are refused by name (`UnsupportedKernel`). k and v may have fewer heads than q
(GQA/MQA); query head h takes the descales of key head h // (heads // heads_k).
"""

from __future__ import annotations

import functools

import numpy as np

from tessera.runtime.attention_base import LAYOUT, UnsupportedKernel, check_tensor
from tessera.runtime.compiler import KernelConfig, built_module, compile_kernel
from tessera.runtime.launch import dtype_name, is_torch_tensor, numpy_to_torch, torch_to_numpy

FP8_INPUT = "float8_e4m3fn"
"""The element type name of FP8 q, k, v (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn)."""

FP8_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3", "float8_e4m3b11fnuz")
"""Element type names that make a call an FP8 one (all but FP8_INPUT are refused by name)."""

LOWERED_LEVELS = (None, "target", "ptx")
"""The levels that run the FP8 kernel lowered to sm_90a."""

LOWERED_V_LAYOUT = False
"""`flash_attention(v_transposed=...)` of the lowered kernel: V as it is, transposed in the kernel by the producer
warpgroup (convert-tile-to-sm90 also lowers "p8", V^T in P8 key order, without the transpose). The runtime reads
the layout back from the kernel's signature (`kernel_v`), never from this."""


def is_fp8_call(q, k, v, descales) -> bool:
    """Whether any of q, k, v is an 8-bit float array, or any descale is given: the call takes the FP8 path."""
    return any(dtype_name(x) in FP8_NAMES for x in (q, k, v) if hasattr(x, "dtype")) or \
        any(d is not None for d in descales)


def check_fp8_arguments(q, k, v) -> int:
    """The head_dim of well-formed FP8 q, k, v (all float8_e4m3fn, all NumPy arrays or all PyTorch tensors on one
    device, [batch, heads, seq, head_dim] with k and v sharing heads_k, a divisor of heads);
    TypeError/ValueError/UnsupportedKernel naming the rule."""
    names = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = check_tensor("attention", name, x)
        if len(shape) != 4 or any(int(d) <= 0 for d in shape):
            raise ValueError(f"attention: {name} must be a non-empty 4-D {LAYOUT} array, got shape {tuple(shape)}")
        names.append(dtype_name(x))
    if len({is_torch_tensor(x) for x in (q, k, v)}) != 1:
        raise ValueError("attention: q, k and v must be all NumPy arrays or all PyTorch tensors")
    if is_torch_tensor(q) and len({x.device for x in (q, k, v)}) != 1:
        raise ValueError(f"attention: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if len(set(names)) != 1:
        raise ValueError(f"attention: q, k and v must all be {FP8_INPUT} for FP8 attention; mixed FP8 and "
                         f"other inputs are not supported, got {', '.join(names)}")
    if names[0] not in FP8_NAMES:
        raise ValueError(f"attention: descale_q, descale_k and descale_v apply to FP8 attention ({FP8_INPUT} q, k "
                         f"and v); got {names[0]} inputs (arrays holding e4m3 values: convert with "
                         f".astype(ml_dtypes.{FP8_INPUT}) or .to(torch.{FP8_INPUT}))")
    if names[0] != FP8_INPUT:
        raise UnsupportedKernel(f"attention: element type {names[0]} is not supported; FP8 attention takes "
                                f"{FP8_INPUT} (e4m3) q, k and v, as FlashAttention-3 does")
    (batch, heads, _, d), (kb, heads_k, seq_k, kd), vs = (tuple(int(n) for n in x.shape) for x in (q, k, v))
    if not (batch == kb and (kb, heads_k) == vs[:2] and heads % heads_k == 0 and seq_k == vs[2] and d == kd == vs[3]):
        raise ValueError(f"attention: q, k and v must have the same batch and head_dim, k and v the same heads (a "
                         f"divisor of q's) and sequence length {LAYOUT}, got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    return d


def check_descale(name: str, descale, batch: int, heads_k: int):
    """The f32 [batch, heads_k] descale: a NumPy array (ones for None; a CPU tensor converted), or for a CUDA
    tensor an f32 tensor on its device (not read on the host); TypeError/ValueError naming `name` otherwise."""
    if descale is None:
        return np.ones((batch, heads_k), np.float32)
    shape = tuple(int(s) for s in check_tensor("attention", name, descale))
    on_device = is_torch_tensor(descale) and descale.is_cuda
    if is_torch_tensor(descale) and not on_device:
        descale = torch_to_numpy(descale)
    if on_device:
        real = not (descale.is_complex() or dtype_name(descale) == "bool" or dtype_name(descale) in FP8_NAMES)
    else:
        real = descale.dtype.kind in "fiu" or dtype_name(descale) == "bfloat16"
    if not real:
        raise TypeError(f"attention: {name} must be an array or tensor of real numbers, got {dtype_name(descale)}")
    if shape != (batch, heads_k):
        raise ValueError(f"attention: {name} must have shape [batch, heads_k] = ({batch}, {heads_k}), got {shape}")
    if on_device:
        return descale.detach().float().contiguous()
    with np.errstate(over="ignore"):  # a float64 past f32's range becomes inf, refused just below
        values = np.asarray(descale, np.float32)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"attention: {name} must be finite (in f32)")
    if np.any(values < 0):
        raise ValueError(f"attention: {name} must be non-negative (a descale is a quantization scale, amax / 448), "
                         f"got {float(values.min())}")
    return np.ascontiguousarray(values)


SCORE_HEADROOM = 4.0
"""The factor between the largest |q8 . k8| an e4m3 row pair can give (448^2 head_dim) and the f32 range that
`check_score_factor` keeps free: the kernel scales the scores by scale descale_q descale_k, then by log2(e) and
subtracts the row maximum (a difference of two scores), all in f32; 4 > 2 log2(e) covers both."""


def check_score_factor(descale_q, descale_k, scale: float, head_dim: int) -> None:
    """ValueError where the kernel's f32 score factor scale descale_q descale_k (per (batch, kv-head), rounded
    as the kernel rounds it) could overflow f32 on some e4m3 inputs: |q8 . k8| is at most 448^2 head_dim, so the
    factor must stay below f32 max / (SCORE_HEADROOM 448^2 head_dim); past it, a saturated row's scores become
    inf and the softmax NaN where float64 attention of the dequantized inputs is finite. Host descales only
    (CUDA tensors are not read on the host)."""
    from tessera.sm90.fp8 import FP8_MAX_FINITE

    if any(is_torch_tensor(d) for d in (descale_q, descale_k)):
        return
    limit = float(np.finfo(np.float32).max) / (SCORE_HEADROOM * FP8_MAX_FINITE["e4m3"] ** 2 * head_dim)
    with np.errstate(over="ignore"):
        factor = np.abs(descale_q * descale_k * np.float32(scale))
    if np.any(~np.isfinite(factor) | (factor > limit)):
        raise ValueError(f"attention: scale * descale_q * descale_k reaches {float(factor.max()):.3e}, past "
                         f"{limit:.3e}, where the f32 scores of e4m3 inputs at head_dim {head_dim} (|q8 . k8| up to "
                         f"448^2 * {head_dim}) could overflow; use smaller descales")


def fp8_config(head_dim: int, causal: bool, scale, grouped: bool, return_lse: bool, level: str | None) -> KernelConfig:
    """The FP8 kernel `attention_fp8` runs at `level`, as the runtime's compiler names it: V as given at level
    "tile", `LOWERED_V_LAYOUT` on the GPU and the levels below Tile IR (one kernel for the three)."""
    return KernelConfig.of("flash_attention", head_dim=head_dim, causal=causal, dtype="e4m3", scale=scale,
                           grouped=grouped, return_lse=return_lse,
                           v_transposed=LOWERED_V_LAYOUT if level in LOWERED_LEVELS else False)


@functools.cache
def fp8_signature(config: KernelConfig):
    """The Tile IR signature (`tessera.kernel_abi.KernelSignature`) of `config`'s kernel, built once per process:
    the ABI the runtime reads V's layout and seq_k's promise from (the Target IR keeps neither key order)."""
    from tessera import api

    return api.find_kernel(built_module(config))


def check_key_length(sig, seq_k: int, level: str | None) -> None:
    """UnsupportedKernel naming the rule where seq_k breaks the kernel's promise (`tile.divisible`; the lowered
    kernel's V^T in P8 key order is ordered by groups of 16 keys, and its rows of seq_k bytes start on the 16
    bytes TMA needs)."""
    multiple = sig.divisible.get("seq_k", 1)
    if seq_k % multiple:
        where = "on the GPU (level=None)" if level is None else f"at level={level!r}"
        why = (f"V^T in P8 key order by groups of {multiple}, rows on 16 bytes for TMA" if sig.args[2].key_order
               else "the kernel's tile.divisible")
        raise UnsupportedKernel(f"attention: FP8 attention {where} needs seq_k a multiple of {multiple} ({why}), "
                                f"got seq_k={seq_k}; level='tile' takes any length")


def kernel_v(v, sig, out=None):
    """V [batch, heads_k, seq_k, head_dim] in the layout kernel `sig` takes it: as given where its V argument
    has K's dims; transposed where its last two dims are K's swapped (V^T [.., head_dim, seq_k]); with the keys
    permuted by `tessera.sm90.fp8.p8_key_positions` where it has `tile.key_order = "p8"`. A NumPy array, or a
    tensor on V's device (through its bytes: PyTorch copies FP8 tensors as uint8), written into the contiguous
    tensor `out` when given (what a benchmark times)."""
    from tessera.sm90.fp8 import p8_key_positions

    k_dims, v_dims = list(sig.args[1].dims), list(sig.args[2].dims)
    if v_dims not in (k_dims, k_dims[:2] + k_dims[2:][::-1]):
        raise ValueError(f"@{sig.name}: V's dims {sig.args[2].dims} are neither K's {sig.args[1].dims} nor them "
                         "transposed")
    transposed = v_dims != k_dims
    keys = p8_key_positions(int(v.shape[2])) if sig.args[2].key_order is not None else None
    if is_torch_tensor(v):
        import torch

        bits = v.view(torch.uint8)
        bits = bits.transpose(2, 3) if transposed else bits
        target = None if out is None else out.view(torch.uint8)
        if keys is not None:
            index = torch.as_tensor(keys, device=v.device)
            bits = torch.index_select(bits, 3 if transposed else 2, index, **({} if target is None else {"out": target}))
        elif target is not None:
            target.copy_(bits)
        return bits.contiguous().view(v.dtype) if out is None else out
    arranged = np.swapaxes(v, 2, 3) if transposed else v
    if keys is not None:
        arranged = np.take(arranged, keys, axis=3 if transposed else 2)
    return np.ascontiguousarray(arranged)


def _on_gpu_like(q, descale):
    """A checked descale as a kernel input beside q on the GPU path: a NumPy array for NumPy q, a CPU tensor for
    CPU tensors, an f32 tensor on q's device for CUDA tensors (a CUDA descale must be on that device)."""
    if not is_torch_tensor(q):
        return torch_to_numpy(descale.cpu()) if is_torch_tensor(descale) else descale
    if not q.is_cuda:
        return numpy_to_torch(torch_to_numpy(descale.cpu()) if is_torch_tensor(descale) else descale)
    if is_torch_tensor(descale):
        if descale.device != q.device:
            raise ValueError(f"attention: descales must be on q's device {q.device}, got {descale.device}")
        return descale
    import torch

    return torch.from_numpy(descale).to(q.device)


def _on_host(x) -> np.ndarray:
    return torch_to_numpy(x.detach().cpu()) if is_torch_tensor(x) else x


def attention_fp8(q, k, v, *, causal, scale, return_lse, level, descale_q=None, descale_k=None, descale_v=None):
    """The FP8 forward (module docstring) on checked options; returns o (bf16) or (o, lse f32 [batch, heads,
    seq_q]), of q's kind (CPU tensors for tensors at the CPU levels)."""
    from tessera.kernels import AttentionConfig
    from tessera.kernels.attention_fp8 import FP8_HEAD_DIMS
    from tessera.runtime import entry
    from tessera.runtime.attention_plan import check_level
    from tessera.runtime.launch import usable_device

    head_dim = check_fp8_arguments(q, k, v)
    if head_dim not in FP8_HEAD_DIMS:
        raise UnsupportedKernel(f"head_dim {head_dim} is not supported by Tessera's FP8 attention kernel "
                                f"(supported: {', '.join(map(str, FP8_HEAD_DIMS))})")
    batch, heads_k = (int(n) for n in k.shape[:2])
    descales = [check_descale(n, d, batch, heads_k) for n, d in
                (("descale_q", descale_q), ("descale_k", descale_k), ("descale_v", descale_v))]
    check_level(level)
    if not isinstance(return_lse, bool):
        raise ValueError(f"attention: return_lse must be True or False; got {return_lse!r}")
    if isinstance(scale, np.floating | np.integer):
        scale = float(scale)
    AttentionConfig.checked(head_dim, causal, "bf16", scale, return_lse=return_lse)  # the builder's rules, by name
    check_score_factor(descales[0], descales[1], 1.0 / np.sqrt(head_dim) if scale is None else scale, head_dim)
    config = fp8_config(head_dim, causal, scale, heads_k != int(q.shape[1]), return_lse, level)
    sig = fp8_signature(config)
    check_key_length(sig, int(k.shape[2]), level)
    if level is None:
        usable_device((q, k, v))  # no GPU, no compile, no device copy (CudaUnavailable names level=)
        outputs = entry.launch(compile_kernel(config), q, k, kernel_v(v, sig), *(_on_gpu_like(q, d) for d in descales))
    else:
        arrays = [_on_host(x) for x in (q, k, v, *descales)]
        outputs = entry.launch(built_module(config), *arrays[:2], kernel_v(arrays[2], sig), *arrays[3:], level=level)
        if is_torch_tensor(q):
            outputs = tuple(map(numpy_to_torch, outputs)) if return_lse else numpy_to_torch(outputs)
    if not return_lse:
        return outputs
    o, lse = outputs
    return o, lse.reshape(tuple(lse.shape[:-1]))
