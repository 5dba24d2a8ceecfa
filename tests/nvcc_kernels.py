"""The CUDA kernels of tests/ptx_nvcc/ (NAME.cu, and the PTX nvcc 13.5 wrote for it, `tests/ptx_nvcc/build.py`)
as cases for the PTX executor: `CASES[name](rng)` launches NAME.ptx on generated inputs and returns (results,
what float64 NumPy says), and `check(name, results, wanted)` compares them, bitwise where the arithmetic is
exact or correctly rounded, within the documented bound of an approximation (`tessera.sm90.approx`, the CUDA
guide's ulps for its math library) otherwise. tests/test_ptx_nvcc_kernels.py runs them, tests/test_ptx_nvcc_races.py
seeds ordering bugs into some."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import launch
from tessera.sm90 import approx

DATA = Path(__file__).parent / "ptx_nvcc"
BF16 = ml_dtypes.bfloat16


def ptx(name: str) -> str:
    return (DATA / f"{name}.ptx").read_text()


def run(name: str, grid, block, args, **options):
    return launch(ptx(name), f"k_{name}", grid, block, args, source=f"{name}.ptx", **options)


def rounded(exact: np.ndarray, dtype) -> np.ndarray:
    """float64 values rounded once to `dtype` (f32, f16, bf16), nearest even: to f32 by rounding to odd, then
    to the narrower type (correct, as f32 has more than two bits beyond bf16's and f16's precision); a direct
    float64 -> bfloat16 cast in ml_dtypes rounds twice."""
    exact = np.asarray(exact, np.float64)
    r = exact.astype(np.float32)
    if np.dtype(dtype) == np.float32:
        return r
    inexact = r.astype(np.float64) != exact
    even = (r.view(np.uint32) & 1) == 0
    toward = np.where(r.astype(np.float64) < exact, np.float32(np.inf), np.float32(-np.inf))
    r = np.where(inexact & even, np.nextafter(r, toward), r).astype(np.float32)
    return r.astype(dtype)


# --- the kernels, each with its NumPy reference ------------------------------------------------------------
def packed_case(rng):
    n = 50
    x, y = (rng.standard_normal((n, 2)).astype(np.float32) for _ in range(2))
    args = [x, y, np.zeros((n, 2), np.float16), np.zeros((n, 2), BF16), np.zeros((n, 2), np.float32), np.int32(n)]
    out = run("packed", 1, 64, args)
    ha, hb = x.astype(np.float16), y.astype(np.float16)
    h = rounded(ha.astype(np.float64) * hb + rounded(ha.astype(np.float64) * ha, np.float16), np.float16)
    ba, bb = x.astype(BF16).astype(np.float64), y.astype(BF16).astype(np.float64)
    bc = rounded(ba * bb + rounded(ba + bb, BF16).astype(np.float64), BF16)
    b = np.maximum(bc, (-bb).astype(BF16))
    hd = rounded(ha.astype(np.float64) - hb, np.float16).astype(np.float32)
    f = np.stack([bc[:, 0].astype(np.float32) + hd[:, 0], bc[:, 1].astype(np.float32) * hd[:, 1]], 1)
    return out[2:5], [h, b, f]


def shfl_xor_case(rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = run("shfl_xor", 1, 64, [x, np.zeros(64, np.float32), np.zeros(64, np.int32)])
    warps = x.reshape(2, 32).astype(np.float64)
    sums = []
    for w in warps:  # the butterfly's own order: offset 16, 8, 4, 2, 1, every lane the same sum
        v = w.astype(np.float32)
        for o in (16, 8, 4, 2, 1):
            v = v + v[np.arange(32) ^ o]
        sums.append(v)
    low = (x.view(np.int32) & 0xFFFF).reshape(2, 32)
    maxima = np.where(np.arange(32) < 16, low[:, :16].max(1, keepdims=True), -1)
    return out[1:], [np.concatenate(sums), maxima.reshape(-1)]


def atomics_case(rng):
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    x[::7] = np.round(x[::7] * 4) / 4  # some ties in the histogram's bits too
    args = [x, np.int32(n), np.zeros(1, np.float32), np.zeros(2, np.float16), np.zeros(4, BF16),
            np.full(1, -np.inf, np.float32), np.zeros(8, np.int32)]
    out = run("atomics", 2, 64, args)
    # the executor adds in thread order (one legal serialisation): the reference adds in the same order, each
    # sum rounded to its type after every step, as the hardware's atomics do
    f = np.float32(0)
    for v in x:
        f = np.float32(f + v)
    h = [np.float16(0), np.float16(0)]
    for v in x:
        h = [np.float16(h[0] + np.float16(v)), np.float16(h[1] + np.float16(1))]
    b = np.zeros(4, np.float64)
    for i, v in enumerate(x):
        b[i & 3] = float(rounded(b[i & 3] + float(np.float32(v).astype(BF16)), BF16))
    hist = np.bincount(x.view(np.int32) & 7, minlength=8)
    return out[2:], [np.array([f]), np.array(h, np.float16), b.astype(BF16), np.array([x.max()]), hist]


def ldg_case(rng):
    n = 60
    a, b = rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal((n, 2)).astype(np.float32)
    c = rng.integers(-9, 9, (n, 2)).astype(np.int32)
    out = run("ldg", 1, 64, [a, b, c, np.zeros((n, 4), np.float32), np.int32(n)])
    r = c[::-1].astype(np.float32)
    want = np.stack([a[:, 0] * b[:, 0] + r[:, 0], a[:, 1] * b[:, 1] - r[:, 1], a[:, 2] + b[:, 0],
                     a[:, 3] - b[:, 1]], 1)
    want[:, 0] = rounded(a[:, 0].astype(np.float64) * b[:, 0] + r[:, 0], np.float32)  # nvcc made it fma.rn
    return out[3:4], [want]


def int64_case(rng):
    n = 64
    a = rng.integers(-2**62, 2**62, n)
    b = rng.integers(1, 2**40, n) * rng.choice([-1, 1], n)
    a[:4] = [-2**63, 2**63 - 1, -7, 7]
    b[:4] = [-3, 2**63 - 1, 2, -2]
    c = rng.integers(-2**31, 2**31, n).astype(np.int32)
    d = (rng.integers(1, 2**20, n) * rng.choice([-1, 1], n)).astype(np.int32)
    out = run("int64", 1, 64, [a, b, c, d, np.zeros(8 * n, np.int64), np.int32(n)])[4].reshape(n, 8)
    want = np.zeros((n, 8), np.int64)
    wrap = 1 << 64
    for i in range(n):
        x, y, s, t = int(a[i]), int(b[i]), int(c[i]), int(d[i])
        ux, uy, us, ut = x % wrap, y % wrap, s % 2**32, t % 2**32
        row = [x * y + (x >> 7) - (ux >> 9), (x * y) >> 64, (ux * uy) >> 64, ((us * ut) >> 32) + ((s * t) >> 32) * 3,
               int(x / y) if abs(x) < 2**53 else _trunc_div(x, y), ux % uy,
               _trunc_div(s, t) * 1000003 + (s - _trunc_div(s, t) * t), us // ut + us % ut]
        want[i] = [(v + 2**63) % wrap - 2**63 for v in row]
    return [out], [want]


def _trunc_div(x: int, y: int) -> int:
    """C's integer division, rounding toward zero."""
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def bits_case(rng):
    n = 64
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    a[:3], b[:3] = [0, 0xFFFFFFFF, 1], [0, 0x80000000, 0xFFFFFFFF]
    out = run("bits", 1, 64, [a, b, np.zeros(8 * n, np.uint32), np.int32(n)])[2].reshape(n, 8)
    want = np.zeros((n, 8), np.uint64)
    m32 = 0xFFFFFFFF
    for i in range(n):
        x, y = int(a[i]), int(b[i])

        def bfe(v, start, length, signed):
            if length == 0:
                return 0
            field = (v >> min(start, 31)) & ((1 << length) - 1) if start < 32 else 0
            if start + length > 32:  # the field runs past bit 31: the source's top bit (its sign when signed)
                top = (v >> 31) & 1 if signed else 0
                field &= (1 << max(32 - start, 0)) - 1
                if top:
                    field |= ((1 << length) - 1) & ~((1 << max(32 - start, 0)) - 1)
            sign = (field >> (length - 1)) & 1 if signed else 0
            return (field | (m32 & ~((1 << length) - 1))) if sign else field

        def bfi(base, insert, start, length):
            mask = (((1 << length) - 1) << start) & m32 if start < 32 else 0
            return (base & ~mask | (insert << start) & mask) & m32

        both = (x << 32) | y
        row = [int(f"{x:032b}"[::-1], 2), bin(x).count("1") + (bin(both).count("1") << 8),
               (32 - x.bit_length()) | (((y & -y).bit_length()) << 8) | ((64 - y.bit_length()) << 16),
               _prmt(x, y, 0x5140 + (i & 7)),
               ((((y << 32) | x) << (i & 31)) >> 32 & m32) ^ ((((y << 32) | x) >> ((i * 3) & 31)) & m32),
               bfe(x, y & 31, (y >> 8) & 31, False) ^ ((x >> (y & 15)) & 0x3FF),
               (bfi(y, x, i & 31, (i >> 1) & 31) + ((x & ~(0xFF << 8)) | ((y & 0xFF) << 8))) & m32,
               bfe(x, (y >> 16) & 31, (y >> 24) & 31, True)]
        want[i] = row
    return [out], [want.astype(np.uint32)]


