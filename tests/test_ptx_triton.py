"""Triton 3.9 as its users write it, through the PTX executor: the kernels of tests/ptx_triton/kernels.py
(the tutorials' vector add, a log-softmax, a residual layer norm forward and the backward under its lock, a
linear layer and the persistent matmul on device-built tensor maps, and fp8, int8, scan/sort/histogram, NaN
and math kernels), compiled for sm_90a by tests/ptx_triton/build.py
into the small PTX goldens beside it, each run with the race checks on against float64 NumPy: bitwise where
the arithmetic is exact or correctly rounded, else within the documented bounds of `tessera.sm90.approx`.

Triton passes two hidden trailing pointers (global scratch, profile scratch); the header line of each PTX
gives the launch (threads, dynamic shared bytes, global scratch bytes). `-m slow` recompiles the kernels with
Triton where it is installed and checks the goldens are what Triton 3.9 writes.
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, PtxHazardError, launch
from tessera.sm90 import approx
from tessera.sm90.nan import CANONICAL_NAN_BITS
from tessera.toolchain import find_all_ptxas
from text_edits import checked, planted

HERE = Path(__file__).parent / "ptx_triton"


def header(text: str) -> tuple[int, int, int]:
    """(threads per block, dynamic shared bytes, global scratch bytes) from the PTX's header line."""
    found = re.search(r"block \((\d+), 1, 1\); dynamic shared bytes (\d+); global scratch bytes (\d+)\.", text)
    assert found, "the PTX's first line must state its launch"
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def run(name: str, kernel: str, grid, args, text: str | None = None, **options) -> list:
    """Launch golden `name` (or `text`) over `grid` with `args` and, for Triton's PTX, its two hidden scratch
    pointers: the global scratch sized per CTA as Triton's launcher allocates it."""
    text = text or (HERE / f"{name}.ptx").read_text()
    threads, shared, scratch = header(text)
    ctas = int(np.prod(grid))
    hidden = [np.zeros(scratch * ctas, np.uint8), np.zeros(0, np.uint8)] if "// Triton" in text else []
    return launch(text, kernel, grid, (threads, 1, 1), [*args, *hidden], shared_bytes=shared,
                  source=f"{name}.ptx", **options)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_vector_add_masks_an_odd_length(rng):
    n = 1001
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = run("vector_add", "add_kernel", 4, [x, y, np.full(n + 24, 7, np.float32)[:n], n])
    np.testing.assert_array_equal(out[2], x + y)


