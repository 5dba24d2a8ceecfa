"""`gemm(a, b)`: C = A B on the GPU with Tessera's GEMM kernel (A [M, K], B [K, N] in bf16 or f16; C [M, N]
in float32, the tensor core's accumulator, rounded by the caller if it wants 16 bits).

Arrays as for `tessera.runtime.attention`: NumPy (bf16 as `ml_dtypes.bfloat16`) or PyTorch tensors, CUDA
tensors in place. A and B are read through tensor maps, whose rows must start on 16 bytes: K and N must be
multiples of 8; the message says so when they are not.
"""

from __future__ import annotations

from tessera.runtime.attention import DTYPES, UnsupportedKernel, check_tensor, find_gpu
from tessera.runtime.compiler import CompiledKernel, KernelConfig, compile_kernel
from tessera.runtime.launch import dtype_name, is_torch_tensor, run


def gemm_config(dtype: str = "bf16") -> KernelConfig:
    return KernelConfig.of("gemm", dtype=dtype)


def check_gemm_arguments(a, b) -> str:
    """The builder's dtype name for well-formed a, b; TypeError (what is not an array or tensor of real
    numbers) or ValueError (masked arrays, shapes; UnsupportedKernel for a type no kernel takes) naming the
    rule otherwise."""
    for name, x in (("a", a), ("b", b)):
        shape = check_tensor("gemm", name, x)
        if len(shape) != 2:
            raise ValueError(f"gemm: {name} must be 2-D, got shape {tuple(shape)}")
    if is_torch_tensor(a) != is_torch_tensor(b):
        raise ValueError("gemm: a and b must be both NumPy arrays or both PyTorch tensors")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: a is [M, K] and b is [K, N]: got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    names = {dtype_name(a), dtype_name(b)}
    if len(names) != 1:
        raise ValueError(f"gemm: a and b must have one element type, got {', '.join(sorted(names))}")
    (name,) = names
    if name not in DTYPES:
        raise UnsupportedKernel(f"gemm: element type {name} is not supported (supported: {', '.join(DTYPES)})")
    return DTYPES[name]


def gemm_kernel(a, b) -> CompiledKernel:
    return compile_kernel(gemm_config(check_gemm_arguments(a, b)))


def gemm(a, b):
    """A @ B in float32 (see the module docstring); the arguments are checked, then a GPU is looked for,
    then the kernel is compiled or fetched."""
    config = gemm_config(check_gemm_arguments(a, b))
    find_gpu(a, b)
    return run(compile_kernel(config), a, b)