def _prmt(a: int, b: int, selector: int) -> int:
    """prmt.b32 (default mode): byte k of the result is byte selector[4k+2:4k] of b:a, its sign replicated
    when selector bit 4k+3 is set (the PTX ISA's table)."""
    source = (b << 32) | a
    out = 0
    for k in range(4):
        nibble = (selector >> (4 * k)) & 0xF
        byte = (source >> (8 * (nibble & 7))) & 0xFF
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


def fastmath_case(rng):
    n = 64
    a = rng.uniform(-3, 3, n).astype(np.float32)  # __sinf/__cosf: their bound holds on [-pi, pi]
    b = rng.uniform(0.5, 2, n).astype(np.float32)  # __logf: the absolute bound on [0.5, 2]
    b[::2] = rng.uniform(2.5, 1000, n // 2)
    out = run("fastmath", 1, 64, [a, b, np.zeros(8 * n, np.float32), np.int32(n)])[2].reshape(n, 8)
    x, y = a.astype(np.float64), b.astype(np.float64)
    return [out], [(x, y)]


def check_fastmath(out: np.ndarray, inputs) -> None:
    """Each intrinsic within its bound: approx.intrinsic_error_bound names the CUDA guide's, per input."""
    x, y = inputs
    exact = {"__expf": np.exp(x), "__logf": np.log(y), "rsqrtf": 1 / np.sqrt(y), "__fdividef": x / y,
             "__sinf": np.sin(x), "__cosf": np.cos(x)}
    for column, (name, value) in enumerate(exact.items()):
        bound = approx.intrinsic_error_bound(name, y if name in ("__logf", "rsqrtf", "__fdividef") else x, value)
        error = np.abs(out[:, column] - value)
        assert (error <= bound).all(), (name, float((error / bound).max()))
    np.testing.assert_array_equal(out[:, 6], rounded(1 / y, np.float32))  # __frcp_rn and __fsqrt_rn: IEEE
    np.testing.assert_array_equal(out[:, 7], rounded(np.sqrt(y), np.float32))


def mma_bf16_case(rng, text: str | None = None):
    m, n, k = 32, 32, 64
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((n, k)).astype(BF16)
    args = [a, b, np.zeros((m, n), np.float32), np.int32(m), np.int32(n), np.int32(k)]
    out = launch(text or ptx("mma_bf16"), "k_mma_bf16", (n // 16, m // 16, 1), 32, args, source="mma_bf16.ptx")
    # f32 accumulation over k steps of 16: each mma's products are exact in f32 and its sum within the f32
    # accumulator's rounding, so against float64 within k/16 roundings of the partial sums' magnitude
    want = a.astype(np.float64) @ b.astype(np.float64).T
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
    return [out[2]], [(want, scale * k * 2.0**-23)]


def wmma_case(rng):
    """Both WMMA kernels: f16 from global memory, and bf16 staged in shared memory, scaled elementwise in the
    fragment and stored column-major; f32 accumulation within k/16 roundings of the products' magnitude."""
    m, n, k = 32, 32, 32
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
    f16 = run("wmma", (n // 16, m // 16, 1), 32, [a, b, np.zeros((m, n), np.float32), np.int32(m), np.int32(n),
                                                   np.int32(k)])[2]
    a2, b2 = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    bf16 = launch(ptx("wmma"), "k_wmma_bf16", (n // 16, m // 32, 1), 64,
                  [a2, b2, np.zeros((n, m), np.float32), np.int32(m), np.int32(n), np.int32(k), np.float32(0.5)],
                  source="wmma.ptx")[2]
    wants = []
    for x, y, scale in ((a, b.T, 1.0), (a2, b2, 0.5)):
        x, y = x.astype(np.float64), y.astype(np.float64)
        wants.append((scale * (x @ y), scale * (np.abs(x) @ np.abs(y)) * k * 2.0**-23))
    return [f16, bf16.T], wants


def memcpy_async_case(rng):
    x = rng.standard_normal(512).astype(np.float32)
    out = run("memcpy_async", 2, 256, [x, np.zeros(512, np.float32)])
    return out[1:], [np.roll(x.reshape(2, 256), -1, axis=1).reshape(-1) * 2]


def cg_reduce_case(rng):
    x = rng.integers(-1000, 1000, 512).astype(np.int32)
    out = run("cg_reduce", 2, 256, [x, np.zeros(512, np.int32), np.zeros(512, np.int32), np.zeros(2, np.int32)])
    return out[1:], [np.repeat(x.reshape(-1, 16).sum(1), 16), np.repeat(x.reshape(-1, 8).max(1), 8),
                     x.reshape(2, 256).sum(1)]


def stack_case(rng):
    n = 60
    x = rng.standard_normal(8 * n).astype(np.float32)
    out = run("stack", 2, 32, [x, np.zeros(n, np.float32), np.int32(n)])
    v = np.sort(x.reshape(n, 8), axis=1)
    s = np.zeros(n, np.float32)
    for k in range(8):  # nvcc keeps the sum's order and contracts each step into fma.rn
        s = rounded(v[:, k].astype(np.float64) * (k + 1) + s, np.float32)
    pick = np.where(x.reshape(n, 8)[:, 0] > 0, v[:, 7], v[:, 0])
    return out[1:2], [s + pick]


def syncwarp_case(rng):
    x = rng.integers(-1000, 1000, 128).astype(np.int32)
    out = run("syncwarp", 2, 64, [x, np.zeros(128, np.int32)])
    w = x.reshape(-1, 32).astype(np.int64)
    lane = np.arange(32)
    stored = np.where(lane & 1, w * 3, w * 5)
    v = np.where(lane & 1, w + stored[:, (lane + 2) & 31], w - stored[:, (lane + 30) & 31])
    return out[1:], [(v + v[:, lane ^ 1]).reshape(-1)]


def grid_stride_case(rng):
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = run("grid_stride", 3, 64, [np.int32(n), np.float32(1.5), x, y.copy()])
    return out[3:], [rounded(1.5 * x.astype(np.float64) + y, np.float32)]


def dyn_smem_case(rng, text: str | None = None):
    x = (rng.integers(-64, 64, 256) / 8).astype(np.float32)  # sums exact in f32: any order gives the same bits
    args = [x, np.zeros(256, np.float32), np.zeros(2, np.float32)]
    out = launch(text or ptx("dyn_smem"), "k_dyn_smem", 2, 128, args, shared_bytes=512, source="dyn_smem.ptx")
    sums = x.reshape(2, 128).sum(1)
    return out[1:], [x - np.repeat(sums / np.float32(128), 128), sums]


def atomics_more_case(rng):
    n = 200
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    args = [x, np.int32(n), np.zeros(16, np.uint32), np.array([2**31 - 1, -2**31], np.int32), np.zeros(2, np.uint32),
            np.array([0xFFFFFFFF, 0, 0], np.uint32), np.zeros(1), np.zeros(1, np.int32)]
    out = run("atomics_more", 2, 128, args)
    inc = dec = 0
    for _ in range(n):  # atomicInc: old >= limit ? 0 : old + 1; atomicDec: old == 0 or old > limit ? limit : old - 1
        inc = 0 if inc >= 9 else inc + 1
        dec = 6 if dec == 0 or dec > 6 else dec - 1
    bits = np.uint32(1) << (x & 31).astype(np.uint32)
    want = [np.bincount(x & 15, minlength=16), [x.min(), x.max()], [inc, dec],
            [0xFFFFFFFF & ~np.bitwise_or.reduce(bits), np.bitwise_or.reduce(bits),
             np.bitwise_xor.reduce(x.view(np.uint32))],
            [(x * 0.25).sum()], [1]]  # the double sum is exact: quarters of small integers
    return out[2:], [np.asarray(w, o.dtype) for w, o in zip(want, out[2:])]


def simd_int_case(rng):
    n = 64
    a, b = (rng.integers(-2**31, 2**31, n).astype(np.int32) for _ in range(2))
    out = run("simd_int", 1, 64, [a, b, np.zeros(8 * n, np.int32), np.int32(n)])[2].reshape(n, 8)

    def parts(v, bits, signed):
        v = int(v) & 0xFFFFFFFF
        p = [(v >> (bits * i)) & ((1 << bits) - 1) for i in range(32 // bits)]
        return [q - (1 << bits) if signed and q >> (bits - 1) else q for q in p]

    want = np.zeros((n, 8), np.int64)
    for i in range(n):
        x, y = int(a[i]), int(b[i])
        ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
        xb, yb, ubx, uby = parts(x, 8, True), parts(y, 8, True), parts(x, 8, False), parts(y, 8, False)
        xh = parts(x, 16, True)
        dp4a = i + sum(p * q for p, q in zip(xb, yb))
        dp2a = -i + xh[0] * yb[0] + xh[1] * yb[1]
        absdiff = sum(abs(p - q) << (8 * k) for k, (p, q) in enumerate(zip(ubx, uby)))
        vadd = sum(((p + q) & 0xFF) << (8 * k) for k, (p, q) in enumerate(zip(ubx, uby)))
        vcmp = sum((0xFF if p > q else 0) << (8 * k) for k, (p, q) in enumerate(zip(ubx, uby)))
        sad = abs(x - y) + 7 + abs(ux - uy) + 3
        hadd, rhadd = (x + y) >> 1, (x + y + 1) >> 1
        majority = (ux & uy) | (ux & i) | (uy & i)
        want[i] = [dp4a, dp2a, absdiff, vadd ^ vcmp, sad, hadd ^ rhadd, majority, i % 32]
    return [out], [((want + 2**31) % 2**32 - 2**31).astype(np.int32)]


def struct_param_case(rng):
    from tessera.interpreters.ptx import ParamStruct

    rows, cols, pitch = 20, 37, 40
    x = rng.standard_normal((rows, pitch)).astype(np.float32)
    out = np.zeros((rows, pitch), np.float32)
    offsets = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    data = (np.zeros(2, np.uint64).tobytes() + np.array([rows, cols, pitch], np.int32).tobytes()
            + np.float32(1.5).tobytes() + offsets.tobytes())
    struct = ParamStruct(data, {0: x, 8: out})
    launch(ptx("struct_param"), "k_struct_param", (3, 3, 1), (16, 8, 1), [struct], source="struct_param.ptx")
    want = np.zeros_like(out)
    want[:, :cols] = rounded(1.5 * x[:, :cols].astype(np.float64) + offsets[np.arange(cols) % 4], np.float32)
    return [out], [want]


def fence_reduce_case(rng, text: str | None = None):
    n = 1000
    x = (rng.integers(-64, 64, n) / 8).astype(np.float32)  # every partial sum exact
    args = [x, np.zeros(4, np.float32), np.zeros(1, np.float32), np.int32(n)]
    out = launch(text or ptx("fence_reduce"), "k_fence_reduce", 4, 128, args, source="fence_reduce.ptx")
    return out[2:3], [np.array([x.sum()], np.float32)]


def cluster_dsmem_case(rng):
    x = rng.integers(0, 1000, 512).astype(np.int32)
    out = run("cluster_dsmem", 4, 128, [x, np.zeros(64, np.int32)], cluster=(2, 1, 1))
    return out[1:], [np.concatenate([np.bincount(c & 31, minlength=32) for c in x.reshape(2, 256)])]


def tma_cxx_case(rng):
    from tessera.interpreters.ptx import TensorMapArg

    image = rng.standard_normal((32, 64)).astype(np.float32)
    tensor_map = TensorMapArg.encode(image, 7, (64, 32), (64 * 4,), (32, 16))  # FLOAT32, box 32 x 16
    out = run("tma_cxx", (2, 2, 1), 128, [tensor_map, np.zeros((32, 64), np.float32), np.int32(64)])
    return out[1:2], [2 * image]


def vector_atomics_case(rng):
    n = 64
    x = (rng.integers(-64, 64, (n, 4)) / 4).astype(np.float32)  # sums exact in f32: any order, the same bits
    h = rng.standard_normal((n, 2)).astype(np.float16)
    h[0] = [np.nan, -1]
    args = [x, np.zeros((2, 2), np.float32), np.zeros((1, 4), np.float32), h, np.zeros((n, 2), np.float16), np.int32(n)]
    out = run("vector_atomics", 1, 64, args)
    a, b = h.astype(np.float64), h[::-1].astype(np.float64)
    relu = rounded(a * b + a, np.float16)
    relu = np.where(np.isnan(relu), np.uint16(0x7FFF).view(np.float16), np.maximum(relu, np.float16(0)))
    larger = np.where(np.isnan(a) | np.isnan(b), np.nan, np.maximum(a, b)).astype(np.float16)  # __hmax2_nan
    pairs = np.stack([x[0::2, :2].sum(0), x[1::2, :2].sum(0)])
    halves = rounded(relu.astype(np.float64) + larger, np.float16).view(np.uint16)
    return [out[1], out[2], out[4].view(np.uint16)], [pairs, x.sum(0, keepdims=True), halves]


def spin_lock_case(rng):
    x = rng.integers(-50, 50, 8).astype(np.int32)
    out = run("spin_lock", 8, 32, [np.zeros(1, np.int32), np.array([0, -100], np.int32), x])
    return out[:2], [[0], [8, x.max()]]


def int128_case(rng):
    n = 64
    a, b = (rng.integers(0, 2**64, n, dtype=np.uint64) for _ in range(2))
    out = run("int128", 1, 64, [a, b, np.zeros(2 * n, np.uint64), np.int32(n)])[2]
    wrap = 1 << 128
    want = []
    for x, y in zip(a.tolist(), b.tolist()):
        r = (x * y + (y << 64) + x) % wrap
        r = (r * 0x9E3779B97F4A7C15 - (r >> 3)) % wrap
        want += [r & (2**64 - 1), r >> 64]
    return [out], [np.array(want, np.uint64)]


def cub_block_case(rng):
    x = rng.integers(-100, 100, 1024).astype(np.int32)
    out = run("cub_block", 2, 128, [x, np.zeros(1024, np.int32), np.zeros(4, np.int32)])
    rows = x.reshape(2, 512)
    return out[1:], [(np.cumsum(rows, 1) - rows).reshape(-1), np.stack([rows.sum(1), rows.max(1)], 1).reshape(-1)]


def annotated_case(rng):
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    out = run("annotated", 1, 64, [x, np.zeros(2 * n, np.float32), np.zeros(1, np.int32), np.int32(n)])
    v = x + x[::-1]
    return out[1:3], [np.concatenate([v, v * 2]), [n]]


def pipeline_case(rng):
    tiles, valid = 3, 100
    x = rng.integers(-8, 8, (tiles * 128, 4)).astype(np.float32)  # small integers: every sum exact
    out = run("pipeline", 1, 128, [x, np.zeros(128, np.float32), np.int32(tiles), np.int32(valid)])
    seen = x.reshape(tiles, 128, 4).copy()
    seen[-1, valid:] = 0  # the zero-filled copies of the last tile
    return out[1:2], [seen.sum((0, 2))]


def compact_case(rng):
    n = 200
    x = rng.integers(-5, 5, n).astype(np.int32)
    out = run("compact", 2, 128, [x, np.zeros(n, np.int32), np.zeros(1, np.int32), np.int32(n)])
    count = int(out[2][0])
    # the order of the groups follows the atomics' order: compare as multisets, and nothing written past them
    return [np.sort(out[1][:count]), out[1][count:], out[2]], [np.sort(x[x > 0]), np.zeros(n - count), [count]]


def atomics16_case(rng):
    n = 64
    x = rng.integers(0, 100, n).astype(np.int32)
    args = [np.zeros(1, np.uint16), np.zeros(1, np.float16), np.zeros(2, BF16), np.zeros(1, np.uint64),
            np.zeros(1, np.int64), x, np.int32(n)]
    out = run("atomics16", 1, 64, args)
    spread = x.astype(np.uint64) * np.uint64(0x100000001)
    return out[:5], [[3 * n], [n / 2], [n, (x & 3).sum()], [spread.max()], [-spread.astype(np.int64).max()]]


def scan_case(rng):
    x = rng.integers(-100, 100, 512).astype(np.int32)
    out = run("scan", 2, 256, [x, np.zeros(512, np.int32)])
    return out[1:], [np.cumsum(x.reshape(2, 256), 1).reshape(-1)]


def pdl_case(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = run("pdl", 4, 64, [x, np.zeros(128, np.float32)])
    return out[1:], [((x.reshape(4, 32) * np.float32(3))[:, ::-1] + np.float32(1)).reshape(-1)]


def half_math_case(rng):
    n = 64
    h = rng.standard_normal((n, 2)).astype(np.float16)
    h[0, 1] = np.nan
    b = rng.standard_normal((n, 2)).astype(BF16)
    out = run("half_math", 1, 64, [h, b, np.zeros((4 * n, 2), np.float16), np.zeros((2 * n, 2), BF16), np.int32(n)])
    return [out[2].reshape(n, 4, 2), out[3].reshape(n, 2, 2)], [(h, b)]


def check_half_math(got, inputs) -> None:
    """cuda_fp16.h's and cuda_bf16.h's functions compute in f32 and round once to 16 bits: each result within
    one ulp of its format of the float64 value (faithful), NaN where the value is NaN; the exact ones bitwise."""
    h, b = inputs
    halves, bfloats = got
    x, a, y = h.astype(np.float64), np.abs(h.astype(np.float64)), b.astype(np.float64)

    def faithful(result, exact, dtype):
        ulp = np.spacing(np.abs(np.where(np.isnan(exact), 1, exact)).astype(dtype)).astype(np.float64)
        assert (np.isnan(result) == np.isnan(exact)).all()
        assert (np.abs(np.where(np.isnan(exact), 0, result.astype(np.float64) - exact)) <= ulp).all()

    with np.errstate(invalid="ignore"):
        faithful(halves[:, 0], np.exp(x), np.float16)
        faithful(halves[:, 1], np.log(a), np.float16)
        # __hmul2_sat of two faithful halves: within three half-ulps of 1 at most, and saturated to [0, 1]
        product = np.clip(np.sqrt(a) / a, 0, 1)
        assert (np.abs(np.nan_to_num(halves[:, 2].astype(np.float64) - product)) <= 3 * 2.0**-11).all()
        assert (halves[:, 2][~np.isnan(product)] <= 1).all()
        faithful(halves[:, 3, 0], 1 / np.sqrt(a[:, 0]), np.float16)
        np.testing.assert_array_equal(halves[:, 3, 1], np.isnan(x[:, 1]).astype(np.float16))  # __hisnan
        faithful(bfloats[:, 0], np.exp2(y), BF16)
        np.testing.assert_array_equal(bfloats[:, 1], np.stack([np.maximum(b[:, 0], b[:, 1]), b[:, 0]], 1))


_BITS = {np.dtype(np.float16): np.uint16, np.dtype(BF16): np.uint16, np.dtype(np.float32): np.uint32,
         np.dtype(np.float64): np.uint64}


def directed(compare, dtype, mode: str, negative: bool = False) -> int:
    """The bit pattern of the `dtype` value that rounds a positive magnitude v to nearest even ("rn"), toward zero
    ("rz"), -inf ("rm") or +inf ("rp"): `compare(c)` is the sign of c - v for a Fraction c; a binary search over
    the positive finite patterns, which are ordered as their values. `negative` is v's sign (the result takes
    it)."""
    from fractions import Fraction

    bits = _BITS[np.dtype(dtype)]
    infinity = int(np.array([np.inf], dtype).view(bits)[0])
    beyond = Fraction(2) ** int(ml_dtypes.finfo(dtype).maxexp)  # where rounding to nearest overflows from

    def value(pattern):
        return beyond if pattern == infinity else Fraction(float(np.array([pattern], bits).view(dtype)[0]))

    low, high = 0, infinity - 1  # value(low) <= v throughout
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if compare(value(middle)) <= 0 else (low, middle - 1)
    if mode == "rn":
        midpoint = compare((value(low) + value(low + 1)) / 2) if compare(value(low)) else 1
        away = midpoint < 0 or (midpoint == 0 and low % 2 == 1)
    else:
        away = {"rz": False, "rm": negative, "rp": not negative}[mode] and compare(value(low)) != 0
    sign = 1 << (8 * np.dtype(bits).itemsize - 1)
    return (low + away) | (sign if negative else 0)


def to_float(v, dtype, mode: str) -> int:
    """The bit pattern of the rational v (int, float or Fraction) rounded to `dtype` in `mode`."""
    from fractions import Fraction

    v = Fraction(v)
    return directed(lambda c: (c > abs(v)) - (c < abs(v)), dtype, mode, v < 0)


def convert_case(rng):
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    x[:4] = [1 + 2.0**-11, -(1 + 2.0**-11), 3.0e-6, -65519.0]  # ties of f16, a subnormal half, near max
    d = rng.standard_normal(n) * 1e3
    big = rng.integers(-2**62, 2**62, n)
    big[:3] = [2**53 + 1, -(2**62 + 3), 2**63 - 1]
    out = run("convert", 1, 64, [x, d, big, np.zeros(12 * n, np.uint32), np.int32(n)])[3].reshape(n, 12)
    return [out], [(x, d, big)]


def check_convert(out: np.ndarray, inputs) -> None:
    """Every lane against exact rational arithmetic (`to_float`), bitwise."""
    import math
    from fractions import Fraction

    x, d, big = inputs
    f16, f32, f64 = np.float16, np.float32, np.float64
    for i in range(len(x)):
        a, e, l = float(x[i]), float(d[i]), int(big[i])
        m1000, m3e9 = (float(np.float32(x[i]) * np.float32(k)) for k in (1000, 3e9))
        m1e9 = float(np.abs(x[i]) * np.float32(1e9))
        rz64 = float(np.array([to_float(l % 2**64, f64, "rz")], np.uint64).view(f64)[0])
        sum64 = float(l) + rz64  # Python's int -> float rounds to nearest even
        rz_recip = to_float(Fraction(1) / Fraction(a), f32, "rz")
        sqrt_up = directed(lambda c: (c * c > abs(Fraction(a))) - (c * c < abs(Fraction(a))), f32, "rp")
        want = [to_float(a, f16, "rz") | to_float(a, f16, "rm") << 16,
                to_float(a, f16, "rp") | to_float(a, BF16, "rz") << 16,
                math.trunc(m1000) % 2**32, (math.floor(m1000) ^ math.ceil(m1000)) % 2**32,
                min(int(np.rint(m1e9)), 2**32 - 1),  # cvt.rni.u32 saturates
                to_float(l, f32, "rn") ^ to_float(l, f32, "rz"),
                int(np.array([sum64], f64).view(np.uint64)[0]) >> 32,
                to_float(e, f32, "rz") ^ to_float(e, f32, "rm"),
                int(np.array([np.uint16(i + 1).view(f16).astype(f32)], f32).view(np.uint32)[0]),
                int(np.rint(m3e9)) % 2**32,
                to_float(0x7FFFFFC1 - i, f32, "rz") ^ to_float(0xFFFFFE01 + i, f32, "rp"),
                rz_recip ^ sqrt_up]
        np.testing.assert_array_equal(out[i], np.array(want, np.uint64).astype(np.uint32), err_msg=f"lane {i}")


def mathlib_case(rng):
    n = 64
    a = (rng.standard_normal(n) * 3).astype(np.float32)
    a[:3] = [0.0, 40.0, -0.5]  # 0: a / 0 * 0 is NaN too; 40: expf near its overflow
    b = rng.uniform(0.1, 10, n).astype(np.float32)
    out = run("mathlib", 1, 64, [a, b, np.zeros(12 * n, np.float32), np.zeros(2 * n), np.int32(n)])
    return [out[2].reshape(n, 12), out[3].reshape(n, 2)], [(a, b)]


def check_mathlib(got, inputs) -> None:
    import math

    a, b = inputs[0]
    out, dout = got
    x, y = a.astype(np.float64), b.astype(np.float64)
    library = {"expf": np.exp(x), "logf": np.log(y), "sinf": np.sin(x), "tanhf": np.tanh(x),
               "erff": np.array([math.erf(v) for v in x]), "powf": y ** x}
    for column, (name, exact) in enumerate(library.items()):
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert (np.abs(out[:, column] - exact) <= approx.STANDARD_FUNCTION_ULPS[name] * ulp).all(), name
    np.testing.assert_array_equal(out[:, 6], a / b)
    np.testing.assert_array_equal(out[:, 7], np.sqrt(b))
    np.testing.assert_array_equal(out[:, 8], np.minimum(a, b) + a)  # fmaxf(a, NaN) = a
    three, five, seven = a * np.float32(3), a * np.float32(5), a * np.float32(7)
    round_away = np.copysign(np.floor(np.abs(three.astype(np.float64)) + 0.5), three).astype(np.float32)
    np.testing.assert_array_equal(out[:, 9], round_away + np.trunc(five) + np.rint(seven))
    np.testing.assert_array_equal(out[:, 10], np.copysign(b, a) + np.float32(100))
    np.testing.assert_array_equal(out[:, 11], np.arange(len(a)))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(dout[:, 0], np.sqrt(y) / x)
    exact = np.exp(x)
    assert (np.abs(dout[:, 1] - exact) <= approx.STANDARD_FUNCTION_ULPS["exp"] * np.spacing(exact)).all()


CASES = {name[:-5]: case for name, case in globals().items() if name.endswith("_case")}


def check(name: str, got, want) -> None:
    if name == "fastmath":
        return check_fastmath(got[0], want[0])
    if name == "mathlib":
        return check_mathlib(got, want)
    if name == "convert":
        return check_convert(got[0], want[0])
    if name == "half_math":
        return check_half_math(got, want[0])
    if name in ("mma_bf16", "wmma"):
        for g, (exact, bound) in zip(got, want, strict=True):
            assert (np.abs(g - exact) <= bound).all()
        return
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).reshape(np.shape(w)), w)


def delete_line(text: str, pattern: str, occurrence: int) -> tuple[str, int]:
    """The text without the `occurrence`-th line matching `pattern` (a regex) and that line's number."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert len(hits) > occurrence, f"{pattern!r} matches {len(hits)} line(s), not an occurrence {occurrence}"
    del lines[hits[occurrence]]
    return "\n".join(lines), hits[occurrence] + 1
