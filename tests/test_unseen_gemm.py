"""GEMM as its users write it next (unseen23g): shapes, tiles, numerics and arguments that tests/test_gemm_shapes.py
does not cover, each judged against this file's own float64 NumPy reference.

The reference and its tolerance (`expected`): the inputs are rounded to bf16/f16 first, as the kernel reads them;
a product of two such values is exact in f32 (8 + 8 or 11 + 11 significand bits), so the only error of the
K-term sum is its f32 additions, in any order at most K u sum_k |a_ik b_kj| (u = 2^-24, Higham's gamma_K), held
element by element; alpha scales it, and each epilogue term (the alpha scaling, C, the bias) adds one f32
rounding of the largest term. inf and NaN must sit where NumPy puts them.

Levels: the Tile interpreter for the grid of shapes, the CTA simulator and the PTX executor on a small slice."""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.ir.diagnostics import TesseraWarning
from tessera.kernels import gemm
from tessera.lowering.fallback import NoConfigurationFitsError
from tessera.passes.convert_tile_to_sm90 import LoweringError
from tessera.tools import tessera_opt, tessera_run

U = 2.0**-24
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}
LINEAR = Path(__file__).resolve().parent / "user_kernels" / "linear_relu_residual.mlir"


def operands(rng, m, n, k, layout="NN", dtype="bf16", draw=None):
    """A ([K, M] when transposed) and B ([N, K] when transposed), rounded to `dtype`."""
    ta, tb = LAYOUTS[layout]
    draw = draw or rng.standard_normal
    a = draw((k, m) if ta else (m, k)).astype(DTYPES[dtype])
    b = draw((n, k) if tb else (k, n)).astype(DTYPES[dtype])
    return a, b


def expected(a, b, layout="NN", alpha=1.0):
    """(alpha op(a) op(b) in float64, its element-wise tolerance: see the module docstring)."""
    ta, tb = LAYOUTS[layout]
    a, b = (np.asarray(x, np.float64) for x in (a, b))
    a, b = (a.T if ta else a), (b.T if tb else b)
    with np.errstate(invalid="ignore", over="ignore"):
        exact, magnitude = a @ b, np.abs(a) @ np.abs(b)
    scaled = abs(alpha) * magnitude
    return alpha * exact, scaled * a.shape[1] * U + (4 * U * scaled if alpha != 1 else 0.0)


def assert_matches(out, reference, tolerance):
    out = np.asarray(out, np.float64)
    assert out.shape == reference.shape
    special = ~np.isfinite(reference)
    assert np.array_equal(np.isnan(out), np.isnan(reference)), "NaN where NumPy has none, or none where it has"
    assert np.array_equal(out[special & ~np.isnan(reference)], reference[special & ~np.isnan(reference)])
    error = np.abs(out[~special] - reference[~special])
    assert (error <= tolerance[~special]).all(), f"max error {error.max():.3e}"


