"""Triton 3.9 kernels as Triton's users write them (the tutorials' vector add, fused softmax, layer norm forward
and backward, grouped matmul and persistent TMA matmul, and the common user kernels around them), compiled for
sm_90a by build.py. Each `Spec` names its kernel, signature, constexprs and options; tests/test_ptx_triton.py
runs their PTX against NumPy.

Only build.py imports this module (it needs Triton); the tests read the PTX it writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Tutorial 01: out = x + y under a mask, for any n."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    """Tutorial 02: each program takes rows start, start + step, ... (`tl.range` with num_stages)."""
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


@triton.jit
def layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    """Tutorial 05's forward: mean, then variance of x - mean (no Welford), over blocks of a row."""
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def layer_norm_bwd_dx(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                      BLOCK_SIZE_N: tl.constexpr):
    """Tutorial 05's backward for dx, its partial dw/db summed per group of rows under a `tl.atomic_cas` spin
    lock; here the partial sums go in with `tl.atomic_add` and the lock counts the rows of its group."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.atomic_add(Count + GROUP_SIZE_M, 1)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    """Tutorial 03: grouped program ids (L2 reuse), masked K loop, tl.dot, optional leaky_relu, f16 out."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = tl.where(accumulator >= 0, accumulator, 0.01 * accumulator)
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def matmul_descriptor_persistent(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr,
                                 BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                                 GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Tutorial 09's persistent matmul on device-made tensor descriptors (`tl.make_tensor_descriptor`: the
    kernel writes its tensor maps into global scratch), tiles taken `tl.range(start, tiles, NUM_SMS)`."""
    dtype = c_ptr.dtype.element_ty
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_SIZE_N, BLOCK_SIZE_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N])
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        group_id = tile_id // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + (tile_id % group_size_m)
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)
        c_desc.store([offs_am, offs_bn], accumulator.to(dtype))


@triton.jit
def fp8_matmul(a_ptr, b_ptr, c_ptr, scale_a, scale_b, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """e4m3 x e4m3 with f32 accumulation, per-tensor scales, bf16 out (A row-major [M, K], B [K, N])."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    acc = acc * (tl.load(scale_a) * tl.load(scale_b))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def int8_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """int8 x int8 -> int32 (A [M, K], B [K, N] row-major), exact."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def scan_sort_hist(X, Cum, Sorted, Hist, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    """One row per program: `tl.cumsum` (int32, exact), `tl.sort` (f32, ascending) and `tl.histogram` of
    x mod BINS; lanes past n contribute 0 to the scan, +inf to the sort and are left out of the histogram."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(X + row * n + cols, mask=mask, other=0)
    tl.store(Cum + row * n + cols, tl.cumsum(x, axis=0), mask=mask)
    f = tl.where(mask, x.to(tl.float32) * 0.5 - 3.0, float("inf"))
    tl.store(Sorted + row * BLOCK + cols, tl.sort(f, dim=0))
    bins = tl.where(mask, x % BINS, BINS)  # BINS: out of range, not counted
    tl.store(Hist + row * BINS + tl.arange(0, BINS), tl.histogram(bins, BINS))


@triton.jit
def where_nan(X, Y, Out, n, BLOCK: tl.constexpr):
    """`tl.where`, `tl.maximum`/`tl.minimum` (both propagate_nan modes) and NaN tests on inputs with NaNs."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(Out + 0 * n + offs, tl.where(x > y, x, y), mask=mask)
    tl.store(Out + 1 * n + offs, tl.where(x != x, 0.0, x), mask=mask)
    tl.store(Out + 2 * n + offs, tl.maximum(x, y), mask=mask)
    tl.store(Out + 3 * n + offs, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)
    tl.store(Out + 4 * n + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)
    tl.store(Out + 5 * n + offs, tl.where(x < y, 1.0, -1.0) * tl.where(x >= y, 2.0, 3.0), mask=mask)
    tl.store(Out + 6 * n + offs, tl.max(tl.where(mask, x, -float("inf")), axis=0) + 0.0 * x, mask=mask)


@triton.jit
def math_ops(X, Y, Out, n, BLOCK: tl.constexpr):
    """`tl.math`'s rsqrt, erf, exp2, div_rn, sqrt_rn, fma, and libdevice's log1p."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    y = tl.load(Y + offs, mask=mask, other=1.0)
    ax = tl.abs(x) + 0.125
    tl.store(Out + 0 * n + offs, tl.math.rsqrt(ax), mask=mask)
    tl.store(Out + 1 * n + offs, tl.math.erf(x), mask=mask)
    tl.store(Out + 2 * n + offs, libdevice.log1p(ax), mask=mask)
    tl.store(Out + 3 * n + offs, tl.math.exp2(x), mask=mask)
    tl.store(Out + 4 * n + offs, tl.math.div_rn(x, y), mask=mask)
    tl.store(Out + 5 * n + offs, tl.math.sqrt_rn(ax), mask=mask)
    tl.store(Out + 6 * n + offs, tl.math.fma(x, y, ax), mask=mask)


