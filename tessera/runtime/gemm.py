"""`gemm(a, b, ...)`: C = alpha op(A) op(B) + beta C + bias on the GPU with Tessera's GEMM kernel.

    gemm(a, b, *, transpose_a=False, transpose_b=False, alpha=1.0, beta=None, c=None, bias=None, level=None,
         schedule="128x128")

A and B are bf16 or f16 (one type), C, the optional addend `c` and the optional `bias` float32. `a` is [M, K]
([K, M] with `transpose_a`: the kernel reads it as A^T, through the tensor core's transpose bit, never a copy),
`b` [K, N] ([N, K] with `transpose_b`); `c` [M, N] is added times `beta` (1 when `c` is given and `beta` is
not); `bias` [N] is added to every row. With 3-D `a` and `b` (and `c`) the leading dimension is a batch: one
GEMM per index. The result is float32, the tensor core's accumulator, rounded by the caller if it wants 16 bits.

Arrays as for `tessera.runtime.attention`: NumPy (bf16 as `ml_dtypes.bfloat16`) or PyTorch tensors, CUDA
tensors in place. Any M, N, K >= 1: when the innermost sizes of `a` and `b` are multiples of 8 (16-byte rows;
for a CUDA tensor also a 16-byte aligned address) the kernel reads them with TMA, pipelined and warp-
specialized; otherwise it reads them with ld.global (the `gemm(aligned=False)` kernel, whose K loop stays
single-stage). Both go through the same default pipeline; the host description
(`gemm_kernel(...).host.copies`) says which copy each operand gets.

`schedule` picks the TMA kernel's tile schedule (`tessera.kernels.gemm.GEMM_SCHEDULES`): "128x128" (the
default), "128x256" (CUTLASS's cooperative 128 x 256 x 64 tile, four stages), "128x256-cluster2" (that tile
in 2 x 1 clusters sharing B by TMA multicast), and each of the two with "-pingpong" (the consumer warpgroups
issue their wgmmas in turn: `passes.PINGPONG_PIPELINE`). Every schedule adds the products in the same order,
so their results are bitwise equal; the ld.global kernel is 128 x 128 under all of them, and the 128 x 256
ones refuse beta != 0 (C_in's registers do not fit beside the larger accumulator).
"""

from __future__ import annotations

from tessera.passes import DEFAULT_PIPELINE, PINGPONG_PIPELINE
from tessera.runtime.attention import DTYPES, UnsupportedKernel, check_tensor
from tessera.runtime.compiler import CompiledKernel, KernelConfig, built_module, compile_kernel, remembered
from tessera.runtime.launch import dtype_name, is_torch_tensor, usable_device
from tessera.runtime.no_backward import no_backward

ROW_MULTIPLE = 8
"""Elements per 16-byte row granule of bf16/f16 (`facts.TENSOR_MAP_GLOBAL_ALIGNMENT` / 2): the sizes TMA can read."""


@remembered
def gemm_config(dtype: str = "bf16", *, transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0,
                beta: float = 0.0, bias: bool = False, batch: bool = False, aligned: bool = True,
                schedule: str = "128x128") -> KernelConfig:
    """The configuration of the GEMM kernel for these options (the builder's keyword arguments; only those
    that differ from the defaults are named, so the plain kernel keeps one key). `schedule` names the tile
    schedule (`tessera.kernels.gemm.GEMM_SCHEDULES`), whose arguments join the options of the TMA kernel
    (`aligned`); the ld.global kernel is 128 x 128 under every schedule."""
    from tessera.kernels.gemm import check_factor, check_schedule

    options = {"dtype": dtype}
    given = dict(transpose_a=transpose_a, transpose_b=transpose_b, alpha=check_factor("alpha", alpha),
                 beta=check_factor("beta", beta), bias=bias, batch=batch, aligned=aligned)
    # `aligned` is always named (True or False): the builder's default, None, is the kernel specialized at launch
    defaults = dict(transpose_a=False, transpose_b=False, alpha=1.0, beta=0.0, bias=False, batch=False, aligned=None)
    options.update({k: v for k, v in given.items() if v != defaults[k]})
    tiles, pingpong = check_schedule(schedule)
    if tiles.get("block_n", 128) > 128 and beta != 0:
        raise ValueError(f"gemm: schedule {schedule!r} does not take beta != 0: C_in's registers do not fit beside "
                         "its 64 x 256 accumulator slab per consumer warpgroup (the kernel would spill); use "
                         "schedule '128x128'")
    if not aligned:  # the ld.global kernel keeps 128 x 128: at 128 x 256 it needs 273 registers a thread
        return KernelConfig.of("gemm", **options)
    return KernelConfig.of("gemm", PINGPONG_PIPELINE if pingpong else DEFAULT_PIPELINE, **options, **tiles)


def _shape(name: str, x) -> tuple[int, ...]:
    """The shape of `x`, an array or tensor of real numbers (`check_tensor`) without an empty dimension."""
    shape = tuple(int(d) for d in check_tensor("gemm", name, x))
    if any(d <= 0 for d in shape):
        raise ValueError(f"gemm: {name} has an empty dimension: shape {shape}")
    return shape


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"gemm: {name} must be True or False, got {value!r}")
    return value


def _rows_aligned(x) -> bool:
    """Whether TMA can read x: its innermost size is a multiple of 8 and, on the GPU, its address and row
    strides are multiples of 16 bytes."""
    if int(x.shape[-1]) % ROW_MULTIPLE:
        return False
    if is_torch_tensor(x) and x.is_cuda:
        size = x.element_size()
        return x.data_ptr() % 16 == 0 and all(s * size % 16 == 0 for s in x.stride()[:-1])
    return True


