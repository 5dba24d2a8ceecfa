"""Instructions a hand-written sm_90a kernel leans on, on the inputs where a model is most likely wrong, against the
PTX ISA's text written out here in NumPy (float64, exact integers, bit patterns): the `.approx` functions on
infinities, zeros of both signs, subnormals with and without `.ftz`; `min`/`max` with `.NaN` on signed zeros; 32-bit
`mul.hi`/`mad.hi`, funnel shifts past 32, `bfind` (`.shiftamt`), `clz`, `popc`, `brev`, `dp4a`/`dp2a`;
`fma.rn.relu.bf16x2` on NaN and infinities; `vote.sync.ballot` and `match.any.sync` on the two sides of a divergent
branch, `redux.sync` and `elect.sync` after it; FP8 conversions at ties, subnormals and overflow; `min`/`max`
`.xorsign.abs`; `ldmatrix` and `stmatrix` `.x4.trans`; `shfl.sync` in segments and out of range;
`bar.red`/`barrier.red`; `ex2`/`tanh` `.approx` on the 16-bit types. Legal forms the executor does not implement are
refused by name at their line."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError
from unseen_ptx import line_of, run

TEXT = """.visible .entry k(.param .u64 out, .param .u64 inp)
{
    .reg .b32 %r<40>;
    .reg .b64 %rd<16>;
    .reg .f32 %f<16>;
    .reg .b16 %rs<8>;
    .reg .pred %p<8>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 16;
    add.s64 %rd2, %rd0, %rd1;
    ld.param.u64 %rd9, [inp];
    add.s64 %rd11, %rd9, %rd1;
    ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd11];
    mov.b32 %f1, %r1;
    mov.b32 %f2, %r2;