def launch(module, *arrays, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the default pipeline's fallback notes (the larger tiles)
        return tessera.launch(module, *arrays, level=level)


# region Shapes and layouts


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_at_the_sizes_cublas_users_hit(layout, rng):
    """200 and 1000 in every position (K = 1000 and K = 200: not multiples of the K block of 64), at the Tile level."""
    module = gemm(transpose_a=LAYOUTS[layout][0], transpose_b=LAYOUTS[layout][1])
    for m, n, k in ((200, 7, 1000), (1000, 65, 1), (63, 1000, 200), (129, 200, 65)):
        a, b = operands(rng, m, n, k, layout)
        assert_matches(launch(module, a, b, level="tile"), *expected(a, b, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gemv_m1_at_the_target_level(layout, rng):
    """M = 1 (a GEMV): one row of a 128-row block, K = 200 (three full K blocks and a partial one)."""
    module = gemm(transpose_a=LAYOUTS[layout][0], transpose_b=LAYOUTS[layout][1])
    a, b = operands(rng, 1, 129, 200, layout)
    for level in ("tile", "target"):
        assert_matches(launch(module, a, b, level=level), *expected(a, b, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_n8_on_the_narrowest_block(layout, rng):
    """N = 8 on block_n = 16 (the narrowest block the builder takes; B's tile of 32-byte rows), TMA for every
    layout, at the CTA simulator, and the TT layout in the PTX executor."""
    module = gemm(block_m=64, block_n=16, transpose_a=LAYOUTS[layout][0], transpose_b=LAYOUTS[layout][1])
    a, b = operands(rng, 72, 8, 136, layout)
    for level in ("target", "ptx") if layout == "TT" else ("target",):
        assert_matches(launch(module, a, b, level=level), *expected(a, b, layout))


@pytest.mark.parametrize("stages", [1, 3, 4])
def test_ring_stages_over_a_partial_last_k_block(stages, rng):
    """stages=N with K = 200: three full K blocks and a partial fourth, around a ring of 1, 3 or 4 stages."""
    a, b = operands(rng, 65, 24, 200)
    assert_matches(launch(gemm(block_m=64, block_n=64, stages=stages), a, b, level="target"), *expected(a, b))


def test_strided_and_column_major_arrays(rng):
    """Views a user slices out of larger arrays: every other column of A (a strided view) and B^T of a
    row-major array (a column-major view), read as the arrays they show, at the target level."""
    a, b = operands(rng, 70, 40, 144)
    a, b = a[:, ::2], np.ascontiguousarray(b[::2].T).T  # [70, 72] strided; [72, 40] column-major
    assert not a.flags.c_contiguous and b.flags.f_contiguous
    assert_matches(launch(gemm(), a, b, level="target"), *expected(a, b))


def test_a_cluster_over_a_single_m_block(rng):
    """cluster=(2, 1) with M = 100: one M block, so the second CTA of the cluster has no rows to compute."""
    a, b = operands(rng, 100, 64, 64)
    assert_matches(launch(gemm(cluster=(2, 1)), a, b, level="target"), *expected(a, b))


def test_runtime_gemm_batched_tt_f16_with_the_whole_epilogue(rng):
    """`tessera.gemm` as a training step calls it: 3-D f16 A^T and B^T (a batch of 3, M = 33, N = 17, K = 41:
    rows of 66 and 82 bytes, the ld.global kernel), alpha = 0.25, beta = -2 with C and a bias, at every level."""
    a = rng.standard_normal((3, 41, 33)).astype(np.float16)
    b = rng.standard_normal((3, 17, 41)).astype(np.float16)
    c, bias = rng.standard_normal((3, 33, 17)).astype(np.float32), rng.standard_normal(17).astype(np.float32)
    scaled, tolerance = (np.stack(x) for x in zip(*(expected(a[i], b[i], "TT", alpha=0.25) for i in range(3))))
    reference = scaled - 2.0 * c + bias
    tolerance = tolerance + 4 * U * (np.abs(scaled) + np.abs(2.0 * c) + np.abs(bias))  # C's and the bias's adds
    for level in ("tile", "target", "ptx"):
        out = tessera.gemm(a, b, transpose_a=True, transpose_b=True, alpha=0.25, beta=-2.0, c=c, bias=bias,
                           level=level)
        assert_matches(out, reference, tolerance)


# endregion
# region Tiles a CUTLASS user picks


@pytest.mark.parametrize("tiles", [(128, 256, 64), (64, 64, 64), (256, 128, 64), (64, 256, 32), (128, 128, 128)],
                         ids=lambda t: "x".join(map(str, t)))
def test_cutlass_tiles(tiles, rng):
    bm, bn, bk = tiles
    a, b = operands(rng, 70, 40, 72)
    assert_matches(launch(gemm(block_m=bm, block_n=bn, block_k=bk), a, b, level="target"), *expected(a, b))


@pytest.mark.parametrize("options, error, message", [
    (dict(block_n=8), ValueError, r"block_n must be a positive multiple of 16; got 8"),
    (dict(block_k=8), ValueError, r"block_k must be a positive multiple of 16; got 8"),
    (dict(block_m=32), LoweringError, r"register tiles have 32 rows; warpgroups take 64 rows each"),
    (dict(block_n=272), LoweringError, r"a legal wgmma N \(8\.\.256 step 8\), got 272"),
])
def test_tiles_no_kernel_has_are_refused_by_name(options, error, message):
    with pytest.raises(error, match=message):
        tessera.compile(gemm(**options))


@pytest.mark.parametrize("options, rows", [(dict(block_m=320), 320), (dict(block_m=64, block_n=64, block_k=512), 512)])
def test_tma_boxes_past_256_rows_are_refused_when_compiled(options, rows, rng, tmp_path, capsys):
    """Regression: gemm(block_m=320) (A's [320, 64] window) and gemm(block_k=512) (B's [512, 64]) compiled to PTX
    whose tensor maps cuTensorMapEncodeTiled refuses (boxDim <= 256), and only the launch said so. The copy is
    refused when lowered, located at it; the Tile level, which has no TMA, still runs the kernel."""
    module = gemm(**options)
    message = rf"a TMA box has at most 256 rows \(cuTensorMapEncodeTiled's boxDim\), this copy's has {rows}"
    with pytest.raises(LoweringError, match=message):
        tessera.compile(module)
    a, b = operands(rng, 70, 40, 72)
    with pytest.raises(LoweringError, match=message):
        launch(module, a, b, level="target")
    assert_matches(launch(module, a, b, level="tile"), *expected(a, b))
    path = tmp_path / "gemm.mlir"
    path.write_text(str(module))
    status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path), "-p", "default-pipeline",
                                               "-t", "ptx")
    assert status == 1 and "gemm.mlir:" in err and "a TMA box has at most 256 rows" in err


def test_a_wgmma_past_the_registers_at_entry_is_refused_by_name(tmp_path, capsys):
    """Regression: gemm(block_m=256, block_n=256) fell back to two stages without a producer warpgroup (512
    threads), 145 registers counted of 255, and ptxas stopped (C7602: 128 registers at .reqntid 512, 154 needed
    for its m64n256k16). Every configuration now refuses it, naming the wgmma, its line and the count."""
    message = r"a wgmma with N = 256 needs 154 registers per thread, more than the 128 each of 512 threads has at entry"
    with pytest.raises(NoConfigurationFitsError, match=message):
        tessera.compile(gemm(block_m=256, block_n=256))
    path = tmp_path / "gemm.mlir"
    path.write_text(str(gemm(block_m=256, block_n=256)))
    status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path), "-p", "default-pipeline",
                                               "-t", "ptx")
    assert status == 1 and f"(the wgmma at {path}:" in err, err


def test_without_setmaxnreg_the_budget_is_the_launch_bounds():
    """Regression: gemm(block_m=256, block_n=192, beta=1.0) was kept two stages without a producer warpgroup as
    "the largest configuration that fits" at 199 registers of 255, and ptxas spilled 176 bytes (128 a thread at
    512 threads). It is the spilling rung now, and its note says so."""
    with pytest.warns(TesseraWarning, match=r"compiled single-stage spilling .*: 199 registers per thread needed, 71 "
                                            r"past the 128 a thread can hold left to ptxas"):
        tessera.compile(gemm(block_m=256, block_n=192, beta=1.0), target="target")


@pytest.mark.usefixtures("ptxas")  # the test command installs it: without it this fails, never skips
@pytest.mark.parametrize("tiles", [(192, 256), (256, 192), (192, 192)], ids=lambda t: "x".join(map(str, t)))
def test_wide_tiles_of_many_warpgroups_assemble(tiles):
    """192 x 256 (warp-specialized, 512 threads, its wgmma needs 154 registers of 128: compiled two stages without
    a producer, 384 threads, 168), 256 x 192 (122 of 96 at 640 threads: without a producer, 512 threads, 128) and
    192 x 192 (warp-specialized, 122 of 128): each assembles without a spill."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tessera.compile(gemm(block_m=tiles[0], block_n=tiles[1]), target="cubin")
    entry = result.entry()
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0


# endregion
# region Numerics


@pytest.mark.parametrize("k, levels", [(8192, ("tile", "target")), (4099, ("target",)), (1024, ("ptx",))],
                         ids=["8192", "4099-ld.global", "1024-ptx"])
def test_long_k_accumulates_in_f32(k, levels, rng):
    """K = 8192 at M = N = 8 with positive inputs (no cancellation: the sum's rounding is all there is) in the
    Tile interpreter and the CTA simulator, K = 4099 (the ld.global kernel) in the simulator, and K = 1024 (16
    trips around the TMA ring) in the PTX executor, whose launches cost seconds at 8192."""
    a, b = operands(rng, 8, 8, k, draw=lambda shape: rng.uniform(0, 1, shape))
    for level in levels:
        assert_matches(launch(gemm(), a, b, level=level), *expected(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(70, 40, 72), (70, 41, 73)], ids=["tma", "ld.global"])
def test_inf_and_nan_propagate_as_numpy_propagates_them(dtype, shape, rng):
    """inf times a finite value, inf - inf, inf times 0 and a NaN give what NumPy gives, element by element; the
    zeros that fill partial tiles create no NaN (inf x a padded zero would)."""
    m, n, k = shape
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a[3, 5], a[10, 7] = np.inf, -np.inf      # rows 3 and 10: +-inf times B's rows 5 and 7
    a[20, :], a[20, 9], b[9, 4] = 0, np.inf, 0.0  # C[20, 4] = inf x 0 = NaN, the rest of row 20 +-inf
    a[30, 5], a[30, 6], b[5, 2], b[6, 2] = np.inf, np.inf, 1.0, -1.0  # C[30, 2] = inf - inf = NaN
    b[11, 30] = np.nan                        # column 30 NaN
    a, b = a.astype(DTYPES[dtype]), b.astype(DTYPES[dtype])
    reference = expected(a, b)
    assert np.isnan(reference[0][20, 4]) and np.isnan(reference[0][30, 2]) and np.isinf(reference[0][3, 0])
    for level in ("tile", "target"):
        assert_matches(launch(gemm(dtype), a, b, level=level), *reference)


def test_inf_and_nan_in_the_ptx_executor(rng):
    a, b = rng.standard_normal((65, 24)), rng.standard_normal((24, 9))
    a[0, 0], a[1, 1], b[2, 3] = np.inf, np.nan, -np.inf
    a, b = (x.astype(ml_dtypes.bfloat16) for x in (a, b))
    assert_matches(launch(gemm(), a, b, level="ptx"), *expected(a, b))


def test_f16_sums_past_the_f16_range_stay_finite(rng):
    """f16 inputs of 300: each product (90,000) and the sum (5.76e6) are past f16's 65,504; the f32 accumulator
    and output hold them exactly."""
    a, b = np.full((8, 64), 300.0, np.float16), np.full((64, 8), 300.0, np.float16)
    for level in ("tile", "target"):
        out = launch(gemm("f16"), a, b, level=level)
        assert out.dtype == np.float32 and (out == 64 * 300.0 * 300.0).all()


@pytest.mark.parametrize("alpha", [1e-40, 3e38, -0.0], ids=["subnormal", "overflowing", "negative-zero"])
def test_alpha_at_the_ends_of_f32(alpha, rng):
    """alpha subnormal in f32 (not flushed: the scale is mul.rn.f32, no .ftz), alpha whose products pass f32's
    largest value (inf where the float64 value rounds past it, as NumPy's float32 rounding gives) and -0.0
    (every element zero)."""
    a, b = operands(rng, 70, 40, 72)
    reference, tolerance = expected(a, b, alpha=alpha)
    with np.errstate(over="ignore"):  # past f32's range: inf, which is what is asked
        rounded = reference.astype(np.float32).astype(np.float64) if alpha > 1 else reference
    for level in ("tile", "target", "ptx"):
        out = launch(gemm(alpha=alpha), a, b, level=level)
        finite = np.isfinite(rounded)
        assert np.array_equal(out[~finite], rounded[~finite])
        assert (np.abs(out[finite] - reference[finite]) <= tolerance[finite] + 2.0**-149).all()
        if alpha == 1e-40:
            assert (out != 0).all()


# endregion
# region A GEMM with an epilogue written by hand


def linear_reference(a, w, s, r):
    """f16(relu((a w^T) s) + r) in float64 before the rounding, and the tolerance: the sum's bound scaled by s,
    four f32 roundings of the terms, half an f16 ulp (2^-11 relative) for the output's rounding."""
    exact, sum_bound = expected(a, w, "NT")
    x = exact * s[:, None]
    reference = np.maximum(x, 0) + r.astype(np.float64)
    terms = np.abs(x) + np.abs(r.astype(np.float64))
    return reference, sum_bound * s[:, None] + 4 * U * terms + 2.0**-11 * np.abs(reference) + 2.0**-25


@pytest.mark.parametrize("shape", [(70, 40, 72), (70, 41, 73)], ids=["tma", "ld.global"])
def test_linear_relu_residual_at_every_level(shape, rng):
    m, n, k = shape
    module = tessera.parse_module(LINEAR.read_text(), str(LINEAR))
    a, w = rng.standard_normal((m, k)).astype(np.float16), (rng.standard_normal((n, k)) / 4).astype(np.float16)
    s, r = rng.uniform(0.5, 2, m).astype(np.float32), rng.standard_normal((m, n)).astype(np.float16)
    reference = linear_reference(a, w, s, r)
    for level in ("tile", "target", "ptx"):
        out = launch(module, a, w, s, r, level=level)
        assert out.dtype == np.float16
        assert_matches(out, *reference)


def test_linear_relu_residual_checked_by_tessera_run(capsys):
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, str(LINEAR), "--level", "ptx",
                                                 "-d", "M=70", "-d", "N=41", "-d", "K=73", "--check")
    assert status == 0, err
    assert "Y[70, 41]" in out and ": ok (reference: its own Tile IR in float64)" in out


# endregion
# region Arguments


@pytest.mark.parametrize("level", ["tile", "target"])
@pytest.mark.parametrize("shapes, message", [
    (((0, 8), (8, 8)), r"input A of @gemm_bf16, dimension 0 \(M\): sizes must be positive, got 0"),
    (((8, 0), (0, 8)), r"input A of @gemm_bf16, dimension 1 \(K\): sizes must be positive, got 0"),
    (((8, 8), (8, 0)), r"input B of @gemm_bf16, dimension 1 \(N\): sizes must be positive, got 0"),
], ids=["M=0", "K=0", "N=0"])
def test_zero_sizes_are_refused_by_name(level, shapes, message):
    with pytest.raises(ValueError, match=message):
        tessera.launch(gemm(), *(np.zeros(s, np.float32) for s in shapes), level=level)


@pytest.mark.parametrize("module, arrays, message", [
    (gemm(), [(8, 9), (8, 8)], r"input B of @gemm_bf16, dimension 0 \(K\): 'K' is 9 elsewhere, got 8"),
    (gemm(), [(8,), (8, 8)], r"input A of @gemm_bf16 must have rank 2, got shape \(8,\)"),
    (gemm(), [(8, 8), (8, 8), (8, 8)], r"kernel @gemm_bf16 takes 2 inputs \(A, B\), got 3"),
    (gemm(beta=1.0), [(8, 8), (8, 8)], r"kernel @gemm_bf16_scaled takes 3 inputs \(A, B, C_in\), got 2"),
    (gemm(batch=True), [(2, 8, 8), (3, 8, 8)], r"input B of @gemm_bf16_batched, dimension 0 \(batch\): 'batch' is 2"),
], ids=["K", "rank", "count", "no C", "batch"])
def test_arrays_that_do_not_fit_are_refused_by_name(module, arrays, message):
    with pytest.raises(ValueError, match=message):
        tessera.launch(module, *(np.ones(s) for s in arrays), level="tile")


def test_epilogues_the_builder_does_not_offer_are_refused():
    """An activation or a 16-bit output is written by hand (tests/user_kernels/linear_relu_residual.mlir)."""
    with pytest.raises(TypeError, match="activation"):
        gemm(activation="relu")
    with pytest.raises(ValueError, match=r"dtype must be one of 'bf16', 'f16'; got 'f32'"):
        gemm(dtype="f32")


# endregion
