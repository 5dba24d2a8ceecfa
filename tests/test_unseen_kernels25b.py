"""Kernels a user writes next with round 25's new Tile IR ops (`tests/user_kernels/*.mlir`): a MoE router's top-2 per
row with ties (`tile.row_min` of i32 column indices; `top2_rows`), a W4A16 GEMM that unpacks int4 weights in
registers, casts them to bf16 and stores them to shared memory for a tensor-core `tile.mma` (`w4a16_gemm`), packing
a boolean mask into i32 words, a SWAR popcount and the bitwise ops with every broadcast operand
(`bitpack_popcount`), PyTorch's exact GELU with `tile.erf` in a GEMM epilogue (`gemm_gelu_exact`), sinusoidal
position embeddings with in-kernel frequencies, softplus and mish (`posembed_softplus`), a murmur3-hash dropout in a
GEMM epilogue (`gemm_dropout_murmur`), Philox4x32-10 as torch's GPU dropout draws (`philox_uniform`), RoPE applied
to Q in registers before the Q K^T mma (`rope_qk_scores`), the new ops on -inf / NaN / +-0 rows, INT_MIN / INT_MAX
and [M], [1, N], [1, 1], [M, 1] operands (`edge_operands`), and register tiles of every width from [64, 8] to [128,
136] and [64, 256] (`WIDTHS`). Each against its own float64 / exact NumPy reference, with the bound derived in its
reference.

Bug found: a row reduction of an [M, 1] column ran at Tile level but was refused below it ("register tiles need
a column count that is a legal wgmma N"), though the column is a documented register shape; a float row sum of
one kept as a per-thread partial sum would have been added over the quad (four times the value). The column's
reduction is itself now (`AttentionLowering._reduce_rows`), never a partial sum (`row_sums.partial_row_sums`).

The default run takes every kernel at one level on one odd shape; `-m slow` takes every level on every shape,
every ptxas found (no warning, no spill), `tessera-run --level ptx --check` and `tessera.validate`.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.ir.diagnostics import LocatedVerifyException
from tessera.sm90 import approx
from unseen_rounds import KERNELS, LEVELS, assert_ptxas_clean, check_tools

U = 2.0**-24  # the f32 unit roundoff
ERF = np.vectorize(math.erf)


def _launch(kernel, arrays, level, **sizes):
    module = tessera.parse_module((KERNELS / f"{kernel}.mlir").read_text(), f"{kernel}.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize / pipeline fallbacks: nothing to specialize here
        got = tessera.launch(module, *arrays, level=level, **sizes)
    return got if isinstance(got, tuple) else (got,)


def _within(got, want, tol, what):
    got = np.asarray(got, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), f"{what}: NaNs")
    finite = np.isfinite(want)
    err = np.abs(got[finite] - want[finite])
    bound = np.broadcast_to(tol, want.shape)[finite]
    assert np.all(err <= bound), f"{what}: max error {err.max():.3g}, worst excess {(err - bound).max():.3g}"


def _bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _i32(rng, shape):
    return rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)


def _wrap(x):
    """int64 values as the i32 they wrap to."""
    return np.asarray(x, np.int64).astype(np.uint64).astype(np.uint32).view(np.int32)


def top2_rows(shape, level):
    """Values in half steps (ties in most rows; row 0 all equal, the last -inf): argmax, the column masked, argmax
    again, exact."""
    m, n = shape
    rng = np.random.default_rng(m + n)
    x = (np.round(rng.standard_normal(shape) * 2) / 2).astype(np.float32)
    x[0], x[-1] = x[0, 0], -np.inf
    i1, v1, i2, v2 = _launch("top2_rows", [x], level)
    want_i1 = np.argmax(x, 1)
    x2 = x.copy()
    x2[np.arange(m), want_i1] = -np.inf
    for got, want in zip((i1, v1, i2, v2), (want_i1, x.max(1), np.argmax(x2, 1), x2.max(1))):
        np.testing.assert_array_equal(got, want)


def w4a16_gemm(shape, level):
    """Codes over the whole i32 range, W rounded to bf16 as the kernel stores it (exact products of bf16s);
    the f32 accumulation's K roundings, each at most 2^-24 of the running |A| |W|."""
    m, kp, n = shape
    rng = np.random.default_rng(m + kp + n)
    a = rng.standard_normal((m, 8 * kp)).astype(np.float32)
    p = _i32(rng, (kp, n))
    s = (rng.uniform(0.5, 2, n) / 8).astype(np.float32)
    (c,) = _launch("w4a16_gemm", [a, p, s], level)
    k = np.arange(8 * kp)[:, None]
    word = p.view(np.uint32)[k // 8, np.arange(n)[None, :]].astype(np.uint64)
    code = ((word >> (4 * (k % 8)).astype(np.uint64)) & 15).astype(np.float64) - 8
    w = _bf16((code * s.astype(np.float64)).astype(np.float32))
    a64 = _bf16(a)
    _within(c, a64 @ w, 8 * kp * U * (np.abs(a64) @ np.abs(w)), "w4a16_gemm")


def bitpack_popcount(shape, level):
    """Exact: the packed words (bit 31 makes a negative word), the popcounts, the broadcast mix with shift
    amounts 0..40 (32 or more gives 0)."""
    (m,) = shape
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 64)).astype(np.float32)
    x[0], x[-1, ::2] = 1.0, -0.0
    v = _i32(rng, (m, 64))
    v[0, :3] = [-1, -2**31, 0]
    colmask, rowbits = _i32(rng, 64), _i32(rng, m)
    amount = rng.integers(0, 41, size=(m, 1)).astype(np.int32)
    seed = _i32(rng, (1, 1))
    got = _launch("bitpack_popcount", [x, v, colmask, rowbits, amount, seed], level)
    bits = (x > 0).astype(np.uint64) << (np.arange(64, dtype=np.uint64) % 32)
    pop = np.vectorize(lambda e: bin(int(e)).count("1"))(v.view(np.uint32))
    mix = ((v.view(np.uint32) & colmask.view(np.uint32)) | rowbits.view(np.uint32)[:, None]) ^ seed.view(np.uint32)
    a = np.minimum(amount, 31).astype(np.uint64)
    mix = np.where(amount < 32, ((mix.astype(np.uint64) >> a) << a) & 0xFFFFFFFF, 0)
    want = (_wrap(bits[:, :32].sum(1)), _wrap(bits[:, 32:].sum(1)), pop, pop.sum(1), _wrap(mix))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g.astype(np.int64), np.asarray(w, np.int64), f"output {k}")