BODY
    ret;
}
"""
"""Thread t (of 32) reads four words inp[t, 0:4] into %r1-%r4 (%f1, %f2 their first two as f32) and stores up to
four words at out[t, 0:4] (%rd2)."""


def words(body: str, inp: np.ndarray) -> np.ndarray:
    inp = np.ascontiguousarray(inp, np.uint32).reshape(32, 4)
    return run(TEXT.replace("BODY", body), 1, 32, [np.zeros(128, np.uint32), inp.ravel()])[0].reshape(32, 4)


def column(values, k: int = 0) -> np.ndarray:
    """A [32, 4] input whose column k holds `values` (as f32 bits when float)."""
    inp = np.zeros((32, 4), np.uint32)
    values = np.asarray(values)
    inp[:, k] = values.astype(np.float32).view(np.uint32) if values.dtype.kind == "f" else values.astype(np.uint32)
    return inp


def bits_equal(got: np.ndarray, want) -> None:
    """f32 results equal bit for bit, any NaN equal to any NaN."""
    want = np.asarray(want, np.float32)
    got = np.ascontiguousarray(got).view(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(got[keep].view(np.uint32), want[keep].view(np.uint32))


SPECIAL = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 2.0**-149, -130.0, -149.0, -150.0, 128.0,
                    1.0, -1.0, 2.0**-126, 3e38, -3e38, 0.5, 100.0, -100.0, 5.0, 0.25, -0.25, 2.0**126, 2.0**127,
                    2.0**-127, 16.0, -2.0, 1e30, 4.0, 1024.0, -0.5], np.float32)
"""Infinities, NaN, signed zeros, subnormals, results that underflow or overflow, and exact powers of two."""


def _ftz(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < 2.0**-126, np.copysign(0.0, x), x)


def test_approx_functions_on_special_values_with_and_without_ftz():
    """ex2(-inf) = +0, ex2(+-0) = 1; rcp(+-0) = +-inf, rcp(+-inf) = +-0; lg2(+-0) = -inf, lg2(x < 0) = NaN;
    rsqrt(+-0) = +-inf; .ftz reads subnormal inputs and writes subnormal results as zeros of their sign. Values
    that are exact (powers of two, special results) are compared bit for bit; the rest within each function's
    documented bound (`tessera.sm90.approx`), here within 2 ulp."""
    out = words("""
    ex2.approx.ftz.f32 %f4, %f1;
    ex2.approx.f32 %f5, %f1;
    rcp.approx.ftz.f32 %f6, %f1;
    lg2.approx.ftz.f32 %f7, %f1;
    st.global.v4.f32 [%rd2], {%f4, %f5, %f6, %f7};""", column(SPECIAL))
    out2 = words("""
    rcp.approx.f32 %f4, %f1;
    lg2.approx.f32 %f5, %f1;
    rsqrt.approx.ftz.f32 %f6, %f1;
    sqrt.approx.ftz.f32 %f7, %f1;
    st.global.v4.f32 [%rd2], {%f4, %f5, %f6, %f7};""", column(SPECIAL))
    x = SPECIAL.astype(np.float64)
    fx = _ftz(x)
    with np.errstate(all="ignore"):
        want = [_ftz(np.exp2(fx)), np.exp2(x), _ftz(1 / fx), np.log2(np.where(fx == 0, 0.0, fx)),
                1 / x, np.log2(np.where(x == 0, 0.0, x)), _ftz(1 / np.sqrt(fx)), _ftz(np.sqrt(fx))]
    got = np.concatenate([out, out2], axis=1).view(np.float32).astype(np.float64)
    for k, w in enumerate(want):
        with np.errstate(over="ignore"):
            w = w.astype(np.float32).astype(np.float64)  # the correctly rounded f32 result (overflow to inf)
        assert np.array_equal(np.isnan(got[:, k]), np.isnan(w)), k
        finite = np.isfinite(w) & (w != 0)
        exact = ~finite & ~np.isnan(w)
        np.testing.assert_array_equal(np.signbit(got[exact, k]), np.signbit(w[exact]), err_msg=str(k))
        np.testing.assert_array_equal(got[exact, k], w[exact], err_msg=str(k))
        ulp = np.spacing(np.abs(w[finite]).astype(np.float32)).astype(np.float64)
        assert (np.abs(got[finite, k] - w[finite]) <= 2 * ulp).all(), k


def test_min_and_max_with_and_without_nan_on_signed_zeros_and_nans():
    """min/max: -0 < +0; a NaN input gives the other operand, two NaNs give NaN; .NaN gives NaN for any NaN input."""
    a = np.array([np.nan, np.nan, 0.0, -0.0, 1.0, -np.inf, np.nan, 3.0] * 4, np.float32)
    b = np.array([2.0, np.nan, -0.0, 0.0, np.nan, 5.0, -1.0, 3.0] * 4, np.float32)
    inp = column(a)
    inp[:, 1] = b.view(np.uint32)
    out = words("""
    min.f32 %f4, %f1, %f2;
    max.f32 %f5, %f1, %f2;
    min.NaN.f32 %f6, %f1, %f2;
    max.NaN.f32 %f7, %f1, %f2;
    st.global.v4.f32 [%rd2], {%f4, %f5, %f6, %f7};""", inp)
    nan = np.isnan(a) | np.isnan(b)
    lo = np.where(a == b, np.where(np.signbit(a), a, b), np.fmin(a, b))
    hi = np.where(a == b, np.where(np.signbit(a), b, a), np.fmax(a, b))
    bits_equal(out[:, 0], lo)
    bits_equal(out[:, 1], hi)
    bits_equal(out[:, 2], np.where(nan, np.nan, lo))
    bits_equal(out[:, 3], np.where(nan, np.nan, hi))


def test_16_bit_ex2_and_tanh_approx_on_special_values():
    """ex2.approx.f16x2, ex2.approx.ftz.bf16x2, tanh.approx.f16x2 and tanh.approx.bf16x2 (CUTLASS's fast GELU on
    half2): each half the correctly rounded value of the exact function (within the approximation's bound), overflow
    to infinity, f16 results at half the smallest subnormal to zero (a tie, to even), bf16's .ftz flushing
    subnormal inputs and results, NaN the canonical 0x7FFF."""
    rng = np.random.default_rng(5)
    h = (rng.standard_normal((32, 2)) * 4).astype(np.float16)
    h[:8, 0] = [np.nan, -np.inf, -20, 16, -25, 6e-5, np.inf, -0.0]
    b = (rng.standard_normal((32, 2)) * 4).astype(ml_dtypes.bfloat16)
    b[:6, 0] = [np.nan, -np.inf, -130, 128, 1e-39, -127.5]
    inp = np.zeros((32, 4), np.uint32)
    inp[:, 0], inp[:, 1] = h.view(np.uint32).ravel(), b.view(np.uint32).ravel()
    out = words("""
    ex2.approx.f16x2 %r5, %r1;
    ex2.approx.ftz.bf16x2 %r6, %r2;
    tanh.approx.f16x2 %r7, %r1;
    tanh.approx.bf16x2 %r8, %r2;
    st.global.v4.u32 [%rd2], {%r5, %r6, %r7, %r8};""", inp)
    tiny = 2.0**-126
    flush = lambda x: np.where(np.abs(x) < tiny, 0.0, x)
    with np.errstate(over="ignore"):
        wants = [np.exp2(h.astype(np.float64)).astype(np.float16),
                 flush(np.exp2(flush(b.astype(np.float64)))).astype(np.float32).astype(ml_dtypes.bfloat16),
                 np.tanh(h.astype(np.float64)).astype(np.float16),
                 np.tanh(b.astype(np.float64)).astype(np.float32).astype(ml_dtypes.bfloat16)]
    for k, want in enumerate(wants):
        bits = np.where(np.isnan(want.astype(np.float32)), 0x7FFF, want.view(np.uint16))
        halves = np.stack([out[:, k] & 0xFFFF, out[:, k] >> 16], axis=1)
        np.testing.assert_array_equal(halves, bits, err_msg=str(k))  # (bf16 through f32: no value here is a tie)


def test_min_and_max_xorsign_abs():
    """min/max{.NaN}.xorsign.abs (sm_86+; f32 and bf16x2 here): the min/max of |a| and |b|, NaN as without
    .xorsign.abs, and a non-NaN result signed with sign(a) XOR sign(b) (the ISA's pseudo-code)."""
    a = np.array([np.nan, np.nan, 0.0, -0.0, 1.0, -np.inf, np.nan, 3.0, -2.0, -5.0, 4.0, -1.0] * 2 + [1.0] * 8,
                 np.float32)
    b = np.array([2.0, np.nan, -0.0, 0.0, np.nan, 5.0, -1.0, -3.0, 3.0, -1.0, -4.5, -1.0] * 2 + [2.0] * 8,
                 np.float32)
    inp = column(a)
    inp[:, 1] = b.view(np.uint32)
    pairs = np.stack([a, b], axis=1).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    inp[:, 2] = pairs[:, 0] | pairs[:, 1] << 16  # (a, b) as one bf16x2 word: its halves give min/max(a, b) too
    out = words("""
    max.xorsign.abs.f32 %f4, %f1, %f2;
    min.xorsign.abs.f32 %f5, %f1, %f2;
    max.NaN.xorsign.abs.f32 %f6, %f1, %f2;
    mov.b32 {%rs1, %rs2}, %r3;
    mov.b32 %r7, {%rs2, %rs1};
    min.xorsign.abs.bf16x2 %r8, %r3, %r7;
    st.global.v4.f32 [%rd2], {%f4, %f5, %f6, %f6};
    st.global.u32 [%rd2+12], %r8;""", inp)
    negative = np.signbit(a) ^ np.signbit(b)
    with np.errstate(invalid="ignore"):
        lo, hi = np.fmin(np.abs(a), np.abs(b)), np.fmax(np.abs(a), np.abs(b))
    signed = lambda d: np.where(negative & ~np.isnan(d), -d, d)
    bits_equal(out[:, 0], signed(hi))
    bits_equal(out[:, 1], signed(lo))
    bits_equal(out[:, 2], signed(np.where(np.isnan(a) | np.isnan(b), np.nan, hi)))
    want = signed(lo).astype(ml_dtypes.bfloat16).view(np.uint16)  # both halves: (a, b) and (b, a)
    want = np.where(np.isnan(lo), 0x7FFF, want)
    np.testing.assert_array_equal(out[:, 3] & 0xFFFF, want)
    np.testing.assert_array_equal(out[:, 3] >> 16, want)


def _s32(x):
    return (np.asarray(x, np.int64) ^ 0x80000000) - 0x80000000


def test_32_bit_integer_and_bit_instructions_on_edge_operands():
    """mul.hi.s32, mad.hi.u32 (wrapping), shf.l.wrap / shf.r.clamp with shifts of 0, 31, 32, 33 and 64, bfind.u32
    and bfind.shiftamt.s32 (0xFFFFFFFF when no bit is found), clz, popc, brev, dp4a.s32.u32, dp2a.lo.u32.s32 and
    dp2a.hi.s32.s32, each against Python's exact integers."""
    rng = np.random.default_rng(25)
    inp = rng.integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32)
    inp[:6, :3] = [[0, 0, 0], [0xFFFFFFFF, 0xFFFFFFFF, 31], [0x80000000, 0x80000000, 32], [1, 2, 33],
                   [0x7FFFFFFF, 0x80000000, 64], [5, 7, 1]]
    a, b, c = (inp[:, k].astype(np.int64) for k in range(3))
    out = words("""
    mul.hi.s32 %r5, %r1, %r2;
    mad.hi.u32 %r6, %r1, %r2, %r3;
    shf.l.wrap.b32 %r7, %r1, %r2, %r3;
    shf.r.clamp.b32 %r8, %r1, %r2, %r3;
    st.global.v4.u32 [%rd2], {%r5, %r6, %r7, %r8};""", inp).astype(np.int64)
    pair = [int(y) << 32 | int(x) for x, y in zip(a, b)]
    np.testing.assert_array_equal(out[:, 0], (_s32(a) * _s32(b) >> 32) % 2**32)
    np.testing.assert_array_equal(out[:, 1], ((a * b >> 32) + c) % 2**32)
    np.testing.assert_array_equal(out[:, 2], [(p << (int(n) & 31) >> 32) % 2**32 for p, n in zip(pair, c)])
    np.testing.assert_array_equal(out[:, 3], [(p >> min(int(n), 32)) % 2**32 for p, n in zip(pair, c)])
    out = words("""
    bfind.u32 %r5, %r1;
    bfind.shiftamt.s32 %r6, %r1;
    clz.b32 %r7, %r1;
    popc.b32 %r8, %r1;
    st.global.v4.u32 [%rd2], {%r5, %r6, %r7, %r8};""", inp).astype(np.int64)
    magnitude = [~int(v) if v < 0 else int(v) for v in _s32(a)]
    np.testing.assert_array_equal(out[:, 0], [int(x).bit_length() - 1 if x else 0xFFFFFFFF for x in a])
    np.testing.assert_array_equal(out[:, 1], [32 - m.bit_length() if m else 0xFFFFFFFF for m in magnitude])
    np.testing.assert_array_equal(out[:, 2], [32 - int(x).bit_length() for x in a])
    np.testing.assert_array_equal(out[:, 3], [bin(int(x)).count("1") for x in a])
    out = words("""
    dp4a.s32.u32 %r5, %r1, %r2, %r3;
    dp2a.lo.u32.s32 %r6, %r1, %r2, %r3;
    dp2a.hi.s32.s32 %r7, %r1, %r2, %r3;
    brev.b32 %r8, %r1;
    st.global.v4.u32 [%rd2], {%r5, %r6, %r7, %r8};""", inp).astype(np.int64)
    sbytes = lambda x: [(int(x) >> 8 * i & 0xFF) - (256 if int(x) >> 8 * i & 0x80 else 0) for i in range(4)]
    ubytes = lambda x: [int(x) >> 8 * i & 0xFF for i in range(4)]
    halves = lambda x, signed: [(int(x) >> 16 * i & 0xFFFF) - (65536 if signed and int(x) >> 16 * i & 0x8000 else 0)
                                for i in range(2)]
    np.testing.assert_array_equal(out[:, 0], [(sum(p * q for p, q in zip(sbytes(x), ubytes(y))) + int(z)) % 2**32
                                              for x, y, z in zip(a, b, _s32(c))])
    np.testing.assert_array_equal(out[:, 1], [(sum(p * q for p, q in zip(halves(x, False), sbytes(y)[:2])) + int(z))
                                              % 2**32 for x, y, z in zip(a, b, c)])
    np.testing.assert_array_equal(out[:, 2], [(sum(p * q for p, q in zip(halves(x, True), sbytes(y)[2:])) + int(z))
                                              % 2**32 for x, y, z in zip(a, b, _s32(c))])
    np.testing.assert_array_equal(out[:, 3], [int(f"{int(x):032b}"[::-1], 2) for x in a])


def test_fma_relu_bf16x2_clamps_negatives_and_keeps_nan():
    """fma.rn.relu.bf16x2: each half a * b + c rounded once to bf16, negative results (and -inf) to +0, NaN to the
    canonical NaN 0x7FFF."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 6)).astype(ml_dtypes.bfloat16)
    x[0, 0], x[1, 2], x[2, 4], x[3, 1] = np.nan, -np.inf, np.inf, 0.0
    packed = x.view(np.uint16).astype(np.uint32)
    inp = np.zeros((32, 4), np.uint32)
    inp[:, :3] = packed[:, 0::2] | packed[:, 1::2] << 16
    out = words("""
    fma.rn.relu.bf16x2 %r5, %r1, %r2, %r3;
    st.global.u32 [%rd2], %r5;""", inp)
    a, b, c = (x[:, 2 * k:2 * k + 2].astype(np.float64) for k in range(3))
    with np.errstate(invalid="ignore"):
        exact = a * b + c  # bf16 products are exact in float64, so the sum is rounded once to f32, then to bf16
    want = np.where(np.isnan(exact), np.nan, np.maximum(exact, 0.0)).astype(ml_dtypes.bfloat16).view(np.uint16)
    want = np.where(np.isnan(exact), 0x7FFF, want)
    got = np.stack([out[:, 0] & 0xFFFF, out[:, 0] >> 16], axis=1)
    np.testing.assert_array_equal(got, want)


def test_warp_collectives_on_both_sides_of_a_divergent_branch():
    """Odd lanes ballot their predicate over the odd mask, even lanes match their value over the even mask; after
    the join, redux.sync.max.s32 over the warp and elect.sync (lane 0 elected, its index in every lane)."""
    rng = np.random.default_rng(11)
    inp = np.zeros((32, 4), np.uint32)
    inp[:, 0] = rng.integers(0, 4, 32)
    inp[:, 1] = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    out = words("""
    and.b32 %r9, %r0, 1;
    setp.eq.u32 %p1, %r9, 0;
    @%p1 bra EVEN;
    setp.gt.u32 %p2, %r1, 1;
    vote.sync.ballot.b32 %r5, %p2, 0xAAAAAAAA;
    bra JOIN;
EVEN:
    match.any.sync.b32 %r5, %r1, 0x55555555;
JOIN:
    redux.sync.max.s32 %r6, %r2, 0xffffffff;
    elect.sync %r7|%p3, 0xffffffff;
    selp.u32 %r8, 1, 0, %p3;
    st.global.v4.u32 [%rd2], {%r5, %r6, %r7, %r8};""", inp)
    lanes, x = np.arange(32), inp[:, 0]
    ballot = sum(1 << int(t) for t in lanes if t % 2 and x[t] > 1)
    match = [sum(1 << int(u) for u in lanes if u % 2 == 0 and x[u] == x[t]) for t in lanes]
    np.testing.assert_array_equal(out[:, 0], np.where(lanes % 2, ballot, match))
    np.testing.assert_array_equal(out[:, 1].view(np.int32), inp[:, 1].view(np.int32).max())
    np.testing.assert_array_equal(out[:, 2], 0)
    np.testing.assert_array_equal(out[:, 3], lanes == 0)


def test_fp8_conversions_at_ties_subnormals_and_overflow():
    """cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b (a to the upper byte): ties to even, subnormals, half the smallest
    subnormal to zero, values past MAX_NORM (448, 57344) and infinities to +-MAX_NORM; each against ml_dtypes'
    rounding of the value clamped to MAX_NORM (a NaN result is checked as a NaN of its format by tests/test_fp8.py)."""
    v = np.array([448, 449, 464, 480, 1e9, -1e9, np.inf, -np.inf, 57344, 57345, 61440, 65536, 1e-9, -0.0, 2.0**-10,
                  1.5 * 2.0**-9, 2.0**-17, 1.4 * 2.0**-16, 240.0, -500, 3.0, 0.1, 1.0, 2.0**-7, 2.0**-8, 2.0**-9,
                  0.0013, 17.0, 18.0, 19.0, 20.0, 2.0**-6], np.float32)
    inp = column(v)
    inp[:, 1] = v[::-1].view(np.uint32)
    out = words("""
    cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;
    cvt.rn.satfinite.e5m2x2.f32 %rs2, %f1, %f2;
    cvt.u32.u16 %r5, %rs1;
    cvt.u32.u16 %r6, %rs2;
    st.global.v2.u32 [%rd2], {%r5, %r6};""", inp)
    for k, dtype in enumerate([ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]):
        big = float(ml_dtypes.finfo(dtype).max)
        code = lambda x: np.clip(x.astype(np.float64), -big, big).astype(dtype).view(np.uint8).astype(np.uint32)
        np.testing.assert_array_equal(out[:, k], code(v) << 8 | code(v[::-1]), err_msg=str(dtype))


@pytest.mark.parametrize("body, message", [
    ("max.xorsign.f32 %f4, %f1, %f2;", r"max.xorsign.f32: not supported by the PTX executor: min/max .xorsign "
                                       r"without .abs"),
    ("ex2.approx.bf16x2 %r5, %r1;", r"ex2.approx.bf16x2: not supported by the PTX executor: ex2.approx.bf16x2 \(the "
                                    r"form is ex2.approx.ftz.bf16 or ex2.approx.ftz.bf16x2\)"),
    ("fma.rn.oob.relu.f16x2 %r5, %r1, %r1, %r1;", r"fma.rn.oob.relu.f16x2: not supported by the PTX executor: fma "
                                                  r".oob"),
    ("mbarrier.pending_count.b64 %r5, %rd1;", r"mbarrier.pending_count.b64: not supported by the PTX executor"),
], ids=["xorsign-without-abs", "ex2-bf16x2-without-ftz", "fma-oob", "pending-count"])
def test_legal_forms_the_executor_does_not_implement_are_refused_at_their_line(body, message):
    with pytest.raises(PtxExecutionError, match=rf"<ptx>:{line_of(TEXT, 'BODY')}: error: " + message):
        words(body, np.zeros((32, 4), np.uint32))


LDMATRIX_TRANS = """.visible .entry k(.param .u64 inp, .param .u64 out, .param .u64 regs)
{
    .reg .b32 %r<20>;
    .reg .b64 %rd<12>;
    .shared .align 128 .b8 a[512];
    .shared .align 128 .b8 b[512];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [inp];
    mul.wide.u32 %rd1, %r0, 16;
    add.s64 %rd2, %rd0, %rd1;
    ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd2];
    mov.u32 %r5, a;
    shl.b32 %r6, %r0, 4;
    add.u32 %r7, %r5, %r6;
    st.shared.v4.u32 [%r7], {%r1, %r2, %r3, %r4};
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r8, %r9, %r10, %r11}, [%r7];
    mov.u32 %r12, b;
    add.u32 %r13, %r12, %r6;
    stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r13], {%r8, %r9, %r10, %r11};
    ld.param.u64 %rd3, [regs];
    add.s64 %rd4, %rd3, %rd1;
    st.global.v4.u32 [%rd4], {%r8, %r9, %r10, %r11};
    bar.sync 0;
    ld.shared.v4.u32 {%r1, %r2, %r3, %r4}, [%r7+512];
    ld.param.u64 %rd5, [out];
    add.s64 %rd6, %rd5, %rd1;
    st.global.v4.u32 [%rd6], {%r1, %r2, %r3, %r4};
    ret;
}
"""
"""Four 8x8 b16 matrices, row r of matrix i at 16 (8 i + r) of `a` (thread 8 i + r's address): ldmatrix .x4 .trans into
registers, stmatrix .x4 .trans of them into `b`, copied out."""


def test_ldmatrix_trans_fragments_and_the_stmatrix_trans_round_trip():
    """ldmatrix.trans: thread l's register i holds matrix i's elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4),
    the first in the low half (warp-level-matrix-instructions-ldmatrix); stmatrix.trans stores them back in place."""
    x = np.arange(256, dtype=np.uint16) * 3 + 1
    _, out, regs = run(LDMATRIX_TRANS, 1, 32, [x.view(np.uint32).copy(), np.zeros(128, np.uint32),
                                               np.zeros(128, np.uint32)])
    m = x.reshape(4, 8, 8).astype(np.uint32)
    lane = np.arange(32)[:, None]
    want = m[np.arange(4), 2 * (lane % 4), lane // 4] | m[np.arange(4), 2 * (lane % 4) + 1, lane // 4] << 16
    np.testing.assert_array_equal(regs.reshape(32, 4), want)
    np.testing.assert_array_equal(out.view(np.uint16), x)


def _shfl(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """The ISA's shfl.sync pseudo-code: (source lane, predicate) of `lane` for operand b and the packed c (clamp in
    bits 4:0, segment mask in bits 12:8)."""
    b, clamp, segmask = b & 31, c & 31, (c >> 8) & 31
    max_lane, min_lane = (lane & segmask) | (clamp & ~segmask), lane & segmask
    j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~segmask)}[mode]
    ok = j >= max_lane if mode == "up" else j <= max_lane
    return (j if ok else lane), ok


@pytest.mark.parametrize("mode, b, c", [("up", 3, 24 << 8), ("down", 3, 24 << 8 | 31), ("bfly", 5, 24 << 8 | 31),
                                        ("idx", 13, 24 << 8 | 31), ("idx", 40, 31), ("down", 3, 28)])
def test_shfl_in_segments_of_eight_and_out_of_range(mode, b, c):
    """CUB's segmented scans pack width 8 into c as (32 - 8) << 8: a source outside the thread's segment (or past
    the clamp) gives the thread its own value and a false predicate; b is taken modulo 32."""
    inp = column(np.arange(32) * 10 + 5)
    out = words(f"""
    shfl.sync.{mode}.b32 %r5|%p1, %r1, {b}, {c}, 0xffffffff;
    selp.u32 %r6, 1, 0, %p1;
    st.global.v2.u32 [%rd2], {{%r5, %r6}};""", inp)
    source, ok = zip(*(_shfl(mode, lane, b, c) for lane in range(32)))
    np.testing.assert_array_equal(out[:, 0], inp[list(source), 0])
    np.testing.assert_array_equal(out[:, 1], ok)


BAR_RED = """.visible .entry k(.param .u64 out, .param .u64 inp)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    .reg .pred %p<6>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 16;
    add.s64 %rd2, %rd0, %rd1;
    ld.param.u64 %rd3, [inp];
    mul.wide.u32 %rd4, %r0, 4;
    add.s64 %rd5, %rd3, %rd4;
    ld.global.u32 %r1, [%rd5];
    setp.ne.u32 %p0, %r1, 0;
    bar.red.popc.u32 %r2, 0, %p0;
    bar.red.and.pred %p1, 1, %p0;
    bar.red.or.pred %p2, 2, %p0;
    selp.u32 %r3, 1, 0, %p1;
    selp.u32 %r4, 1, 0, %p2;
    barrier.red.popc.u32 %r5, 3, 96, %p0;
    st.global.v4.u32 [%rd2], {%r2, %r3, %r4, %r5};
    ret;
}
"""


@pytest.mark.parametrize("pattern", [np.arange(96) % 3 == 0, np.ones(96, bool), np.zeros(96, bool)],
                         ids=["every-third", "all", "none"])
def test_barrier_reductions_over_three_warps(pattern):
    """__syncthreads_count/_and/_or (bar.red.popc/.and/.or) and barrier.red with an explicit count: every thread
    gets the reduction of the predicates of all 96."""
    out = run(BAR_RED, 1, 96, [np.zeros(96 * 4, np.uint32), pattern.astype(np.uint32)])[0].reshape(96, 4)
    np.testing.assert_array_equal(out, np.tile([pattern.sum(), pattern.all(), pattern.any(), pattern.sum()], (96, 1)))