def check_gemm_arguments(a, b, *, transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0,
                         beta: float | None = None, c=None, bias=None, schedule: str = "128x128") -> KernelConfig:
    """The kernel configuration for well-formed arguments; ValueError (UnsupportedKernel for an element type no
    kernel takes) naming the argument and the rule otherwise."""
    transpose_a, transpose_b = _flag("transpose_a", transpose_a), _flag("transpose_b", transpose_b)
    a_shape, b_shape = _shape("a", a), _shape("b", b)
    if len(a_shape) not in (2, 3) or len(b_shape) != len(a_shape):
        raise ValueError(f"gemm: a and b must be both 2-D, or both 3-D with a leading batch dimension, got shapes "
                         f"{a_shape} and {b_shape}")
    tensors = [("a", a), ("b", b)] + [(n, x) for n, x in (("c", c), ("bias", bias)) if x is not None]
    if len({is_torch_tensor(x) for _, x in tensors}) != 1:
        raise ValueError("gemm: a, b (and c, bias) must be all NumPy arrays or all PyTorch tensors")
    *lead, rows_a, cols_a = a_shape
    *lead_b, rows_b, cols_b = b_shape
    (m, k), (kb, n) = (cols_a, rows_a) if transpose_a else (rows_a, cols_a), (cols_b, rows_b) if transpose_b else (rows_b, cols_b)
    layouts = f"a is {'[K, M]' if transpose_a else '[M, K]'} and b is {'[N, K]' if transpose_b else '[K, N]'}"
    if k != kb:
        raise ValueError(f"gemm: {layouts}: got shapes {a_shape} and {b_shape}, whose K differ ({k} and {kb})")
    if lead != lead_b:
        raise ValueError(f"gemm: a and b must have the same batch size, got {lead[0]} and {lead_b[0]}")
    names = {dtype_name(a), dtype_name(b)}
    if len(names) != 1:
        raise ValueError(f"gemm: a and b must have one element type, got {', '.join(sorted(names))}")
    (name,) = names
    if name not in DTYPES:
        raise UnsupportedKernel(f"gemm: element type {name} is not supported (supported: {', '.join(DTYPES)})")
    if beta is None:
        beta = 1.0 if c is not None else 0.0
    if c is None and beta != 0:
        raise ValueError(f"gemm: beta = {beta} scales c, but no c was given")
    if c is not None:
        if beta == 0:
            raise ValueError("gemm: c is given but beta is 0, so it would not be read (pass beta, or drop c)")
        if _shape("c", c) != (*lead, m, n):
            raise ValueError(f"gemm: c must be {[*lead, m, n]} ([batch,] M, N), got shape {_shape('c', c)}")
    if bias is not None and _shape("bias", bias) != (n,):
        raise ValueError(f"gemm: bias must be [N] = [{n}], got shape {_shape('bias', bias)}")
    for label, x in (("c", c), ("bias", bias)):
        if x is not None and dtype_name(x) != "float32":
            raise ValueError(f"gemm: {label} must be float32 (the output's type), got {dtype_name(x)}")
    aligned = _rows_aligned(a) and _rows_aligned(b)
    return gemm_config(DTYPES[name], transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, beta=beta,
                       bias=bias is not None, batch=bool(lead), aligned=aligned, schedule=schedule)


def gemm_kernel(a, b, **options) -> CompiledKernel:
    """The compiled kernel `gemm` would run for these arguments (checked first)."""
    return compile_kernel(check_gemm_arguments(a, b, **options))


@no_backward("gemm")
def gemm(a, b, *, transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0,
         beta: float | None = None, c=None, bias=None, level: str | None = None, schedule: str = "128x128"):
    """alpha op(a) op(b) + beta c + bias in float32 (see the module docstring). `level=None` runs on the GPU;
    "tile", "target" or "ptx" runs the very kernel the GPU would run in that interpreter (`tessera.launch`),
    returning NumPy arrays (CPU tensors for PyTorch inputs). `schedule` picks the tile schedule
    (`tessera.kernels.gemm.GEMM_SCHEDULES`: "128x128", the default, "128x256", "128x256-cluster2", each of
    those two with "-pingpong")."""
    from tessera.runtime import entry
    from tessera.runtime.attention_plan import LEVELS

    config = check_gemm_arguments(a, b, transpose_a=transpose_a, transpose_b=transpose_b, alpha=alpha, beta=beta,
                                  c=c, bias=bias, schedule=schedule)
    if level is not None and (not isinstance(level, str) or level not in LEVELS):
        raise ValueError(f"gemm: level must be None (the GPU) or one of {', '.join(map(repr, LEVELS))}; got {level!r}")
    inputs = [a, b] + [x for x in (c, bias) if x is not None]
    if level is None:
        usable_device(inputs)  # no GPU, no compile
        return entry.launch(compile_kernel(config), *inputs)
    from tessera.runtime.launch import numpy_to_torch, torch_to_numpy

    torch_in = is_torch_tensor(a)
    arrays = [torch_to_numpy(x.cpu()) if torch_in else x for x in inputs]
    pipeline = config.pipeline if level != "tile" and config.pipeline != DEFAULT_PIPELINE else None
    out = entry.launch(built_module(config), *arrays, level=level, pipeline=pipeline)
    return numpy_to_torch(out) if torch_in else out