def gemm_gelu_exact(shape, level):
    """Against x / 2 (1 + erf(x / sqrt 2)) in float64 at the bf16 inputs: x's accumulation error (K + 1
    roundings) through gelu' <= 1.13, erf's bound times |x| / 2, the roundings of x / sqrt 2 (and of 1 / sqrt 2),
    1 + erf, x / 2 and the product."""
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    (c,) = _launch("gemm_gelu_exact", [a, b, bias], level)
    a64, b64 = _bf16(a), _bf16(b)
    x = a64 @ b64 + bias
    want = x / 2 * (1 + ERF(x / np.sqrt(2)))
    z = np.abs(x) / np.sqrt(2)
    dx = (k + 1) * U * (np.abs(a64) @ np.abs(b64) + np.abs(bias))
    tol = 1.13 * dx + np.abs(x) / 2 * (approx.erf_error_bound(z) + 2.26 * U * z + 2 * U) + 2 * U * np.abs(want)
    _within(c, want, tol, "gemm_gelu_exact")


def posembed_softplus(shape, level):
    """PE against sin/cos at the exact angle s 10000^(-2i/64): the angle's error (the exponent's two f32
    roundings through ex2's slope ln 2, ex2.approx's 2^-22, the product's rounding) plus sin_cos_error_bound and
    the sum's rounding; softplus: exp's bound through log1p's slope, lg2.approx's bound times ln 2, the roundings
    of 1 + e, of ln 2 times the log and of the sum; mish: tanh.approx's relative bound plus softplus's error
    through tanh' = 1 - tanh^2, and the product's rounding."""
    (s,) = shape
    rng = np.random.default_rng(s)
    x = (rng.standard_normal((s, 64)) * 4).astype(np.float32)
    x[0, :6] = [0.0, -0.0, 30.0, -30.0, 100.0, -100.0]
    pe, sp, mish = _launch("posembed_softplus", [x], level)
    x64 = x.astype(np.float64)
    e = -2.0 * (np.arange(64) // 2) / 64 * np.log2(10000.0)
    angle = np.arange(s)[:, None] * 2.0 ** e[None, :]
    want_pe = x64 + np.where(np.arange(64) % 2 == 0, np.sin(angle), np.cos(angle))
    dangle = angle * (np.log(2) * np.abs(e) * 2.0**-22 + approx.EX2_APPROX_RELATIVE_ERROR + U)
    _within(pe, want_pe, approx.sin_cos_error_bound(angle) + dangle + U * np.abs(want_pe), "pe")
    ex = np.exp(-np.abs(x64))
    log = np.log1p(ex)
    want_sp = np.maximum(x64, 0) + log
    rexp = approx.EX2_APPROX_RELATIVE_ERROR + np.abs(x64) * 2.0**-23
    tol_sp = (np.log(2) * approx.lg2_approx_error_bound(1 + ex) + (ex * rexp + U * (1 + ex)) / (1 + ex)
              + 2 * U * log + U * want_sp)
    _within(sp, want_sp, tol_sp, "softplus")
    t = np.tanh(want_sp)
    want_mish = x64 * t
    tol_mish = np.abs(x64) * (approx.TANH_APPROX_RELATIVE_ERROR * t + (1 - t * t) * tol_sp) + U * np.abs(want_mish)
    _within(mish, want_mish, tol_mish, "mish")


def _fmix32(h):
    h = h.astype(np.uint64)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def gemm_dropout_murmur(shape, level):
    """The mask exactly (murmur3's fmix32 in uint64 arithmetic of its own), the kept values against the float64
    product times f32(4/3): the accumulation's K roundings, the scaling's one."""
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    bt = rng.standard_normal((n, k)).astype(np.float32)
    seed = _i32(rng, (1, 1))
    (c,) = _launch("gemm_dropout_murmur", [a, bt, seed], level)
    a64, b64 = _bf16(a), _bf16(bt)
    linear = (np.arange(m)[:, None] * n + np.arange(n)[None, :]).astype(np.uint64)
    keep = (_fmix32(linear ^ np.uint64(seed.view(np.uint32)[0, 0])) >> 8) >= 2**22
    scale = float(np.float32(4 / 3))
    want = np.where(keep, a64 @ b64.T * scale, 0.0)
    np.testing.assert_array_equal(c == 0, ~keep | (want == 0))
    _within(c, want, (k + 1) * U * (np.abs(a64) @ np.abs(b64.T)) * scale + U * np.abs(want), "dropout")


def rope_qk_scores(shape, level):
    """Against rope(Q) K^T in float64 at the kernel's f32 angles: the rotation's error e_r (two sin/cos bounds,
    |q| <= 1, the f32 products and sum), then bf16(rope(Q)): half a bf16 ulp plus e_r, at most 2^-8 |qr| + 2 e_r
    per element, times |K|, and the f32 accumulation of 64 products."""
    sq, sk, offset = shape
    rng = np.random.default_rng(sq + sk)
    q = rng.uniform(-1, 1, (sq, 64)).astype(np.float32)
    k = rng.uniform(-1, 1, (sk, 64)).astype(ml_dtypes.bfloat16)
    inv = (10000.0 ** (-np.arange(32) * 2 / 64)).astype(np.float32)
    (s,) = _launch("rope_qk_scores", [q, k, inv, np.array([[offset]], np.int32)], level)
    pos = (np.arange(sq) + offset).astype(np.float32)
    angle = (pos[:, None] * inv[np.arange(64) % 32][None, :]).astype(np.float64)
    q64 = q.astype(np.float64)
    partner = q64[:, np.arange(64) ^ 32] * np.where(np.arange(64) < 32, -1.0, 1.0)
    qr = q64 * np.cos(angle) + partner * np.sin(angle)
    k64 = k.astype(np.float64)
    e_r = 2 * approx.sin_cos_error_bound(angle) + 4 * U * (np.abs(q64) + np.abs(partner))
    dq = 2.0**-8 * np.abs(qr) + 2 * e_r
    tol = (dq + 65 * U * (np.abs(qr) + dq)) @ np.abs(k64.T)
    _within(s, qr @ k64.T, tol, "rope scores")


def edge_operands(shape, level):
    """max.NaN / min.NaN on rows of -inf, +inf, NaN and +-0 (+0 the larger zero), i32 extrema and a wrapping sum
    with INT_MIN / INT_MAX rows, each exact; sin of an [M] row vector, cos of a [1, N] column vector (NaN at NaN
    and inf) within sin_cos_error_bound; erf of a [1, 1] tile within erf_error_bound; an [M] ^ [1, N] xor and an
    [M, 1] column's row minimum (itself), exact."""
    (m,) = shape
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 64)).astype(np.float32)
    special = [[-np.inf] * 64, [np.nan] + [1.0] * 63, [0.0] * 32 + [-0.0] * 32, [np.inf] * 64, [-0.0] * 64,
               [0.0] * 64, [1.0] * 63 + [np.nan], [-np.inf] * 63 + [np.inf]]
    for i, row in enumerate(special[:m]):
        x[i] = row
    k = _i32(rng, (m, 64))
    k[0], k[min(1, m - 1)] = 2**31 - 1, -2**31
    r = rng.uniform(-1e4, 1e4, m).astype(np.float32)
    r[0] = -0.0
    cv = rng.uniform(-50, 50, 64).astype(np.float32)
    cv[:2] = np.nan, np.inf
    ri, ci = _i32(rng, m), _i32(rng, 64)
    s = np.array([[-0.3]], np.float32)
    mn, mx, kmn, kmx, ksum, sin_r, cos_c, erf_s, xor, colmin = _launch(
        "edge_operands", [x, k, r, cv, ri, ci, s], level)
    nan_row, zero_row = np.isnan(x).any(1), (x == 0).all(1)
    with np.errstate(invalid="ignore"):
        want_mn = np.where(nan_row, np.nan, np.where(zero_row, np.where(np.signbit(x).any(1), -0.0, 0.0), x.min(1)))
        want_mx = np.where(nan_row, np.nan, np.where(zero_row, np.where(np.signbit(x).all(1), -0.0, 0.0), x.max(1)))
    for got, want in ((mn, want_mn), (mx, want_mx), (colmin, r)):
        np.testing.assert_array_equal(got.astype(np.float32).view(np.uint32)[~np.isnan(want)],
                                      want.astype(np.float32).view(np.uint32)[~np.isnan(want)])
        assert np.isnan(got[np.isnan(want)]).all()
    np.testing.assert_array_equal(kmn, k.min(1))
    np.testing.assert_array_equal(kmx, k.max(1))
    np.testing.assert_array_equal(ksum, _wrap(k.astype(np.int64).sum(1)))
    np.testing.assert_array_equal(xor, ri[:, None] ^ ci[None, :])
    r64, c64 = r.astype(np.float64), cv.astype(np.float64)
    _within(sin_r, np.sin(r64), approx.sin_cos_error_bound(r64), "sin")
    with np.errstate(invalid="ignore"):
        _within(cos_c[0], np.cos(c64), approx.sin_cos_error_bound(np.nan_to_num(c64)), "cos")
    _within(erf_s[0], np.array([math.erf(-0.3)]), approx.erf_error_bound(np.float64(s[0])), "erf")