@dataclass(frozen=True)
class Spec:
    """One kernel to compile: its jitted function, signature and constexprs (as `triton.compiler.ASTSource`
    takes them), the pointer/integer arguments a launch with 16-byte aligned tensors specialises as divisible
    by 16, and the compile options (num_warps, num_stages)."""

    fn: object
    signature: dict
    constexprs: dict = field(default_factory=dict)
    divisible: tuple = ()
    options: dict = field(default_factory=dict)
    golden: bool = True
    """Whether the PTX is committed (small); else the slow tests compile it."""


def _sig(fn, types: dict) -> dict:
    """A full signature: `types` for the runtime arguments, constexpr for the rest."""
    return {name: types.get(name, "constexpr") for name in fn.arg_names}


def _matmul(element: str, out: str, stages: int, divisible_k: bool) -> Spec:
    """Tutorial 03's matmul; with K divisible by 16 (`divisible_k`) Triton pipelines its loads through
    cp.async in `stages` buffers, else it loads through registers."""
    types = {"a_ptr": element, "b_ptr": element, "c_ptr": out,
             **dict.fromkeys(("M", "N", "K", "stride_am", "stride_bk", "stride_cm"), "i32")}
    return Spec(matmul_kernel, _sig(matmul_kernel, types),
                {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2,
                 "ACTIVATION": "leaky_relu", "stride_ak": 1, "stride_bn": 1, "stride_cn": 1},
                ("a_ptr", "b_ptr", "c_ptr", "stride_am", "stride_bk", "stride_cm", *(("K",) if divisible_k else ())),
                {"num_warps": 4, "num_stages": stages})


SPECS = {
    "vector_add": Spec(add_kernel, _sig(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                                      "n_elements": "i32"}),
                       {"BLOCK_SIZE": 256}, ("x_ptr", "y_ptr", "out_ptr"), {"num_warps": 4}),
    "softmax": Spec(softmax_kernel, _sig(softmax_kernel, {"output_ptr": "*fp32", "input_ptr": "*fp32",
                                                          "input_row_stride": "i32", "output_row_stride": "i32",
                                                          "n_rows": "i32", "n_cols": "i32"}),
                    {"BLOCK_SIZE": 128, "num_stages": 2}, ("output_ptr", "input_ptr"), {"num_warps": 4}),
    "layer_norm_fwd": Spec(layer_norm_fwd, _sig(layer_norm_fwd, {"X": "*fp16", "Y": "*fp16", "W": "*fp16",
                                                                 "B": "*fp16", "Mean": "*fp32", "Rstd": "*fp32",
                                                                 "stride": "i32", "N": "i32", "eps": "fp32"}),
                           {"BLOCK_SIZE": 128}, ("X", "Y", "W", "B", "Mean", "Rstd"), {"num_warps": 4}),
    "layer_norm_bwd": Spec(layer_norm_bwd_dx, _sig(layer_norm_bwd_dx, {
        "DX": "*fp32", "DY": "*fp32", "DW": "*fp32", "DB": "*fp32", "X": "*fp32", "W": "*fp32", "Mean": "*fp32",
        "Rstd": "*fp32", "Lock": "*i32", "stride": "i32", "N": "i32"}), {"GROUP_SIZE_M": 2, "BLOCK_SIZE_N": 128},
        ("DX", "DY", "DW", "DB", "X", "W", "Mean", "Rstd", "Lock"), {"num_warps": 4}),
    "matmul_f16": _matmul("*fp16", "*fp16", 3, True),
    "matmul_bf16": _matmul("*bf16", "*bf16", 3, False),
    "matmul_persistent_tma": Spec(matmul_descriptor_persistent, _sig(matmul_descriptor_persistent, {
        "a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}),
        {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 2, "NUM_SMS": 3},
        ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"), {"num_warps": 4, "num_stages": 3, "ptx_version": 87}),
    "matmul_fp8": Spec(fp8_matmul, _sig(fp8_matmul, {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16",
                                                     "scale_a": "*fp32", "scale_b": "*fp32", "M": "i32",
                                                     "N": "i32", "K": "i32"}),
                       {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, ("a_ptr", "b_ptr", "c_ptr", "K", "N"),
                       {"num_warps": 4, "num_stages": 2}),
    "matmul_int8": Spec(int8_matmul, _sig(int8_matmul, {"a_ptr": "*i8", "b_ptr": "*i8", "c_ptr": "*i32",
                                                        "M": "i32", "N": "i32", "K": "i32"}),
                        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, ("a_ptr", "b_ptr", "c_ptr", "K", "N"),
                        {"num_warps": 4, "num_stages": 2}),
    "scan_sort_hist": Spec(scan_sort_hist, _sig(scan_sort_hist, {"X": "*i32", "Cum": "*i32", "Sorted": "*fp32",
                                                                 "Hist": "*i32", "n": "i32"}),
                           {"BLOCK": 128, "BINS": 16}, ("X", "Cum", "Sorted", "Hist"), {"num_warps": 4}),
    "where_nan": Spec(where_nan, _sig(where_nan, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": "i32"}),
                      {"BLOCK": 256}, ("X", "Y", "Out"), {"num_warps": 4}),
    "math_ops": Spec(math_ops, _sig(math_ops, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": "i32"}),
                     {"BLOCK": 256}, ("X", "Y", "Out"), {"num_warps": 4}),
}
