"""The second round of CUDA kernels of tests/ptx_nvcc/ (NAME.cu and nvcc 13.5's NAME.ptx beside it), as cases
for the PTX executor in the form of tests/nvcc_kernels.py: `CASES[name](rng)` launches NAME.ptx on generated
inputs and returns (results, what float64 NumPy or exact integer arithmetic says); `check(name, got, want)`
compares them, bitwise but for the softmax's `__expf` and the layernorm's float32 tail (bounds in their checks).
tests/test_ptx_nvcc_more.py runs them and seeds ordering bugs into two."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from nvcc_kernels import _prmt, directed, ptx, run, to_float
from tessera.interpreters.ptx import launch
from tessera.sm90 import approx

M32, M64 = 2**32 - 1, 2**64 - 1
F32_UNIT = 2.0**-24
"""Half an ulp of 1 in float32: the relative error of one correctly rounded float32 operation."""


def softmax_row_case(rng, name: str = "softmax_row"):
    rows, cols = 4, 70
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    out = launch(ptx(name), "k_softmax_row", 2, 64, [x, np.zeros((rows, cols), np.float32), np.int32(rows),
                                                      np.int32(cols)], source=f"{name}.ptx")[1]
    return [out], [x]


def softmax_row_fast_case(rng):
    """The same kernel as --use_fast_math writes it: .ftz arithmetic, the division as div.approx (__fdividef)."""
    return softmax_row_case(rng, "softmax_row_fast")


def check_softmax_row(out: np.ndarray, x: np.ndarray, divide_ulps: float = 0.5) -> None:
    """Each y = e / s within a relative bound: __expf's (the CUDA guide's 2 + floor(1.173 |d|) ulp, d = x - max
    as the kernel rounds it, counted twice: in e and in every term of s), the rounding of d (|d| ulps of the
    exponent), the sum's (one rounding per addition along the longest chain: ceil(cols / 32) per lane, then 5
    shuffle levels) and the division's (`divide_ulps`: half an ulp correctly rounded, __fdividef's 2 ulp under
    fast math). No value is subnormal, so .ftz changes nothing."""
    x64 = x.astype(np.float64)
    d = (x - x.max(1, keepdims=True)).astype(np.float64)  # float32 subtraction, as the kernel does it
    exact = np.exp(x64 - x64.max(1, keepdims=True))
    exact /= exact.sum(1, keepdims=True)
    expf = approx.intrinsic_error_bound("__expf", d, np.ones_like(d)).max(1, keepdims=True)
    chain = math.ceil(x.shape[1] / 32) + 5
    bound = 2 * expf + (2 * np.abs(d).max(1, keepdims=True) + chain + 2 * divide_ulps) * F32_UNIT
    assert (np.abs(out - exact) <= bound * exact).all(), float((np.abs(out - exact) / (bound * exact)).max())


def welford_case(rng):
    rows, cols = 3, 300
    x = (rng.standard_normal((rows, cols)) * 2 + 5).astype(np.float32)
    gamma, beta = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    out = run("welford", rows, 128, [x, gamma, beta, np.zeros((rows, cols), np.float32), np.zeros(2 * rows),
                                     np.int32(cols)])
    return [out[3], out[4].reshape(rows, 2)], [(x, gamma, beta)]


def check_welford(got, inputs) -> None:
    """Mean and variance in double within 2^-45 relative (Welford and Chan's merge are stable: error a few
    hundred ulps of double at most for 300 values); y within 2^-20 of the terms' magnitudes (float32: the
    rounding of x - mean, of the float inverse square root, and two fused operations)."""
    y, stats = got
    x, gamma, beta = (v.astype(np.float64) for v in inputs)
    mean, var = x.mean(1), x.var(1)
    np.testing.assert_allclose(stats[:, 0], mean, rtol=2.0**-45)
    np.testing.assert_allclose(stats[:, 1], var, rtol=2.0**-45)
    scaled = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * gamma
    assert (np.abs(y - (scaled + beta)) <= 2.0**-20 * (np.abs(scaled) + np.abs(beta))).all()


def transpose_case(rng):
    rows, cols = 40, 50  # not multiples of the 32 x 32 tile: the edge tiles are partial
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = run("transpose", (2, 2), (32, 8), [a, np.zeros((cols, rows), np.float32), np.int32(rows), np.int32(cols)])
    return [out[1]], [a.T]


def radix_case(rng, text: str | None = None):
    keys = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    keys[5:9] = keys[0]  # equal digits and equal keys: the scatter must keep their order
    shift = 4
    out = launch(text if text is not None else ptx("radix"), "k_radix", 1, 32,
                 [keys, np.zeros(32, np.uint32), np.zeros(32, np.int32), np.int32(shift)], source="radix.ptx")
    digits = (keys >> shift) & 15
    order = np.argsort(digits, kind="stable")
    ranks = np.array([(digits[:i] == digits[i]).sum() | ((digits == digits[i]).sum() << 8) for i in range(32)])
    return out[1:3], [keys[order], ranks]


def redux_case(rng):
    a = rng.integers(-2**31, 2**31, 64, dtype=np.int64).astype(np.int32)
    a[32:] = rng.integers(-1000, 1000, 32)
    out = run("redux", 1, 64, [a, np.zeros(8 * 64, np.int32)])[1].reshape(64, 8)
    want = np.zeros((64, 8), np.int64)
    for w in range(2):
        v = a[32 * w:32 * w + 32].astype(np.int64)
        u = v % 2**32
        andv, orv, xorv = M32, 0, 0
        for e in u.tolist():
            andv, orv, xorv = andv & e, orv | e, xorv ^ e
        want[32 * w:32 * w + 32, :7] = [u.sum() % 2**32, v.min(), v.max(), u.min(), u.max(), andv ^ orv, xorv]
        odd, even = v[1::2], v[0::2]
        want[32 * w + 1:32 * w + 32:2, 7] = odd.sum() % 2**32
        want[32 * w:32 * w + 32:2, 7] = even.min()
    return [out.astype(np.int64) % 2**32], [want % 2**32]


def atomic_wrap_case(rng):
    n = 64
    v = rng.integers(-2**62, 2**62, n)
    v[:2] = [-2**63, -1]  # the signed minimum, and the unsigned maximum
    out = run("atomic_wrap", 2, 32, [np.array([0, 3], np.uint32), np.zeros(1, np.float32),
                                     np.array([2**63 - 1, -2**63], np.int64), np.array([M64, 0], np.uint64),
                                     np.zeros(2 * n, np.uint32), np.zeros(n, np.float32), v])
    counters, slot, smin, umin, olds, swapped = out[:6]
    # the old values in any order of the atomics: inc wraps to 0 past 9; dec goes to 6 from 0 or above 6
    inc, dec, incs, decs = 0, 3, [], []
    for _ in range(n):
        incs.append(inc)
        decs.append(dec)
        inc, dec = (0 if inc >= 9 else inc + 1), (6 if dec == 0 or dec > 6 else dec - 1)
    got = [counters, np.sort(olds[0::2]), np.sort(olds[1::2]), np.sort(np.append(swapped, slot)), smin, umin]
    want = [np.array([inc, dec]), np.sort(incs), np.sort(decs),
            np.sort(np.append(np.arange(n) * np.float32(0.5), np.float32(0))),
            np.array([v.min(), v.max()]), np.array([v.astype(np.uint64).min(), v.astype(np.uint64).max()])]
    return got, want


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


def _lanes(a: int, b: int, width: int, op) -> int:
    """op on the unsigned `width`-bit lanes of a and b, packed back."""
    mask, out = (1 << width) - 1, 0
    for k in range(0, 32, width):
        out |= (op((a >> k) & mask, (b >> k) & mask) & mask) << k
    return out


def rounding_case(rng):
    n = 64
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    d = rng.standard_normal(n) * 10.0**rng.integers(-30, 30, n)
    p, q = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    p[0], x[1] = 0x7FC00001, np.float32(2.5e-3)  # a NaN with a payload; x * 1000 a tie for round-to-nearest-even
    out = run("rounding", 1, 64, [x, y, d, p, q, np.zeros(24 * n, np.uint32), np.int32(n)])[5].reshape(n, 24)
    f32 = np.float32
    want = np.zeros((n, 24), np.uint64)
    for i in range(n):
        a, b, u, w = Fraction(float(x[i])), Fraction(float(y[i])), int(p[i]), int(q[i])
        m = float(x[i] * f32(1000))
        s = _signed((u << 32) | w, 64)
        t = w * 3 - (1 << 40)
        as_float = np.array([u], np.uint32).view(f32)[0]
        sqrt_down = directed(lambda c: (c * c > abs(b)) - (c * c < abs(b)), f32, "rm")
        want[i] = [to_float(a * b + 1, f32, "rn"), to_float(a * b, f32, "rz"), to_float(a + b, f32, "rm"),
                   to_float(a / b, f32, "rp"),
                   int(np.rint(m)) % 2**32, math.trunc(m) % 2**32, math.ceil(m) % 2**32, math.floor(m) % 2**32,
                   to_float(float(d[i]), f32, "rm"), to_float(float(d[i]), f32, "rp"),
                   0x7FFFFFFF if np.isnan(as_float) else int(np.array([as_float + f32(0)], f32).view(np.uint32)[0]),
                   (u * w) >> 32, (((s * t) >> 64) >> 7) % 2**32, (((s % 2**64) * ((s % 2**64) ^ 0x9E3779B97F4A7C15))
                                                                 >> 64) % 2**32,
                   (abs(_signed(u, 32) - _signed(w, 32)) + 7) % 2**32, (abs(u - w) + 11) % 2**32,
                   _prmt(u, w, 0x7531) ^ _prmt(u, w, i & 0x7777),  # nvcc masks __byte_perm's selector so
                   # (and.b32 0x7777): no sign-replicating nibbles, unlike prmt's
                   ((((w << 32) | u) << (i & 31)) >> 32 & M32) ^ ((((w << 32) | u) << min(i, 32)) >> 32 & M32),
                   ((((w << 32) | u) >> ((i + 20) & 31)) & M32) ^ ((((w << 32) | u) >> min(i + 20, 32)) & M32),
                   _lanes(u, w, 8, lambda e, f: abs(e - f)),
                   _lanes(u, w, 16, lambda e, f: abs(e - f)) ^ _lanes(u, w, 8, max),
                   (64 - (s % 2**64).bit_length()) | (int(f"{s % 2**64:064b}"[::-1], 2) << 8) % 2**32,
                   to_float(a - b, f32, "rp"), sqrt_down]
    return [out], [want.astype(np.uint32)]


def clock_case(rng):
    """__nanosleep returns and the delay loop on clock64() ends (each read of the executor's clock is later than
    the lane's last, `decode.CLOCK_TICKS_PER_READ`): the elapsed cycles are at least the wait; the result does not
    depend on the times."""
    a, wait = rng.integers(-1000, 1000, 64).astype(np.int32), 100_000
    out = run("clock", 1, 64, [a, np.zeros(64, np.int32), np.zeros(128, np.int64), np.int64(wait)])
    return [out[1], out[2][0::2] >= wait, out[2][1::2] > 0], [a * 3 + 1, np.ones(64, bool), np.ones(64, bool)]


def message_case(rng, text: str | None = None, name: str = "message"):
    a = rng.integers(-1000, 1000, 64).astype(np.int32)
    out = launch(text if text is not None else ptx(name), "k_message", 2, 96, [a, np.zeros(64, np.int32)],
                 source=f"{name}.ptx")
    return [out[1]], [(a.reshape(2, 32)[:, ::-1] * 2 + 1).reshape(-1)]


def message_debug_case(rng, text: str | None = None):
    """The same kernel as -G writes it: no optimisation, every value through local memory, .loc lines and
    DWARF sections."""
    return message_case(rng, text, "message_debug")


def atomic_ref_case(rng):
    n = 50
    out = run("atomic_ref", 2, 64, [np.zeros(64, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32),
                                    np.zeros(2 * n, np.int32), np.int32(n)])
    data = np.arange(n) ** 2 + 5
    return [out[3], out[1], out[2]], [np.concatenate([data[::-1], np.full(n, 64)]), [1], [64]]


def half_cmp_case(rng):
    n = 64
    x, y = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    x[:8] = [np.nan, 1.0, np.inf, -np.inf, 2.0, np.nan, -3.0, 0.5]
    y[:8] = [1.0, np.nan, 1.0, -np.inf, 2.0, np.nan, np.inf, 0.5]
    out = run("half_cmp", 1, 64, [x, y, np.zeros(n, np.int32), np.zeros(4 * n, np.float16), np.int32(n)])
    flags, vals = out[2], out[3].reshape(n, 4)
    want_flags, want_vals = np.zeros(n, np.int64), np.zeros((n, 4), np.uint16)
    nan = np.float16(np.nan).view(np.uint16) | 0x7FFF  # the canonical NaN 0x7FFF

    def bits(v):
        return int(np.float16(v).view(np.uint16))

    for i in range(n):
        a, b = float(x[i]), float(y[i])
        unordered = math.isnan(a) or math.isnan(b)
        inf = 0 if not math.isinf(a) else (1 if a > 0 else 3)
        want_flags[i] = ((a < b) | (a >= b) << 1 | math.isnan(a) << 2 | inf << 3 | (unordered or a < b) << 4
                         | (a == b) << 5 | (unordered or a != b) << 6 | (a >= b and b >= a) << 8
                         | (a < b) << 12)
        larger = b if math.isnan(a) else a if math.isnan(b) else max(a, b)
        want_vals[i] = [nan if math.isnan(larger) else bits(larger),
                        nan if unordered else bits(min(a, b)), nan if unordered else bits(max(a, b)),
                        nan if unordered else bits(max(b, a))]
    return [flags, vals.view(np.uint16)], [want_flags, want_vals]


def grid3d_case(rng):
    nx, ny, nz = 6, 12, 7  # the grid (2, 3, 2) of (4, 4, 4) blocks covers 8 x 12 x 8: the kernel skips the rest
    out = run("grid3d", (2, 3, 2), (4, 4, 4), [np.full(nz * ny * nx, -1, np.int32), np.int32(nx), np.int32(ny),
                                               np.int32(nz)])[0].reshape(nz, ny, nx)
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    block = ((z // 4) * 3 + y // 4) * 2 + x // 4
    return [out], [block * 1000 + ((z % 4) * 4 + y % 4) * 4 + x % 4]


def maxnreg_case(rng):
    n = 300
    out = run("maxnreg", (2, 2, 2), 32, [np.zeros(n, np.float32), np.int32(n)])[0]
    return [out], [np.arange(n, dtype=np.float32) * np.float32(0.25)]


CASES = {name[:-5]: case for name, case in globals().items() if name.endswith("_case")}


def check(name: str, got, want) -> None:
    if name == "softmax_row":
        return check_softmax_row(got[0], want[0])
    if name == "softmax_row_fast":
        return check_softmax_row(got[0], want[0], divide_ulps=approx.FDIVIDEF_ULPS)
    if name == "welford":
        return check_welford(got, want[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).reshape(np.shape(w)), w)