def _philox4x32_10(counter, key):
    """Philox4x32-10 on uint32 arrays in uint64 arithmetic (the 64-bit products exact)."""
    c = [x.astype(np.uint64) for x in counter]
    k0, k1 = int(key[0]), int(key[1])
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & np.uint64(0xFFFFFFFF),
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & np.uint64(0xFFFFFFFF)]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return [x.astype(np.uint32).view(np.int32) for x in c]


def test_philox_reference_known_answer():
    """The reference gives Random123's known answer for counter 0, key 0."""
    zero = np.zeros(1, np.uint32)
    words = _philox4x32_10([zero] * 4, [0, 0])
    assert [int(w.view(np.uint32)[0]) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def philox_uniform(shape, level):
    """Exact: the four words and the uniform (a 24-bit integer times 2^-24)."""
    m, n = shape
    rng = np.random.default_rng(m + n)
    seed = _i32(rng, (1, 2))
    got = _launch("philox_uniform", [seed], level, M=m, N=n)
    linear = (np.arange(m)[:, None] * n + np.arange(n)[None, :]).astype(np.uint32)
    zero = np.zeros_like(linear)
    words = _philox4x32_10([linear, zero, linear, zero], seed.view(np.uint32)[0])
    uniform = (words[0].view(np.uint32) >> 8).astype(np.float64) * 2.0**-24
    for out, want in zip(got, [*words, uniform]):
        np.testing.assert_array_equal(out, want)


CASES = {  # the kernel's check, its shapes (odd ones first: the default run takes the first)
    "top2_rows": (top2_rows, ((70, 17), (1, 1), (129, 64), (1000, 2))),
    "w4a16_gemm": (w4a16_gemm, ((70, 13, 70), (1, 1, 1), (129, 8, 64), (17, 16, 129))),
    "bitpack_popcount": (bitpack_popcount, ((70,), (1,), (129,), (1000,))),
    "gemm_gelu_exact": (gemm_gelu_exact, ((70, 72, 70), (1, 8, 1), (129, 64, 17), (17, 136, 129))),
    "posembed_softplus": (posembed_softplus, ((70,), (1,), (129,), (1000,))),
    "gemm_dropout_murmur": (gemm_dropout_murmur, ((70, 72, 70), (1, 8, 1), (129, 64, 17), (17, 136, 129))),
    "rope_qk_scores": (rope_qk_scores, ((70, 70, 0), (1, 1, 4095), (129, 17, 1000), (17, 129, 65000))),
    "edge_operands": (edge_operands, ((17,), (1,), (64,))),
    "philox_uniform": (philox_uniform, ((70, 70), (1, 1), (129, 17))),
}
FAST = {"top2_rows": "ptx", "w4a16_gemm": "ptx", "bitpack_popcount": "ptx", "gemm_gelu_exact": "target",
        "posembed_softplus": "ptx", "gemm_dropout_murmur": "target", "rope_qk_scores": "ptx", "edge_operands": "ptx",
        "philox_uniform": "ptx"}
TOOL_SIZES = {"top2_rows": {"M": 70, "N": 17}, "w4a16_gemm": {"M": 70, "KP": 9, "N": 70},
              "bitpack_popcount": {"M": 70}, "gemm_gelu_exact": {"M": 70, "K": 72, "N": 72},
              "posembed_softplus": {"S": 70}, "gemm_dropout_murmur": {"M": 70, "K": 72, "N": 70},
              "rope_qk_scores": {"SQ": 70, "SK": 70}, "edge_operands": {"M": 17},
              "philox_uniform": {"M": 70, "N": 70}}


@pytest.mark.parametrize("kernel", CASES)
def test_unseen_kernel(kernel):
    check, shapes = CASES[kernel]
    check(shapes[0], FAST[kernel])


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kernel", CASES)
def test_unseen_kernel_every_shape(kernel, level):
    check, shapes = CASES[kernel]
    for shape in shapes:
        check(shape, level)


def test_every_case_has_tool_sizes():
    assert sorted(TOOL_SIZES) == sorted(CASES) == sorted(FAST)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", CASES)
def test_unseen_kernel_tools(kernel):
    """Every ptxas found, `tessera-run --level ptx --check`, and `tessera.validate` of the default pipeline."""
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    sizes = TOOL_SIZES[kernel]
    check_tools(kernel, [f"{name}={size}" for name, size in sizes.items()])
    module = tessera.parse_module((KERNELS / f"{kernel}.mlir").read_text(), f"{kernel}.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = validate(module, PTX_PIPELINE, sizes=sizes)
    assert report.ok, report.table()


WIDTHS = """
builtin.module {{
  func.func @widths(%X: !tile.tile<?x{n}xf32, global> {{tile.dims = #tile.dims<M, {n}>}},
      %K: !tile.tile<?x{n}xi32, global> {{tile.dims = #tile.dims<M, {n}>}},
      %Y: !tile.tile<?x{n}xf32, global> {{tile.dims = #tile.dims<M, {n}>, tile.role = "out"}},
      %H: !tile.tile<?x{n}xi32, global> {{tile.dims = #tile.dims<M, {n}>, tile.role = "out"}},
      %XMIN: !tile.tile<?xf32, global> {{tile.dims = #tile.dims<M>, tile.role = "out"}},
      %HMAX: !tile.tile<?xi32, global> {{tile.dims = #tile.dims<M>, tile.role = "out"}},
      %HSUM: !tile.tile<?xi32, global> {{tile.dims = #tile.dims<M>, tile.role = "out"}},
      %KMIN: !tile.tile<?xi32, global> {{tile.dims = #tile.dims<M>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, {bm})>}} {{
    %c0 = arith.constant 0 : index
    %cbm = arith.constant {bm} : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %cbm : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x{n}xf32, global> -> !tile.tile<{bm}x{n}xf32, global>
    %x = tile.load %xw : !tile.tile<{bm}x{n}xf32, global> -> !tile.tile<{bm}x{n}xf32, register>
    %kw = tile.view %K[%m0, %c0] : !tile.tile<?x{n}xi32, global> -> !tile.tile<{bm}x{n}xi32, global>
    %k = tile.load %kw : !tile.tile<{bm}x{n}xi32, global> -> !tile.tile<{bm}x{n}xi32, register>
    %e = tile.erf %x : !tile.tile<{bm}x{n}xf32, register>
    %s = tile.sin %x : !tile.tile<{bm}x{n}xf32, register>
    %c = tile.cos %x : !tile.tile<{bm}x{n}xf32, register>
    %sc = tile.mul %s, %c : !tile.tile<{bm}x{n}xf32, register>
    %y = tile.add %e, %sc : !tile.tile<{bm}x{n}xf32, register>
    %t31 = tile.fill 31 : !tile.tile<1x1xi32, register>
    %t3 = tile.fill 3 : !tile.tile<1x1xi32, register>
    %amt = tile.and %k, %t31 : !tile.tile<{bm}x{n}xi32, register>, !tile.tile<1x1xi32, register>
    %l = tile.shl %k, %amt : !tile.tile<{bm}x{n}xi32, register>
    %r = tile.shru %k, %t3 : !tile.tile<{bm}x{n}xi32, register>, !tile.tile<1x1xi32, register>
    %rs = tile.shrs %k, %amt : !tile.tile<{bm}x{n}xi32, register>
    %lr = tile.xor %l, %r : !tile.tile<{bm}x{n}xi32, register>
    %h = tile.or %lr, %rs : !tile.tile<{bm}x{n}xi32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x{n}xf32, global> -> !tile.tile<{bm}x{n}xf32, global>
    tile.store_global %y, %yw : !tile.tile<{bm}x{n}xf32, register>, !tile.tile<{bm}x{n}xf32, global>
    %hw = tile.view %H[%m0, %c0] : !tile.tile<?x{n}xi32, global> -> !tile.tile<{bm}x{n}xi32, global>
    tile.store_global %h, %hw : !tile.tile<{bm}x{n}xi32, register>, !tile.tile<{bm}x{n}xi32, global>
    %xmin = tile.row_min %x : !tile.tile<{bm}x{n}xf32, register> -> !tile.tile<{bm}xf32, register>
    %hmax = tile.row_max %h : !tile.tile<{bm}x{n}xi32, register> -> !tile.tile<{bm}xi32, register>
    %hsum = tile.row_sum %h : !tile.tile<{bm}x{n}xi32, register> -> !tile.tile<{bm}xi32, register>
    %kmin = tile.row_min %k : !tile.tile<{bm}x{n}xi32, register> -> !tile.tile<{bm}xi32, register>
    %w1 = tile.view %XMIN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<{bm}xf32, global>
    tile.store_global %xmin, %w1 : !tile.tile<{bm}xf32, register>, !tile.tile<{bm}xf32, global>
    %w2 = tile.view %HMAX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<{bm}xi32, global>
    tile.store_global %hmax, %w2 : !tile.tile<{bm}xi32, register>, !tile.tile<{bm}xi32, global>
    %w3 = tile.view %HSUM[%m0] : !tile.tile<?xi32, global> -> !tile.tile<{bm}xi32, global>
    tile.store_global %hsum, %w3 : !tile.tile<{bm}xi32, register>, !tile.tile<{bm}xi32, global>
    %w4 = tile.view %KMIN[%m0] : !tile.tile<?xi32, global> -> !tile.tile<{bm}xi32, global>
    tile.store_global %kmin, %w4 : !tile.tile<{bm}xi32, register>, !tile.tile<{bm}xi32, global>
    func.return
  }}
}}
"""

WIDTH_SHAPES = ((64, 24, 17), (64, 8, 70), (128, 136, 129), (64, 256, 1), (128, 40, 200))


def _widths(bm, n, m, level):
    """Register tiles of every width the lowering takes (N = 8 to 256, 64 and 128 rows): erf + sin cos within the
    bounds (erf's, two sin/cos bounds, three f32 roundings of values below 2), the shifts by amounts k & 31 and 3,
    xor and or, and the f32 / i32 row extrema and wrapping row sum, exact."""
    rng = np.random.default_rng(bm + n + m)
    x = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    k = _i32(rng, (m, n))
    module = tessera.parse_module(WIDTHS.format(bm=bm, n=n), "widths.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, h, xmin, hmax, hsum, kmin = tessera.launch(module, x, k, level=level)
    x64 = x.astype(np.float64)
    tol = approx.erf_error_bound(x64) + 2 * approx.sin_cos_error_bound(x64) + 6 * U
    _within(y, ERF(x64) + np.sin(x64) * np.cos(x64), tol, "erf + sin cos")
    u = k.view(np.uint32).astype(np.uint64)
    amount = u & 31
    shifted = (k.astype(np.int64) >> amount.astype(np.int64)).astype(np.uint64)
    want_h = _wrap((((u << amount) ^ (u >> 3)) | shifted) & 0xFFFFFFFF)
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(xmin, x.min(1))
    np.testing.assert_array_equal(hmax, want_h.max(1))
    np.testing.assert_array_equal(hsum, _wrap(want_h.astype(np.int64).sum(1)))
    np.testing.assert_array_equal(kmin, k.min(1))


def test_register_widths():
    _widths(*WIDTH_SHAPES[0], "ptx")


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_register_widths_every_shape(level):
    for shape in WIDTH_SHAPES:
        _widths(*shape, level)


@pytest.mark.slow
@pytest.mark.parametrize("bm, n", [(64, 8), (64, 24), (128, 136), (128, 40)])
def test_register_widths_ptxas_clean(bm, n):
    """Every ptxas found, no warning, no spill (a [64, 256] f32 and i32 tile pair live to the end needs more than
    255 registers a thread: it spills, as it must)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ptx = tessera.compile(tessera.parse_module(WIDTHS.format(bm=bm, n=n), "widths.mlir"))
    assert_ptxas_clean(ptx, f"widths_{bm}x{n}")


SHIFTED_BROADCASTS = """
builtin.module {
  func.func @lb(%A: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>},
      %R: !tile.tile<64xi32, global> {tile.dims = #tile.dims<64>},
      %C: !tile.tile<64xi32, global> {tile.dims = #tile.dims<64>},
      %O1: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %O2: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %O3: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %O4: !tile.tile<1x64xi32, global> {tile.dims = #tile.dims<1, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %aw = tile.view %A[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    %a = tile.load %aw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %rw = tile.view %R[%c0] : !tile.tile<64xi32, global> -> !tile.tile<64xi32, global>
    %r = tile.load %rw : !tile.tile<64xi32, global> -> !tile.tile<64xi32, register>
    %cw = tile.view %C[%c0] : !tile.tile<64xi32, global> -> !tile.tile<64xi32, global>
    %c = tile.load_broadcast %cw : !tile.tile<64xi32, global> -> !tile.tile<1x64xi32, register>
    %kc = arith.constant -1412567295 : i32
    %k = tile.splat %kc : i32 -> !tile.tile<1x1xi32, register>
    %o1 = tile.shl %k, %a : !tile.tile<1x1xi32, register>, !tile.tile<64x64xi32, register>
    %o2 = tile.shru %c, %r : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
    %o3 = tile.shrs %r, %c : !tile.tile<64xi32, register>, !tile.tile<1x64xi32, register>
    %o4 = tile.shrs %c, %k : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %w1 = tile.view %O1[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %o1, %w1 : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %w2 = tile.view %O2[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %o2, %w2 : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %w3 = tile.view %O3[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %o3, %w3 : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %w4 = tile.view %O4[%c0, %c0] : !tile.tile<1x64xi32, global> -> !tile.tile<1x64xi32, global>
    tile.store_global %o4, %w4 : !tile.tile<1x64xi32, register>, !tile.tile<1x64xi32, global>
    func.return
  }
}
"""


def _ptx_shifts(value, amount, kind):
    """PTX's shl.b32 / shr.u32 / shr.s32 on broadcast int64 arrays: the amount unsigned, clamped to 32."""
    value, amount = np.asarray(value, np.int64), np.minimum(np.asarray(amount, np.int64) & 0xFFFFFFFF, 32)
    within = np.minimum(amount, 31)
    if kind == "shl":
        bits = np.where(amount >= 32, 0, ((value & 0xFFFFFFFF) << within) & 0xFFFFFFFF)
    elif kind == "shru":
        bits = np.where(amount >= 32, 0, (value & 0xFFFFFFFF) >> within)
    else:
        bits = np.where(amount >= 32, np.where(value < 0, -1, 0), value >> within)
    return _wrap(bits & 0xFFFFFFFF)


@pytest.mark.parametrize("level", LEVELS)
def test_shifted_value_broadcast(level):
    """The broadcast operand on the left of a shift: a [1, 1] constant shifted by an [M, N] tile of amounts
    (0..33, 63, -1, 2^31 - 1, -2^31), a [1, N] column vector by an [M] row vector and back, a [1, N] by a
    [1, 1] (a [1, N] result), exact."""
    rng = np.random.default_rng(1)
    amounts = np.array([*range(34), 63, -1, 2**31 - 1, -2**31] * 108)[:4096].reshape(64, 64).astype(np.int32)
    rows, cols = _i32(rng, 64), _i32(rng, 64)
    rows[:4], cols[:6] = [-1, 31, 32, -2**31], [0, 1, 31, 32, 33, -1]
    k = -1412567295
    got = tessera.launch(tessera.parse_module(SHIFTED_BROADCASTS, "lb.mlir"), amounts, rows, cols, level=level)
    np.testing.assert_array_equal(got[0], _ptx_shifts(k, amounts, "shl"))
    np.testing.assert_array_equal(got[1], _ptx_shifts(cols[None, :], rows[:, None], "shru"))
    np.testing.assert_array_equal(got[2], _ptx_shifts(rows[:, None], cols[None, :], "shrs"))
    np.testing.assert_array_equal(got[3], _ptx_shifts(cols[None, :], k, "shrs"))


MALFORMED = """
builtin.module {{
  func.func @bad(%X: !tile.tile<64x64xf32, global> {{tile.dims = #tile.dims<64, 64>}},
      %K: !tile.tile<64x64xi32, global> {{tile.dims = #tile.dims<64, 64>}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %x = tile.load %X : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %k = tile.load %K : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %p = tile.cmp gt %x, %x : !tile.tile<64x64xf32, register>
    %b = tile.cast %x : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %h = tile.fill 1 : !tile.tile<1x32xi32, register>
    {line}
    func.return
  }}
}}
"""


@pytest.mark.parametrize("line, message", [
    ("%z = tile.and %x, %x : !tile.tile<64x64xf32, register>", "'tile.and' op operand must be an i32 tile"),
    ("%z = tile.shl %p, %p : !tile.tile<64x64xi1, register>", "'tile.shl' op operand must be an i32 tile .*got i1"),
    ("%z = tile.shru %k, %x : !tile.tile<64x64xi32, register>, !tile.tile<64x64xf32, register>",
     "'tile.shru' op operands must share one element type, got i32, f32"),
    ("%z = tile.xor %k, %h : !tile.tile<64x64xi32, register>, !tile.tile<1x32xi32, register>",
     r"'tile.xor' op operand shapes \[\[64, 64\], \[1, 32\]\] do not broadcast"),
    ("%z = tile.sin %k : !tile.tile<64x64xi32, register>", "'tile.sin' op computes on f32 tiles, got i32"),
    ("%z = tile.erf %b : !tile.tile<64x64xbf16, register>", "'tile.erf' op computes on f32 tiles, got bf16"),
    ("%z = tile.row_min %p : !tile.tile<64x64xi1, register> -> !tile.tile<64xi1, register>",
     "'tile.row_min' op source must have a float or i32 element type, got i1"),
    ('%z = "tile.and"(%k, %k) : (!tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, register>) '
     "-> !tile.tile<64x64xf32, register>", "'tile.and' op result must be !tile.tile<64x64xi32, register>"),
])
def test_malformed_use_refused_at_its_line(line, message):
    """Wrong element types, i1 operands, shapes that do not broadcast: refused by name where they are written."""
    with pytest.raises(LocatedVerifyException, match=message) as info:
        tessera.parse_module(MALFORMED.format(line=line), "bad.mlir")
    assert "bad.mlir:11:" in str(info.value)


COLUMN_REDUCTIONS = """
builtin.module {
  func.func @column_rows(%X: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>},
      %K: !tile.tile<?x1xi32, global> {tile.dims = #tile.dims<M, 1>},
      %SUM: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %MIN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KMAX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
    %x = tile.load %xw : !tile.tile<64x1xf32, global> -> !tile.tile<64x1xf32, register>
    %kw = tile.view %K[%m0, %c0] : !tile.tile<?x1xi32, global> -> !tile.tile<64x1xi32, global>
    %k = tile.load %kw : !tile.tile<64x1xi32, global> -> !tile.tile<64x1xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64xf32, register>
    %sum = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %s = tile.row_sum %x : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.fma %one, %acc, %s : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %mn = tile.row_min %x : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %kmx = tile.row_max %k : !tile.tile<64x1xi32, register> -> !tile.tile<64xi32, register>
    %sw = tile.view %SUM[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %sum, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %mw = tile.view %MIN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mn, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %kmw = tile.view %KMAX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %kmx, %kmw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", LEVELS)
def test_row_reductions_of_a_column(level):
    """A row reduction of an [M, 1] column is the column at every level (it was refused below Tile IR), and a
    float row sum of one accumulated by tile.fma in a loop (a per-thread partial sum's pattern) is not added over
    the quad again (it would be four times the value)."""
    x = np.array([[1.0], [-0.0], [np.nan], [-np.inf]] * 17 + [[0.5]], np.float32)
    k = np.arange(-34, 35, dtype=np.int32)[:, None] * 31234567
    total, smallest, largest = tessera.launch(tessera.parse_module(COLUMN_REDUCTIONS, "column_rows.mlir"), x, k,
                                              level=level)
    np.testing.assert_array_equal(total, x[:, 0] * 3)
    np.testing.assert_array_equal(smallest.view(np.uint32), x[:, 0].view(np.uint32))
    np.testing.assert_array_equal(largest, k[:, 0])


def test_malformed_use_refused_by_the_tools(tmp_path):
    """tessera-opt and tessera-run exit 1 with the diagnostic at the op's line (no traceback)."""
    import sys

    import inprocess

    line = "%z = tile.shru %k, %p : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi1, register>"
    path = tmp_path / "bad.mlir"
    path.write_text(MALFORMED.format(line=line))
    for tool in ("tessera_opt", "tessera_run"):
        result = inprocess.run([sys.executable, "-m", f"tessera.tools.{tool}", str(path)])
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"{path}:11:5: kernel @bad: 'tile.shru' op operands must share one element type, got i32, i1" \
            in result.stderr
        assert "Traceback" not in result.stderr