@pytest.mark.parametrize("programs", [7, 3])
def test_log_softmax_one_row_per_program_or_several(rng, programs):
    """exp and log are ex2.approx and lg2.approx after a multiply (Triton's tl.exp, tl.log): within their PTX
    ISA bounds, a few 2^-22 of the values here. 7 programs take a row each, 3 take rows p, p + 3, ..."""
    rows, cols, stride = 7, 100, 104
    x = rng.standard_normal((rows, stride)).astype(np.float32) * 4
    out = run("log_softmax", "log_softmax_kernel", programs, [np.zeros_like(x), x, stride, stride, rows, cols])
    xd = x[:, :cols].astype(np.float64)
    shifted = xd - xd.max(1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    np.testing.assert_allclose(out[0][:, :cols], want, rtol=0, atol=2e-6 * np.abs(want).max())
    assert not out[0][:, cols:].any()


def test_residual_add_and_layer_norm_forward(rng):
    rows, n, stride = 5, 300, 304
    bf16 = ml_dtypes.bfloat16
    x = (rng.standard_normal((rows, stride)) * 3 + 1).astype(bf16)
    r = rng.standard_normal((rows, stride)).astype(bf16)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = run("add_layer_norm_fwd", "add_layer_norm_fwd", rows,
              [x, r, np.zeros_like(x), np.zeros_like(x), w, b, np.zeros(rows, np.float32), np.zeros(rows, np.float32),
               stride, n, np.float32(1e-5)])
    s = x[:, :n].astype(np.float32) + r[:, :n].astype(np.float32)  # exact in f32
    np.testing.assert_array_equal(out[2][:, :n], s.astype(bf16))
    sd = s.astype(np.float64)
    mean, var = sd.mean(1), sd.var(1)
    np.testing.assert_allclose(out[6], mean, rtol=1e-5, atol=1e-6)
    rstd = 1 / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(out[7], rstd, rtol=approx.RSQRT_APPROX_RELATIVE_ERROR + 1e-5)  # rsqrt.approx
    y = (sd - mean[:, None]) * rstd[:, None] * w + b
    np.testing.assert_allclose(out[3][:, :n].astype(np.float64), y, rtol=2**-8, atol=2**-8 * np.abs(y).max())
    assert not out[3][:, n:].astype(np.float32).any() and not out[2][:, n:].astype(np.float32).any()


def layer_norm_bwd_inputs(rng, rows=9, n=100, groups=2):
    x, dy = rng.standard_normal((rows, n)).astype(np.float32), rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    mean, rstd = x.mean(1).astype(np.float32), (1 / np.sqrt(x.var(1) + 1e-5)).astype(np.float32)
    args = [np.zeros_like(x), dy, np.zeros((groups, n), np.float32), np.zeros((groups, n), np.float32), x, w,
            mean, rstd, np.zeros(2 * groups, np.int32), n, n]
    return args, (x, dy, w, mean, rstd)


def test_layer_norm_backward_sums_under_its_lock(rng):
    """The lock (`tl.atomic_cas` acquire, `tl.atomic_xchg` release) orders each group's plain load of its
    first-writer flag; the partial dW/dB go in with relaxed `tl.atomic_add`s under it; CTAs run last to first."""
    rows, n, groups = 9, 100, 2
    args, (x, dy, w, mean, rstd) = layer_norm_bwd_inputs(rng, rows, n, groups)
    out = run("layer_norm_bwd", "layer_norm_bwd_dx", rows, args, cta_order=list(range(rows))[::-1])
    xhat, wdy = (x - mean[:, None]) * rstd[:, None], w * dy
    c1, c2 = (xhat * wdy).sum(1, keepdims=True) / n, wdy.sum(1, keepdims=True) / n
    np.testing.assert_allclose(out[0], (wdy - (xhat * c1 + c2)) * rstd[:, None], rtol=1e-4, atol=1e-5)
    for got, part in ((out[2], dy * xhat), (out[3], dy)):
        np.testing.assert_allclose(got, [part[g::groups].sum(0) for g in range(groups)], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[8], [0] * groups + [1] * groups)  # locks released, every group written


def linear_case(rng, name, dtype, m, n, k):
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    programs = -(-m // 64) * -(-n // 64)  # BLOCK_SIZE_M = BLOCK_SIZE_N = 64
    out = run(name, "linear_kernel", programs, [x, w, bias, np.zeros((m, n), dtype), m, n, k, k, k, n])
    acc = x.astype(np.float64) @ w.astype(np.float64).T + bias
    return out[3].astype(np.float64), np.where(acc >= 0, acc, 0.01 * acc)


LINEARS = [("linear_f16", np.float16, 2e-3), ("linear_bf16", ml_dtypes.bfloat16, 8e-3)]


@pytest.mark.parametrize("name, dtype, tolerance", LINEARS)
def test_linear_layer_with_leaky_relu(rng, name, dtype, tolerance):
    """y = leaky_relu(x W^T + bias) on tutorial 03's grouped program ids (wgmma m64n64k16, two programs, the
    edge tile clipped): f16 with K divisible by 16 pipelines its loads through a 3-stage cp.async ring; bf16
    (K = 45) loads through registers under the K mask. The f32 accumulation's order is the kernel's, its
    rounding to 16 bits half an ulp (`tolerance`, relative)."""
    m, n, k = (100, 64, 48) if dtype == np.float16 else (64, 72, 45)
    got, want = linear_case(rng, name, dtype, m, n, k)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * np.abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("name, dtype, tolerance", LINEARS)
def test_linear_layer_over_a_grid_of_tiles(rng, name, dtype, tolerance):
    """2 x 3 tiles in groups of two rows of tiles, both edges partial, four K steps (6-8 s on the shared
    machine: every tile's reads overlap another's, each recorded for the race checks)."""
    got, want = linear_case(rng, name, dtype, 100, 136, 112 if dtype == np.float16 else 101)
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * np.abs(want).max())


def test_fp8_matmul_with_scales(rng):
    """e4m3 x e4m3 (wgmma .e4m3, exact products, f32 sums), per-tensor scales, bf16 out (half an ulp)."""
    m, n, k = 70, 48, 96
    f8 = ml_dtypes.float8_e4m3fn
    a = rng.standard_normal((m, k)).astype(f8)
    b = rng.standard_normal((k, n)).astype(f8)
    sa, sb = np.array([0.75], np.float32), np.array([1.5], np.float32)
    out = run("matmul_fp8", "low_precision_matmul", (2, 1, 1),
              [a, b, np.zeros((m, n), ml_dtypes.bfloat16), sa, sb, m, n, k])
    want = a.astype(np.float64) @ b.astype(np.float64) * (0.75 * 1.5)
    np.testing.assert_allclose(out[2].astype(np.float64), want, rtol=2**-8, atol=1e-6 * np.abs(want).max())


def test_int8_matmul_is_exact(rng):
    m, n, k = 70, 48, 96
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    unused = np.zeros(1, np.float32)  # the scales, which the int8 form does not read
    out = run("matmul_int8", "low_precision_matmul", (2, 1, 1), [a, b, np.zeros((m, n), np.int32), unused, unused, m, n,
                                                               k])
    np.testing.assert_array_equal(out[2], a.astype(np.int64) @ b.astype(np.int64))


def test_cumsum_sort_and_histogram(rng):
    rows, n, bins = 3, 117, 16
    x = rng.integers(-1000, 1000, (rows, n)).astype(np.int32)
    x[0, :4] = [2**31 - 1, 1, -5, 3]  # the scan wraps as int32 does
    out = run("scan_sort_hist", "scan_sort_hist", rows,
              [x, np.zeros_like(x), np.zeros((rows, 128), np.float32), np.zeros((rows, bins), np.int32), n])
    np.testing.assert_array_equal(out[1], np.cumsum(x, 1, dtype=np.int64).astype(np.uint64).astype(np.uint32)
                                  .view(np.int32).reshape(rows, n))
    f = np.full((rows, 128), np.inf, np.float32)
    f[:, :n] = x.astype(np.float32) * np.float32(0.5) - np.float32(3.0)
    np.testing.assert_array_equal(out[2], np.sort(f, 1))
    np.testing.assert_array_equal(out[3], [np.bincount(np.mod(np.fmod(r, bins), bins)[np.fmod(r, bins) >= 0],
                                                       minlength=bins) for r in x])


def f32_bits(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


def canonical(values) -> np.ndarray:
    """`values` as f32 arithmetic gives them: a NaN is the canonical NaN (`tessera.sm90.nan`)."""
    bits = f32_bits(values).copy()
    bits[np.isnan(np.asarray(values, np.float32))] = CANONICAL_NAN_BITS["f32"]
    return bits


def test_where_and_min_max_on_nans(rng):
    """`tl.where` (selp: a NaN passes with its payload), NaN tests (`x != x`: setp.num), `tl.maximum` (max.f32:
    a NaN operand loses), `propagate_nan=ALL` (max.NaN/min.NaN: the canonical NaN) and a block max over NaNs,
    bitwise."""
    n = 777
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    payloads = np.array([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    x[:8] = [*payloads, np.inf, -np.inf, np.nan, 1.0]
    y[:8] = [1.0, payloads[0], np.nan, -2.0, np.nan, 3.0, payloads[3], np.inf]
    y[300:310] = np.nan
    out = run("where_nan", "where_nan", 4, [x, y, np.zeros(7 * n, np.float32), n])[2].reshape(7, n)
    xn, yn = np.isnan(x), np.isnan(y)
    np.testing.assert_array_equal(f32_bits(out[0]), f32_bits(np.where(x > y, x, y)))
    np.testing.assert_array_equal(f32_bits(out[1]), f32_bits(np.where(xn, np.float32(0), x)))
    np.testing.assert_array_equal(f32_bits(out[2]), canonical(np.fmax(x, y)))
    np.testing.assert_array_equal(f32_bits(out[3]), canonical(np.where(xn | yn, np.nan, np.maximum(x, y))))
    np.testing.assert_array_equal(f32_bits(out[4]), canonical(np.where(xn | yn, np.nan, np.minimum(x, y))))
    np.testing.assert_array_equal(out[5], np.where(x < y, 1, -1) * np.where(x >= y, 2, 3))
    blocks = np.array([np.nanmax(x[i:i + 256]) for i in range(0, n, 256)], np.float32).repeat(256)[:n]
    with np.errstate(invalid="ignore"):  # 0 * inf
        np.testing.assert_array_equal(f32_bits(out[6]), canonical(blocks + np.float32(0) * x))


def test_math_functions(rng):
    """div_rn, sqrt_rn and fma are correctly rounded (bitwise); rsqrt and exp2 are rsqrt.approx/ex2.approx
    (within the PTX ISA's bounds, `tessera.sm90.approx`); erf and log1p are libdevice's polynomials (within the
    CUDA guide's ulps, `approx.STANDARD_FUNCTION_ULPS`)."""
    n = 1000
    x = rng.uniform(-6, 6, n).astype(np.float32)
    y = (rng.uniform(0.01, 9, n) * rng.choice([-1, 1], n)).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-30, 5.5]
    out = run("math_ops", "math_ops", 4, [x, y, np.zeros(7 * n, np.float32), n])[2].reshape(7, n)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    ax = np.abs(x) + np.float32(0.125)
    axd = ax.astype(np.float64)

    def within_ulps(got, exact, name):
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert (np.abs(got - exact) <= approx.STANDARD_FUNCTION_ULPS[name] * ulp).all(), name

    def within_relative(got, exact, instruction):
        assert (np.abs(got - exact) <= approx.approx_relative_error(instruction) * np.abs(exact)).all(), instruction

    within_relative(out[0], 1 / np.sqrt(axd), "rsqrt")
    within_ulps(out[1], np.array([math.erf(v) for v in xd]), "erff")
    within_ulps(out[2], np.log1p(axd), "log1pf")
    within_relative(out[3], np.exp2(xd), "ex2")
    np.testing.assert_array_equal(out[4], x / y)
    np.testing.assert_array_equal(out[5], np.sqrt(ax))
    np.testing.assert_array_equal(out[6], (xd * yd + axd).astype(np.float32))  # one rounding of an exact sum


def persistent_case(rng, text=None, m=192, n=128, k=128):
    """Tutorial 09's persistent matmul on `tl.make_tensor_descriptor` maps: 3 programs over 3 x 2 tiles of 64,
    two k-steps each. num_pid_m is odd: Triton's flattened loop computes the tile after a program's last one
    ahead of time, and with an even count its `tile_id % group_size_m` divides by zero there (a value the
    kernel never uses, which the executor refuses: the PTX ISA leaves it unspecified)."""
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    out = run("matmul_persistent_tma", "matmul_descriptor_persistent", 3,
              [a, b, np.zeros((m, n), np.float16), m, n, k], text=text)
    return out[2].astype(np.float64), a.astype(np.float64) @ b.T.astype(np.float64)


def test_persistent_matmul_on_device_built_tensor_maps(rng):
    """Each program zeroes a 128-byte map in shared memory, sets its fields with `tensormap.replace`, copies it
    to its global scratch with `tensormap.cp_fenceproxy` and acquires it (`fence.proxy.tensormap`) before its
    TMA loads and store use it; f16 out (half an ulp of f32 sums)."""
    got, want = persistent_case(rng)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_persistent_matmul_dividing_by_zero_ahead_of_its_last_tile_is_refused_by_name(rng):
    """With an even number of tile rows the flattened loop's look-ahead computes `tile_id % group_size_m` with a
    group of 0 rows past the last tile; PTX leaves the value unspecified and the executor refuses it, naming the
    instruction, its line and the thread, though the kernel never uses that value."""
    with pytest.raises(PtxExecutionError, match=r"matmul_persistent_tma\.ptx:559: error: rem\.s32: division by zero"):
        persistent_case(rng, m=128)


def persistent_text() -> str:
    return (HERE / "matmul_persistent_tma.ptx").read_text()


def test_tensor_map_used_without_its_acquire_fence_is_reported(rng):
    text = re.sub(r"^\s*@%p1 fence\.proxy\.tensormap::generic\.acquire\.gpu .*\n", "", persistent_text(), flags=re.M)
    assert text.count("fence.proxy.tensormap") == 0
    with pytest.raises(PtxHazardError, match=r"matmul_persistent_tma.ptx:\d+: error: cp\.async\.bulk\.tensor.*"
                                             r"tensor map at global address 0x[0-9a-f]+ that the tensormap "
                                             r"instruction at line 121 .* no fence\.proxy\.tensormap::generic"):
        persistent_case(rng, text)


def test_tensor_map_fields_the_executor_does_not_implement_are_refused(rng):
    text = checked(persistent_text()).replace(
        "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [ %rd10 + 0 ], 0x3;",
        "tensormap.replace.tile.swizzle_atomicity.shared::cta.b1024.b32 [ %rd10 + 0 ], 0x0;")
    with pytest.raises(PtxExecutionError, match=r":112: error: tensormap\.replace.*swizzle_atomicity is sm_100's"):
        persistent_case(rng, text)
    text = checked(persistent_text()).replace(
        "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [ %rd10 + 0 ], 0x6;",
        "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [ %rd10 + 0 ], 0xd;")
    with pytest.raises(PtxExecutionError, match=r"cp\.async\.bulk\.tensor.*has element type 13, which the PTX "
                                                 r"executor does not support"):
        persistent_case(rng, text)


def global_map_case(rng, c0, c1, text=None):
    """global_map.ptx (hand-written): a bf16 map built in place in global memory, its box at {c0, c1}."""
    rows, cols = 40, 56
    src = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    out = run("global_map", "global_map", 1, [np.zeros(128, np.uint8), src, np.zeros((16, 32), ml_dtypes.bfloat16),
                                               rows, cols, c0, c1], text=text)
    want = np.full((16, 32), np.nan, np.float32)
    part = src[max(c1, 0):c1 + 16, max(c0, 0):c0 + 32].astype(np.float32)
    want[max(-c1, 0):max(-c1, 0) + part.shape[0], max(-c0, 0):max(-c0, 0) + part.shape[1]] = part
    return out[2].astype(np.float32), want


@pytest.mark.parametrize("c0, c1", [(8, 16), (40, 30), (-8, -4)])
def test_tensor_map_changed_in_place_in_global_memory(rng, c0, c1):
    """`tensormap.replace.global` fields (bf16 = 10, OOB-NaN fill = 1), released and acquired with
    `fence.proxy.tensormap::generic`: the box inside the tensor, past its far corner and before its origin, the
    elements outside NaN."""
    got, want = global_map_case(rng, c0, c1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_tensor_map_changed_in_place_without_the_acquire_is_reported(rng):
    text = planted((HERE / "global_map.ptx").read_text(), "\tfence.proxy.tensormap::generic.acquire.gpu [%rd1], 128;\n",
                   "")
    with pytest.raises(PtxHazardError, match=r"global_map.ptx:59: error: cp\.async\.bulk\.tensor.*the tensormap "
                                             r"instruction at line 54 \(thread \(0, 0, 0\).*no fence\.proxy"):
        global_map_case(rng, 8, 16, text)


def test_tensor_map_changed_in_place_without_the_release_is_reported(rng):
    """The acquire alone does not make `tensormap.replace.global`'s writes visible to the tensor-map proxy: the
    writing thread's `fence.proxy.tensormap::generic.release` after them is the other half of the pattern."""
    text = planted((HERE / "global_map.ptx").read_text(), "\tfence.proxy.tensormap::generic.release.gpu;\n", "")
    with pytest.raises(PtxHazardError, match=r"global_map.ptx:59: error: cp\.async\.bulk\.tensor.*the tensormap "
                                             r"instruction at line 54 \(thread \(0, 0, 0\).*no fence\.proxy\.tensormap"
                                             r"::generic\.release of the writing thread after it"):
        global_map_case(rng, 8, 16, text)


def test_bad_device_tensor_maps_are_located_diagnostics(rng):
    """An ord past the field's entries (refused before running), a rank past 5 and a box past 256 elements
    (when a TMA uses the map: cuTensorMapEncodeTiled's rules), and a tensormap.cp_fenceproxy by half a warp."""
    text = (HERE / "global_map.ptx").read_text()
    edits = [("tensormap.replace.tile.box_dim.global.b1024.b32 [%rd4], 1, 16;",
              "tensormap.replace.tile.box_dim.global.b1024.b32 [%rd4], 5, 16;",
              r":50: error: tensormap\.replace.*box_dim's ord must be an immediate in \[0, 5\)"),
             ("tensormap.replace.tile.rank.global.b1024.b32 [%rd4], 1;",
              "tensormap.replace.tile.rank.global.b1024.b32 [%rd4], 7;",
              r":60: error: cp\.async\.bulk\.tensor.*has rank 8 \(tensormap\.replace\.rank is the rank minus one\)"),
             ("tensormap.replace.tile.box_dim.global.b1024.b32 [%rd4], 1, 16;",
              "tensormap.replace.tile.box_dim.global.b1024.b32 [%rd4], 1, 512;",
              r":60: error: cp\.async\.bulk\.tensor.*the tensor map at 0x[0-9a-f]+ \(built by tensormap\.replace\) is "
              r"invalid: boxDim")]
    for old, new, message in edits:
        with pytest.raises(PtxExecutionError, match=message):
            global_map_case(rng, 0, 0, planted(text, old, new))
    half_warp = planted(persistent_text(), "setp.lt.u32 \t%p1, %r7, 32;", "setp.lt.u32 \t%p1, %r7, 16;")
    with pytest.raises(PtxExecutionError, match=r":121: error: tensormap\.cp_fenceproxy.*\.sync\.aligned: every thread "
                                                 r"of the warp"):
        persistent_case(rng, half_warp)


def race_sides(message: str, text: str) -> tuple[str, str]:
    """The two instructions a race report names (the reporting one, the earlier one), as their lines' text."""
    lines = text.split("\n")
    here = int(re.search(r"\.ptx:(\d+): error", message)[1])
    there = int(re.search(r"the instruction at line (\d+)", message)[1])
    return lines[here - 1].strip(), lines[there - 1].strip()


def test_layer_norm_backward_lock_release_made_relaxed_is_a_race(rng):
    """The lock's release (`tl.atomic_xchg(Lock, 0)`, acq_rel) made relaxed: what the next holder reads under
    the lock is no longer ordered after what the last holder wrote under it (its plain load of the count, the
    first report, against the last holder's `tl.atomic_xchg(Count, 1)`)."""
    text = planted((HERE / "layer_norm_bwd.ptx").read_text(),
                   "@%p2 atom.global.gpu.acq_rel.exch.b32 %r72", "@%p2 atom.global.gpu.relaxed.exch.b32 %r72")
    args, _ = layer_norm_bwd_inputs(rng)
    with pytest.raises(PtxHazardError) as error:
        run("layer_norm_bwd", "layer_norm_bwd_dx", 9, args, text=text)
    message = str(error.value)
    assert "no synchronisation orders the two" in message, message
    here, there = race_sides(message, text)  # the next holder's read of the first-writer count, the last's write
    assert here.startswith("ld.global.b32") and "atom.global.gpu.acq_rel.exch.b32 %r70" in there, message


def test_a_counter_stored_under_the_lock_races_inside_its_program():
    """`count = tl.load(Count); tl.store(Count, count + 1)` under the lock, as users write it: Triton loads the
    scalar in every thread and stores it from thread 0 with no barrier between, so thread 0's store and the
    other threads' loads of its own program are unordered: a data race by the PTX memory model (the loaded
    values go unused), reported naming both sides. The sum itself is right (races off)."""
    text = (HERE / "locked_counter.ptx").read_text()
    with pytest.raises(PtxHazardError) as error:
        run("locked_counter", "locked_counter", 5, [np.zeros(1, np.int32), np.zeros(1, np.int32)])
    message = str(error.value)
    here, there = race_sides(message, text)
    assert here.startswith("@%p2 st.global.b32") and there.startswith("ld.global.b32"), message
    same_program = r"line 48 \(thread \(\d+, 0, 0\) of CTA \((\d), 0, 0\)\).*\(thread \(0, 0, 0\) of CTA \(\1, 0, 0\)\)"
    assert re.search(same_program, message), message
    out = run("locked_counter", "locked_counter", 5, [np.zeros(1, np.int32), np.zeros(1, np.int32)], races=False)
    assert out[0][0] == 0 and out[1][0] == 5


def test_log_softmax_without_a_barrier_between_its_reductions_is_a_race(rng):
    """The third `bar.sync` deleted: between the row max's cross-warp read of its scratch word and the sum's
    store into the same word."""
    text = (HERE / "log_softmax.ptx").read_text()
    lines = text.split("\n")
    barriers = [i for i, line in enumerate(lines) if line.strip() == "bar.sync \t0;"]
    del lines[barriers[2]]
    text = "\n".join(lines)
    x = rng.standard_normal((7, 104)).astype(np.float32)
    with pytest.raises(PtxHazardError) as error:
        run("log_softmax", "log_softmax_kernel", 3, [np.zeros_like(x), x, 104, 104, 7, 100], text=text)
    message = str(error.value)
    assert "no synchronisation orders the two" in message, message
    here, there = race_sides(message, text)  # the sum's store into the scratch, the max's read of it
    assert here.startswith("st.shared.b32") and there.startswith("ld.shared.b32"), message


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_lock_and_tensor_maps_under_the_adversarial_schedule(rng, seed):
    """The lock-protected layer norm backward and the persistent matmul with the ready lanes picked at random
    (`schedule="adversarial"`): the same results, no report."""
    args, (x, dy, w, mean, rstd) = layer_norm_bwd_inputs(rng)
    out = run("layer_norm_bwd", "layer_norm_bwd_dx", 9, args, schedule="adversarial", seed=seed)
    xhat = (x - mean[:, None]) * rstd[:, None]
    np.testing.assert_allclose(out[3], [dy[g::2].sum(0) for g in range(2)], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[2], [(dy * xhat)[g::2].sum(0) for g in range(2)], rtol=1e-5, atol=1e-5)
    a = rng.standard_normal((192, 128)).astype(np.float16)
    b = rng.standard_normal((128, 128)).astype(np.float16)
    got = run("matmul_persistent_tma", "matmul_descriptor_persistent", 3,
              [a, b, np.zeros((192, 128), np.float16), 192, 128, 128], schedule="adversarial", seed=seed)[2]
    want = a.astype(np.float64) @ b.T.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


TRITON_GOLDENS = sorted(p.stem for p in HERE.glob("*.ptx") if p.read_text().startswith("// Triton"))


@pytest.mark.slow
@pytest.mark.parametrize("name", TRITON_GOLDENS)
def test_goldens_are_what_triton_writes(name):
    """Where Triton 3.9 is installed (`pip install 'triton==3.9.*'`), tests/ptx_triton/build.py writes each
    golden again, the same text."""
    triton = pytest.importorskip("triton")
    if not triton.__version__.startswith("3.9"):
        pytest.skip(f"the goldens are Triton 3.9's, this is {triton.__version__}")
    import importlib.util

    spec = importlib.util.spec_from_file_location("ptx_triton_build", HERE / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.compile_ptx(name) == (HERE / f"{name}.ptx").read_text()


def test_every_golden_is_run():
    source = Path(__file__).read_text()
    assert {p.stem for p in HERE.glob("*.ptx")} == {name for name in re.findall(r'"(\w+)"', source)
                                                    if (HERE / f"{name}.ptx").exists()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in HERE.glob("*.ptx")))
def test_ptxas_accepts_each_golden(name, tmp_path):
    """Under every ptxas found (the CUDA 12 and 13 ones of the test and ptx extras, a system one)."""
    for ptxas in find_all_ptxas():
        command = [ptxas.path, "-arch=sm_90a", str(HERE / f"{name}.ptx"), "-o", str(tmp_path / "k.cubin")]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, f"{ptxas}: {result.stderr}"
