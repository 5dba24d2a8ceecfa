"""Triton 3.9 kernels as Triton's users write them (on the tutorials: vector add, a log-softmax on the fused
softmax's row loop, a residual layer norm forward and the backward's lock, a linear layer on the grouped
matmul, the persistent matmul on device-built tensor maps; and the common user kernels around them: 8-bit
dots, scans, sorts, histograms, NaN handling, math functions), compiled for sm_90a by build.py. Each `Spec`
names its kernel, signature, constexprs and options; tests/test_ptx_triton.py runs their PTX against NumPy.

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
def log_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                       BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    """Tutorial 02's row loop (each program takes rows start, start + step, ...: `tl.range` with num_stages)
    computing a log-softmax, x - max - log(sum(exp(x - max))), as a cross-entropy loss does."""
    for row_idx in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        row = tl.load(input_ptr + row_idx * input_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
        shifted = row - tl.max(row, axis=0)
        log_sum = tl.log(tl.sum(tl.exp(shifted), axis=0))
        tl.store(output_ptr + row_idx * output_row_stride + cols, shifted - log_sum, mask=cols < n_cols)


@triton.jit
def add_layer_norm_fwd(X, R, S, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    """A transformer block's residual add fused into tutorial 05's forward: s = x + r (stored, bf16), then
    the mean and the variance of s - mean in two passes (no Welford) over blocks of the row, y in bf16."""
    row = tl.program_id(0)
    base = row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        s = tl.load(X + base + cols, mask=cols < N, other=0.).to(tl.float32) + \
            tl.load(R + base + cols, mask=cols < N, other=0.).to(tl.float32)
        tl.store(S + base + cols, s.to(tl.bfloat16), mask=cols < N)
        acc += s
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        s = tl.load(X + base + cols, mask=cols < N, other=0.).to(tl.float32) + \
            tl.load(R + base + cols, mask=cols < N, other=0.).to(tl.float32)
        d = tl.where(cols < N, s - mean, 0.)
        acc += d * d
    rstd = tl.math.rsqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        s = tl.load(X + base + cols, mask=mask, other=0.).to(tl.float32) + \
            tl.load(R + base + cols, mask=mask, other=0.).to(tl.float32)
        y = (s - mean) * rstd * tl.load(W + cols, mask=mask) + tl.load(B + cols, mask=mask)
        tl.store(Y + base + cols, y.to(tl.bfloat16), mask=mask)


@triton.jit
def layer_norm_bwd_dx(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                      BLOCK_SIZE_N: tl.constexpr):
    """Tutorial 05's backward for dx, its partial dw/db summed per group of rows under its `tl.atomic_cas` spin
    lock, here with `tl.atomic_add` (relaxed) into the group's buffer; the lock orders the plain load of the
    group's first-writer flag (a plain `tl.store` of it would race: Triton loads a scalar in every thread and
    stores it from one, with no barrier between)."""
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
    tl.atomic_add(DW, partial_dw, mask=mask, sem="relaxed")
    tl.atomic_add(DB, partial_db, mask=mask, sem="relaxed")
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def locked_counter(Lock, Count):
    """Every program adds one to a counter under a `tl.atomic_cas` spin lock with a plain load and store, as
    users write it: Triton loads the scalar in every thread and stores it from one, with no barrier between."""
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    tl.store(Count, count + 1)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def linear_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    """A linear layer y = leaky_relu(x W^T + bias) as users write it on tutorial 03: grouped program ids, the
    weight [N, K] row-major read as W^T through `tl.trans`, K tail masked, edge tiles clipped at the store."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    ks = tl.arange(0, BLOCK_SIZE_K)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        kk = k0 + ks
        x = tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=(rows[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        w = tl.load(w_ptr + cols[:, None] * stride_wn + kk[None, :], mask=(cols[:, None] < N) & (kk[None, :] < K),
                    other=0.0)
        acc = tl.dot(x, tl.trans(w), acc)
    acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    acc = tl.where(acc >= 0, acc, 0.01 * acc)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


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
def low_precision_matmul(a_ptr, b_ptr, c_ptr, scale_a, scale_b, M, N, K, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INTEGER: tl.constexpr):
    """A [M, K] x B [K, N] (row-major) in 8 bits: e4m3 with f32 accumulation, per-tensor scales and bf16 out, or
    (`INTEGER`) int8 with int32 accumulation and out, exact."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32 if INTEGER else tl.float32)
    for k in range(0, K, BLOCK_K):
        zero = 0 if INTEGER else 0.0
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=zero)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=zero)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32 if INTEGER else tl.float32)
    if not INTEGER:
        acc = (acc * (tl.load(scale_a) * tl.load(scale_b))).to(tl.bfloat16)
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


def _linear(element: str, stages: int, divisible_k: bool) -> Spec:
    """The linear layer in `element`; with K and the strides divisible by 16 (`divisible_k`) Triton pipelines
    its loads through cp.async in `stages` buffers, else it loads through registers."""
    types = {"x_ptr": element, "w_ptr": element, "bias_ptr": "*fp32", "y_ptr": element,
             **dict.fromkeys(("M", "N", "K", "stride_xm", "stride_wn", "stride_ym"), "i32")}
    divisible = ("x_ptr", "w_ptr", "bias_ptr", "y_ptr", "stride_ym")
    return Spec(linear_kernel, _sig(linear_kernel, types),
                {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2},
                divisible + (("K", "stride_xm", "stride_wn") if divisible_k else ()),
                {"num_warps": 4, "num_stages": stages})


def _low_precision(element: str, out: str, integer: bool) -> Spec:
    types = {"a_ptr": element, "b_ptr": element, "c_ptr": out, "scale_a": "*fp32", "scale_b": "*fp32",
             "M": "i32", "N": "i32", "K": "i32"}
    return Spec(low_precision_matmul, _sig(low_precision_matmul, types),
                {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "INTEGER": integer},
                ("a_ptr", "b_ptr", "c_ptr", "K", "N"),
                {"num_warps": 4, "num_stages": 2})


SPECS = {
    "vector_add": Spec(add_kernel, _sig(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                                      "n_elements": "i32"}),
                       {"BLOCK_SIZE": 256}, ("x_ptr", "y_ptr", "out_ptr"), {"num_warps": 4}),
    "log_softmax": Spec(log_softmax_kernel, _sig(log_softmax_kernel, {
        "output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": "i32", "output_row_stride": "i32",
        "n_rows": "i32", "n_cols": "i32"}), {"BLOCK_SIZE": 128, "num_stages": 2}, ("output_ptr", "input_ptr"),
        {"num_warps": 4}),
    "add_layer_norm_fwd": Spec(add_layer_norm_fwd, _sig(add_layer_norm_fwd, {
        "X": "*bf16", "R": "*bf16", "S": "*bf16", "Y": "*bf16", "W": "*fp32", "B": "*fp32", "Mean": "*fp32",
        "Rstd": "*fp32", "stride": "i32", "N": "i32", "eps": "fp32"}), {"BLOCK_SIZE": 128},
        ("X", "R", "S", "Y", "W", "B", "Mean", "Rstd", "stride"), {"num_warps": 4}),
    "layer_norm_bwd": Spec(layer_norm_bwd_dx, _sig(layer_norm_bwd_dx, {
        "DX": "*fp32", "DY": "*fp32", "DW": "*fp32", "DB": "*fp32", "X": "*fp32", "W": "*fp32", "Mean": "*fp32",
        "Rstd": "*fp32", "Lock": "*i32", "stride": "i32", "N": "i32"}), {"GROUP_SIZE_M": 2, "BLOCK_SIZE_N": 128},
        ("DX", "DY", "DW", "DB", "X", "W", "Mean", "Rstd", "Lock"), {"num_warps": 4}),
    "locked_counter": Spec(locked_counter, _sig(locked_counter, {"Lock": "*i32", "Count": "*i32"}), {},
                           ("Lock", "Count"), {"num_warps": 4}),
    "linear_f16": _linear("*fp16", 3, True),
    "linear_bf16": _linear("*bf16", 3, False),
    "matmul_persistent_tma": Spec(matmul_descriptor_persistent, _sig(matmul_descriptor_persistent, {
        "a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}),
        {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 2, "NUM_SMS": 3},
        ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"), {"num_warps": 4, "num_stages": 3, "ptx_version": 87}),
    "matmul_fp8": _low_precision("*fp8e4nv", "*bf16", False),
    "matmul_int8": _low_precision("*i8", "*i32", True),
    "scan_sort_hist": Spec(scan_sort_hist, _sig(scan_sort_hist, {"X": "*i32", "Cum": "*i32", "Sorted": "*fp32",
                                                                 "Hist": "*i32", "n": "i32"}),
                           {"BLOCK": 128, "BINS": 16}, ("X", "Cum", "Sorted", "Hist"), {"num_warps": 4}),
    "where_nan": Spec(where_nan, _sig(where_nan, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": "i32"}),
                      {"BLOCK": 256}, ("X", "Y", "Out"), {"num_warps": 4}),
    "math_ops": Spec(math_ops, _sig(math_ops, {"X": "*fp32", "Y": "*fp32", "Out": "*fp32", "n": "i32"}),
                     {"BLOCK": 256}, ("X", "Y", "Out"), {"num_warps": 4}),
}
