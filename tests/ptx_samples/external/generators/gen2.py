import os, sys
import triton, triton.language as tl
from gen_common import compile_one
from triton.language.extra import libdevice
os.makedirs("out", exist_ok=True)
PTXV = 85

@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
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
def math_kernel(X, Y16, YB, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    a = tl.exp(x) + tl.log(tl.abs(x) + 1.0)
    b = tl.sqrt(tl.abs(x)) * tl.sin(x) - tl.cos(x)
    c = tl.erf(x) + libdevice.tanh(x) + libdevice.pow(tl.abs(x), 1.5) + tl.math.rsqrt(tl.abs(x) + 0.5)
    d = tl.maximum(x, -0.25) + tl.minimum(x, 0.25) + tl.math.floor(x * 3.0) + tl.math.ceil(x * 2.0)
    tl.store(OUT + offs, a, mask=mask)
    tl.store(OUT + n + offs, b, mask=mask)
    tl.store(OUT + 2 * n + offs, c, mask=mask)
    tl.store(OUT + 3 * n + offs, d, mask=mask)
    h = tl.load(Y16 + offs, mask=mask, other=0.0)
    hb = tl.load(YB + offs, mask=mask, other=0.0)
    s16 = (h * h + h).to(tl.float32)
    sb = (hb.to(tl.float32) * 2.0).to(tl.bfloat16)
    tl.store(Y16 + offs, (s16 + hb.to(tl.float32)).to(tl.float16), mask=mask)
    tl.store(YB + offs, sb, mask=mask)

@triton.jit
def int_kernel(X, OUT, n, d, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1)
    q7 = x // 7
    r13 = x % 13
    qd = x // d
    rd = x % d
    hi = tl.umulhi(x.to(tl.uint32), 0x9E3779B9)
    wide = (x.to(tl.int64) * 3000000007) >> 7
    f = (x.to(tl.float32) * 0.37).to(tl.int32)
    tl.store(OUT + offs, q7, mask=mask)
    tl.store(OUT + n + offs, r13, mask=mask)
    tl.store(OUT + 2 * n + offs, qd, mask=mask)
    tl.store(OUT + 3 * n + offs, rd, mask=mask)
    tl.store(OUT + 4 * n + offs, hi.to(tl.int32), mask=mask)
    tl.store(OUT + 5 * n + offs, wide.to(tl.int32), mask=mask)
    tl.store(OUT + 6 * n + offs, f, mask=mask)
    tl.store(OUT + 7 * n + offs, (x >> 3) ^ (x << 5) | (x & 0xFF), mask=mask)

@triton.jit
def atomic_kernel(X, HIST, TOTAL, MAXV, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0)
    tl.atomic_add(HIST + (x % BINS), 1, mask=mask)
    tl.atomic_add(TOTAL, tl.sum(tl.where(mask, x.to(tl.float32), 0.0), axis=0))
    tl.atomic_max(MAXV, tl.max(tl.where(mask, x, -1), axis=0))

@triton.jit
def scan_sort_kernel(X, CUM, SORTED, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + row * BLOCK + offs)
    tl.store(CUM + row * BLOCK + offs, tl.cumsum(x, 0))
    tl.store(SORTED + row * BLOCK + offs, tl.sort(x, 0))

@triton.jit
def rand_kernel(OUT, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r = tl.randint(seed, offs)
    tl.store(OUT + offs, r, mask=offs < n)

@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=3):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))

which = sys.argv[1:]
if not which or "ln" in which:
    compile_one(_layer_norm_fwd_fused, {"X": "*fp16", "Y": "*fp16", "W": "*fp32", "B": "*fp32", "Mean": "*fp32", "Rstd": "*fp32",
                "stride": "i32", "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 128}, 90,
                "triton_layer_norm", divisible=("X", "Y", "W", "B", "Mean", "Rstd", "stride"), num_warps=4, ptx_version=PTXV)
if not which or "math" in which:
    compile_one(math_kernel, {"X": "*fp32", "Y16": "*fp16", "YB": "*bf16", "OUT": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_math", divisible=("X", "Y16", "YB", "OUT"), num_warps=4, ptx_version=PTXV)
if not which or "int" in which:
    compile_one(int_kernel, {"X": "*i32", "OUT": "*i32", "n": "i32", "d": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_integer", divisible=("X", "OUT"), num_warps=4, ptx_version=PTXV)
if not which or "atomic" in which:
    compile_one(atomic_kernel, {"X": "*i32", "HIST": "*i32", "TOTAL": "*fp32", "MAXV": "*i32", "n": "i32", "BINS": "constexpr", "BLOCK": "constexpr"},
                {"BINS": 16, "BLOCK": 256}, 90, "triton_atomics", divisible=("X", "HIST"), num_warps=4, ptx_version=PTXV)
if not which or "scan" in which:
    compile_one(scan_sort_kernel, {"X": "*i32", "CUM": "*i32", "SORTED": "*i32", "BLOCK": "constexpr"},
                {"BLOCK": 128}, 90, "triton_scan_sort", divisible=("X", "CUM", "SORTED"), num_warps=4, ptx_version=PTXV)
if not which or "rand" in which:
    compile_one(rand_kernel, {"OUT": "*i32", "seed": "i32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_randint", divisible=("OUT",), num_warps=4, ptx_version=PTXV)
if not which or "tma" in which:
    compile_one(matmul_tma_kernel, {"a_desc": "tensordesc<fp16[64, 64]>", "b_desc": "tensordesc<fp16[64, 64]>",
                "c_desc": "tensordesc<fp16[64, 64]>", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                {"BM": 64, "BN": 64, "BK": 64}, 90, "triton_matmul_tma", divisible=("K",), num_warps=4, ptx_version=87)
