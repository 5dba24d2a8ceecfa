"""Kernels a user writes next with the column reductions (`tile.col_sum`, `tile.col_max`, `tile.col_min`: [M, N] ->
[1, N]) and the [1, N] column vector stored or added into a 1-D window (`tests/user_kernels/`): a column softmax
over rows of any length (a running max and a rescaled running sum), BatchNorm's per-channel statistics of a bf16
tensor (a 2-D grid adding partials atomically), a fused LayerNorm backward (dx, dgamma, dbeta), a per-channel FP8
scale and the scaled cast, a column argmax over row blocks (i32), column reductions of tiles made only of
broadcasts, column reductions in both branches of an scf.if inside a loop over column blocks, a GEMM whose epilogue
adds column sums and sums of squares of its output (and row sums), a column max inside its K loop, warp-specialized
(and with ping-pong consumers), a bf16 bias gradient through a warp-specialized TMA loop, Welford column statistics
at a large mean, per-batch channel sums of a 3-D tensor, 1-D windows reaching past either end of the tensor, column
partials added in block order under semaphores, and column sums written as bf16, as one row per block, and added
transposed into an [N, 1] column. Every kernel assembles with ptxas without a warning or a spill. What the lowering
does not hold (a 16-bit source, N not a wgmma N, tiles of fewer than 64 rows) is refused by name at its line.

Each runs through `tessera.launch` at the Tile level on a grid of shapes (M = 1 and M not a multiple of the
block, N a partial column block) against a float64 NumPy reference with a bound derived from its sums, and on one
shape at the target and PTX levels, bit for bit equal there (but for NaN payloads), and through `tessera-run
--level ptx --check`.

Found here: `tile.atomic_add ... transpose` of a value several threads hold (`_transposed_access` in
`passes/convert_tile_to_sm90/backward.py` took every thread's share as a full tile's): a [1, N] column vector
into an [N, 1] window stopped the CTA simulator with an IndexError and made the PTX executor add out of bounds,
and an [BM, 1] column into a [1, BM] window of a tensor of more rows added into rows 2, 4 and 6 of the tensor as
well. Both add each element once, from one of its holders, now. `tile.store_global_rows` of a column vector into
a 1-D window passed the verifier and stopped the Tile interpreter and the CTA simulator with IndexErrors: it is
refused where it is written. And a grid-wide total, each block's [1, 1] col_sum of its row sums added into one
element with `tile.atomic_add`, was refused below Tile IR: thread 0 adds it now.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera import passes
from tessera.ir.diagnostics import LocatedVerifyException
from tessera.passes.convert_tile_to_sm90 import LoweringError
from test_tile_col_reductions import _launch

USER_KERNELS = Path(__file__).resolve().parent / "user_kernels"
F32_U = 2.0**-24
EXP_TERM = 2.0**-21
"""A bound of one f32 tile.exp of a non-positive argument d, relative to 1, below Tile IR: ex2.approx's 2^-22 and
the rounding of d log2(e), |d| 2^-23 relative to exp(d), at most 2^-23 / e absolute (`tessera.validation.rounding`)."""


def _text(name: str) -> str:
    return (USER_KERNELS / f"{name}.mlir").read_text()


def _run(name: str, *arrays, level: str):
    out = _launch(_text(name), *arrays, level=level)
    return out if isinstance(out, tuple) else (out,)


def _lowered(name: str, *arrays):
    """The target and the PTX level's results, checked bit for bit equal; the target's returned."""
    target, ptx = _run(name, *arrays, level="target"), _run(name, *arrays, level="ptx")
    for a, b in zip(target, ptx):
        floats = a.dtype.kind == "f" or a.dtype.itemsize < 4  # f32, or bf16 / f16 / f8 (ml_dtypes)
        nan = np.isnan(a.astype(np.float32)) if floats else np.zeros(a.shape, bool)
        np.testing.assert_array_equal(nan, np.isnan(b.astype(np.float32)) if floats else nan)
        bits = f"u{a.dtype.itemsize}"  # the PTX executor's NaNs are canonical, the simulator's NumPy's
        np.testing.assert_array_equal(a.view(bits)[~nan], b.view(bits)[~nan])
    return target


def _sum_bound(terms: np.ndarray, extra: int = 0) -> np.ndarray:
    """Any f32 summation order of a column's terms (rows on axis 0), plus `extra` further additions (atomics)."""
    return (len(terms) + extra) * F32_U * np.abs(terms).sum(0) + 1e-30


LEVELS = ["tile", pytest.param("lowered", id="target-ptx")]


def _grid(shapes: list[tuple[int, int]], lowered: tuple[int, int]) -> list:
    """(rows, cols, level): every shape at Tile level, one at the target and PTX levels ("lowered")."""
    return [(*shape, "tile") for shape in shapes] + [pytest.param(*lowered, "lowered", id=f"{lowered}-target-ptx")]

# region column softmax


def _check_col_softmax(x: np.ndarray, y: np.ndarray, exact_exp: bool) -> None:
    e = np.exp(x - x.max(0).astype(np.float64))
    ref = e / e.sum(0)
    trips = -(-len(x) // 64)
    # each exp within EXP_TERM of 1 (none at Tile level), the sum of M terms and the trips' rescalings of it
    # relative, one rounding of the quotient
    term = 0.0 if exact_exp else EXP_TERM
    bound = term + ref * (len(x) * (F32_U + term) + 2 * trips * term) + F32_U
    assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.parametrize("rows, cols", [(1, 8), (63, 40), (130, 96), (200, 33)])
def test_column_softmax_over_any_rows(rows, cols):
    x = (np.random.default_rng(rows + cols).standard_normal((rows, cols)) * 4).astype(np.float32)
    x[:, 0] = np.arange(rows) * 10.0  # each row block's max beats the last: every trip rescales the sum
    _check_col_softmax(x, *_run("col_softmax_online", x, level="tile"), exact_exp=True)


def test_column_softmax_lowered():
    x = (np.random.default_rng(1).standard_normal((130, 40)) * 4).astype(np.float32)
    x[:, 0] = np.arange(130) * 10.0
    _check_col_softmax(x, *_lowered("col_softmax_online", x), exact_exp=False)

# endregion
# region BatchNorm statistics, LayerNorm backward, FP8 per-channel scale


def _check_batchnorm(x, s, q) -> None:
    xd = x.astype(np.float64)
    blocks = -(-len(x) // 64)
    assert s.shape == q.shape == (x.shape[1],)
    assert np.all(np.abs(s - xd.sum(0)) <= _sum_bound(xd, blocks))
    assert np.all(np.abs(q - (xd**2).sum(0)) <= _sum_bound(xd**2, blocks + 1))  # the square's rounding


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (100, 40), (200, 64)], (100, 40)))
def test_batchnorm_statistics_of_bf16(rows, cols, level):
    x = (np.random.default_rng(rows).standard_normal((rows, cols)) * 3 + 1).astype(ml_dtypes.bfloat16)
    got = _lowered("batchnorm_stats", x) if level == "lowered" else _run("batchnorm_stats", x, level="tile")
    _check_batchnorm(x, *got)


def _layernorm_inputs(rows: int, cols: int):
    rng = np.random.default_rng(rows * cols)
    x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    gamma = rng.standard_normal(cols).astype(np.float32)
    mean = x.astype(np.float64).mean(1).astype(np.float32)
    rstd = (1 / np.sqrt(x.astype(np.float64).var(1) + 1e-5)).astype(np.float32)
    return dy, x, gamma, mean, rstd


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (150, 48), (64, 64)], (150, 48)))
def test_layernorm_backward_fused(rows, cols, level):
    dy, x, gamma, mean, rstd = _layernorm_inputs(rows, cols)
    got = _lowered("layernorm_bwd_fused", dy, x, gamma, mean, rstd) if level == "lowered" else \
        _run("layernorm_bwd_fused", dy, x, gamma, mean, rstd, level="tile")
    dx, dg, db = got
    xh = (x.astype(np.float64) - mean[:, None]) * rstd[:, None]
    g = dy * gamma.astype(np.float64)
    ref_dx = rstd[:, None] * (g - xh * (xh * g).mean(1, keepdims=True) - g.mean(1, keepdims=True))
    # xhat and g two roundings each; the row means sums of N terms: dx within (N + 6) 2^-24 of its terms' size
    size = rstd[:, None] * (np.abs(g) + np.abs(xh) * (np.abs(xh * g)).mean(1, keepdims=True)
                            + np.abs(g).mean(1, keepdims=True))
    assert np.all(np.abs(dx - ref_dx) <= (cols + 6) * F32_U * size + 1e-30)
    blocks = -(-rows // 64)
    assert np.all(np.abs(dg - (dy * xh).sum(0)) <= _sum_bound(dy * xh, blocks + 3))  # xhat's and the product's
    assert np.all(np.abs(db - dy.astype(np.float64).sum(0)) <= _sum_bound(dy.astype(np.float64), blocks))


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 16), (150, 80)], (150, 80)))
def test_fp8_per_channel_scale_and_cast(rows, cols, level):
    """max and the scale's division are exact / correctly rounded at every level: the bytes are NumPy's."""
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-3, 3, cols))).astype(np.float32)
    q, scale = _lowered("fp8_channel_scale", x) if level == "lowered" else _run("fp8_channel_scale", x, level="tile")
    expected = np.float32(448.0) / np.maximum(np.abs(x).max(0), np.float32(1e-12))
    np.testing.assert_array_equal(scale, expected)
    np.testing.assert_array_equal(q.view(np.uint8), (x * expected).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))

# endregion
# region argmax, broadcasts, branches


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (200, 40), (64, 96)], (200, 40)))
def test_column_argmax_over_row_blocks(rows, cols, level):
    x = np.random.default_rng(rows).integers(-4, 5, size=(rows, cols)).astype(np.float32)  # ties across blocks
    index, value = _lowered("col_argmax_rows", x) if level == "lowered" else _run("col_argmax_rows", x, level="tile")
    np.testing.assert_array_equal(index, x.argmax(0))
    np.testing.assert_array_equal(value, x.max(0))


@pytest.mark.parametrize("level", LEVELS)
def test_column_reductions_of_broadcasts(level):
    rng = np.random.default_rng(5)
    r, c = rng.standard_normal(50).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    got = _lowered("col_broadcast_only", r, c) if level == "lowered" else _run("col_broadcast_only", r, c, level="tile")
    rows = np.zeros(64, np.float32)
    rows[:50] = r  # the [64] load reads 0 past M
    np.testing.assert_array_equal(got[0], (rows[:, None] + c).max(0))
    assert np.all(np.abs(got[1] - 64 * c.astype(np.float64)) <= 64 * F32_U * 64 * np.abs(c))
    np.testing.assert_array_equal(got[2], (rows[:, None] * c).min(0))
    np.testing.assert_array_equal(got[3], (np.arange(64)[:, None] * np.arange(32)).sum(0))
    np.testing.assert_array_equal(got[4], np.full(32, 32.0, np.float32))


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 24), (20, 40), (50, 72)], (50, 72)))
def test_column_reductions_in_branches_of_a_column_loop(rows, cols, level):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    extreme, count, first = _lowered("col_branches", x) if level == "lowered" else _run("col_branches", x, level="tile")
    np.testing.assert_array_equal(extreme, x.max(0) if rows > 32 else x.min(0))
    np.testing.assert_array_equal(count, (x > 0).sum(0))
    np.testing.assert_array_equal(first, x[0] + (x > 0).sum(0).astype(np.float32))

@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (200, 40), (129, 64)], (200, 40)))
def test_welford_column_statistics_at_a_large_mean(rows, cols, level):
    x = (np.random.default_rng(rows).standard_normal((rows, cols)) + 1000).astype(np.float32)
    mean, var = _lowered("welford_cols", x) if level == "lowered" else _run("welford_cols", x, level="tile")
    xd = x.astype(np.float64)
    # the block means: 64 f32 additions and a division; the merge's few roundings per trip, relative to the mean
    trips = -(-rows // 64)
    assert np.all(np.abs(mean - xd.mean(0)) <= (64 + 1 + 4 * trips) * F32_U * np.abs(xd).max(0))
    # M2: centred squares of |x - mean_b| (each within 2^-24 |x| + the mean's error), summed; a naive
    # E[x^2] - E[x]^2 in f32 would be off by about 1000^2 2^-24 = 0.06
    spread = np.abs(xd - xd.mean(0)).max(0) + (66 + 4 * trips) * F32_U * np.abs(xd).max(0)
    assert np.all(np.abs(var - xd.var(0)) <= 2 * spread * (66 + 4 * trips) * F32_U * np.abs(xd).max(0) + 1e-6)

# endregion
# region a GEMM epilogue's column statistics; column sums written three ways


@pytest.mark.parametrize("level", LEVELS)
def test_gemm_epilogue_with_column_statistics(level):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((100, 72)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((72, 48)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(48).astype(np.float32)
    arrays = (a, b, bias)
    y, db, sq, rs = _lowered("gemm_bias_colstats", *arrays) if level == "lowered" else \
        _run("gemm_bias_colstats", *arrays, level="tile")
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    ref = ad @ bd + bias
    size = np.abs(ad) @ np.abs(bd) + np.abs(bias)  # exact products; K + 1 f32 additions per element of Y
    assert np.all(np.abs(y - ref) <= (72 + 1) * F32_U * size)
    # Y's error, then 64 rows per block in f32 and two blocks' atomic adds
    assert np.all(np.abs(db - ref.sum(0)) <= (73 + 64 + 2) * F32_U * size.sum(0))
    assert np.all(np.abs(sq - (ref**2).sum(0)) <= (2 * 73 + 1 + 64 + 2) * F32_U * (size**2).sum(0))
    assert np.all(np.abs(rs - ref.sum(1)) <= (73 + 32 + 2) * F32_U * size.sum(1))


def _gemm_inputs():
    rng = np.random.default_rng(12)
    a = rng.standard_normal((100, 136)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((136, 64)).astype(ml_dtypes.bfloat16)
    return a, b, rng.standard_normal(64).astype(np.float32)


def _check_kloop_max(a, b, pk) -> None:
    """PK: the running max over the K steps of 64 of the first 128 rows' partial column sums (f32, K terms; the
    rows past M hold 0)."""
    ad, bd = np.zeros((128, a.shape[1])), b.astype(np.float64)
    ad[:len(a)] = a.astype(np.float64)[:128]
    steps = range(64, a.shape[1] + 64, 64)
    expected = np.max([(ad[:, :k] @ bd[:k]).max(0) for k in steps], axis=0)
    bound = np.max([(np.abs(ad[:, :k]) @ np.abs(bd[:k])).max(0) for k in steps], axis=0) * a.shape[1] * F32_U
    assert np.all(np.abs(pk - expected) <= bound)


@pytest.mark.parametrize("level", LEVELS)
def test_column_max_inside_a_warp_specialized_k_loop(level):
    a, b, bias = _gemm_inputs()
    text = _text("gemm_colmax_kloop")
    assert "setmaxnreg" in tessera.print_module(tessera.compile(tessera.parse_module(text, "k.mlir"), target="target"))
    *_, pk = _lowered("gemm_colmax_kloop", a, b, bias) if level == "lowered" else \
        _run("gemm_colmax_kloop", a, b, bias, level="tile")
    _check_kloop_max(a, b, pk)


def test_column_reductions_under_ping_pong_consumers():
    """warp-specialize{pingpong=true}: the two consumer warpgroups take turns at the wgmmas on named barriers; the
    col_max inside the loop and the epilogue's col_sums meet both of them at barrier 0 outside a turn."""
    a, b, bias = _gemm_inputs()
    pipeline = passes.DEFAULT_PIPELINE.replace("warp-specialize,", "warp-specialize{pingpong=true},")
    module = tessera.parse_module(_text("gemm_colmax_kloop"), "k.mlir")
    assert "bar.arrive 1, 256" in tessera.compile(module, target="ptx", pipeline=passes.allocated(pipeline))
    target = tessera.launch(module, a, b, bias, level="target", pipeline=pipeline)
    ptx = tessera.launch(module, a, b, bias, level="ptx", pipeline=passes.allocated(pipeline))
    for x, z in zip(target, ptx):
        np.testing.assert_array_equal(x, z)
    _check_kloop_max(a, b, target[-1])


def _check_partials(x: np.ndarray, s, p, tt) -> None:
    blocks = [x[i:i + 64].astype(np.float64) for i in range(0, len(x), 64)]
    sums = np.array([block.sum(0) for block in blocks])
    assert s.dtype == ml_dtypes.bfloat16 and s.shape == (x.shape[1],)
    # bf16 rounding (2^-8 relative: 8 significant bits) of the first block's f32 sum
    first = np.abs(s.astype(np.float64) - sums[0])
    assert np.all(first <= 2.0**-8 * np.abs(sums[0]) + _sum_bound(blocks[0]) * (1 + 2.0**-8))
    assert np.all(np.abs(p - sums) <= np.array([_sum_bound(block) for block in blocks]))
    assert tt.shape == (x.shape[1], 1)
    assert np.all(np.abs(tt[:, 0] - x.astype(np.float64).sum(0)) <= _sum_bound(x.astype(np.float64), len(blocks)))


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (100, 40), (130, 64)], (100, 40)))
def test_column_sums_as_bf16_as_block_rows_and_transposed(rows, cols, level):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    got = _lowered("col_partials_16bit", x) if level == "lowered" else _run("col_partials_16bit", x, level="tile")
    _check_partials(x, *got)

@pytest.mark.parametrize("level", LEVELS)
def test_per_batch_channel_sums_and_shifted_windows(level):
    """batch_channel_sums.mlir: [B, M, N] -> S, R [B, N] through a [1x32] window of row b and a 1-D window of row
    b; shifted_col_windows.mlir: 1-D windows starting before the tensor and reaching past its end."""
    x = np.random.default_rng(3).standard_normal((3, 100, 40)).astype(np.float32)
    run = (lambda name: _lowered(name, x)) if level == "lowered" else (lambda name: _run(name, x, level="tile"))
    s, r = run("batch_channel_sums")
    np.testing.assert_array_equal(s, r)
    assert np.all(np.abs(s - x.astype(np.float64).sum(1)) <= _sum_bound(x.astype(np.float64).swapaxes(0, 1), 1))
    shifted, added = run("shifted_col_windows")
    block = x[0, :64, :32].astype(np.float64)  # the window: 64 rows, 32 columns
    p = block.sum(0)
    assert np.all(np.abs(shifted[:29] - p[3:]) <= _sum_bound(block)[3:]) and np.all(shifted[29:] == 0)
    assert np.all(np.abs(added[3:35] - p) <= _sum_bound(block)) and np.all(added[:3] == 0) and np.all(added[35:] == 0)


@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (200, 72), (64, 64)], (200, 72)))
def test_bias_grad_of_bf16_through_a_warp_specialized_tma_loop(rows, cols, level):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    s, mx = _lowered("bias_grad_tma_bf16", x) if level == "lowered" else _run("bias_grad_tma_bf16", x, level="tile")
    xd = x.astype(np.float64)
    assert np.all(np.abs(s - xd.sum(0)) <= _sum_bound(xd, -(-rows // 64)))
    np.testing.assert_array_equal(mx, x.astype(np.float32).max(0))


ALL_KERNELS = ["col_softmax_online", "batchnorm_stats", "layernorm_bwd_fused", "fp8_channel_scale",
               "col_argmax_rows", "col_broadcast_only", "col_branches", "gemm_bias_colstats", "gemm_colmax_kloop",
               "col_partials_16bit", "welford_cols", "batch_channel_sums", "shifted_col_windows", "bias_grad_tma_bf16",
               "grid_total", "bias_grad_ordered"]


def test_assembles_without_warnings_or_spills(ptxas):
    from tessera.toolchain import compile_ptx

    for name in ALL_KERNELS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ptx = tessera.compile(tessera.parse_module(_text(name), name), target="ptx")
        result = compile_ptx(ptx, source_name=name, ptxas=ptxas)
        assert result.warnings == (), (name, result.warnings)
        assert not any(entry.spills for entry in result.entries.values()), name

@pytest.mark.parametrize("rows, cols, level", _grid([(1, 8), (130, 64), (300, 40)], (300, 40)))
def test_grid_wide_total_added_from_one_value_per_block(rows, cols, level):
    """grid_total.mlir: a [1, 1] tile (a [64, 1] column's col_sum) added into a [1] tensor by each block, once:
    before, tile.atomic_add of a [1, 1] tile was refused below Tile IR."""
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    (total,) = _lowered("grid_total", x) if level == "lowered" else _run("grid_total", x, level="tile")
    xd = x.astype(np.float64)
    # each block: 64 row sums of N terms then 64 of those, then the blocks' atomic adds
    assert abs(total[0] - xd.sum()) <= (cols + 64 + -(-rows // 64)) * F32_U * np.abs(xd).sum()

@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_column_partials_added_in_block_order(level):
    """bias_grad_ordered.mlir: semaphores order the blocks' atomic adds of [1, N] column vectors; the PTX
    executor's release/acquire checks see every block's adds (from its first row's threads) before its signal."""
    x = np.random.default_rng(25).standard_normal((300, 48)).astype(np.float32)
    (db,) = _run("bias_grad_ordered", x, level=level)
    xd = x.astype(np.float64)
    assert np.all(np.abs(db - xd.sum(0)) <= _sum_bound(xd, 5))
    if level != "tile":
        np.testing.assert_array_equal(db, *_run("bias_grad_ordered", x, level="target"))

# endregion
# region transposed adds of values several threads hold


def _transposed_add(value: str, window: str, dims: str) -> str:
    """X's corner window [value] loaded and added transposed into the [window] window at TT's corner."""
    v = f"!tile.tile<{value}xf32, register>"
    return f"""
builtin.module {{
  func.func @tadd(%X: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<M, N>}},
      %TT: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<{dims}>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %c0 = arith.constant 0 : index
    %xw = tile.view %X[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<{value}xf32, global>
    %x = tile.load %xw : !tile.tile<{value}xf32, global> -> {v}
    %tw = tile.view %TT[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<{window}xf32, global>
    tile.atomic_add %x, %tw transpose : {v}, !tile.tile<{window}xf32, global>
    func.return
  }}
}}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
@pytest.mark.parametrize("value, window, dims, shape", [
    ("1x64", "64x1", "N, 1", (1, 64)),    # a column vector into a column: was an IndexError / out of bounds
    ("1x32", "32x1", "N, 1", (1, 20)),    # ... whose window reaches past the tensor's end
    ("1x32", "32x1", "N, 4", (1, 32)),    # ... into column 0 of a wider tensor
    ("64x1", "1x64", "8, 64", (64, 1)),   # an [BM, 1] column into a row: added into rows 2, 4, 6 as well
])
def test_transposed_add_of_vectors_adds_each_element_once(value, window, dims, shape, level):
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    (out,) = (_launch(_transposed_add(value, window, dims), x, level=level),)
    expected = np.zeros_like(out)
    expected[:x.shape[1], :x.shape[0]] = x.T
    np.testing.assert_array_equal(out, expected)

# endregion
# region refusals below Tile IR


def _one_block(rows: int, cols: int, reduction: str) -> str:
    """One [rows, cols] tile of X, `reduction` (lines over %x giving a [1, cols] f32 %s), stored into S [N]."""
    t = f"!tile.tile<{rows}x{cols}xf32, register>"
    return f"""builtin.module {{
  func.func @one_block(%X: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<M, N>}},
      %S: !tile.tile<?xf32, global> {{tile.dims = #tile.dims<N>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %c0 = arith.constant 0 : index
    %xw = tile.view %X[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<{rows}x{cols}xf32, global>
    %x = tile.load %xw : !tile.tile<{rows}x{cols}xf32, global> -> {t}
{reduction.format(t=t)}
    %sw = tile.view %S[%c0] : !tile.tile<?xf32, global> -> !tile.tile<{cols}xf32, global>
    tile.store_global %s, %sw : !tile.tile<1x{cols}xf32, register>, !tile.tile<{cols}xf32, global>
    func.return
  }}
}}
"""


PLAIN = "    %s = tile.col_sum %x : {t} -> !tile.tile<1x{cols}xf32, register>"
F16 = ("    %h = tile.cast %x : {t} -> !tile.tile<64x64xf16, register>\n"
       "    %m = tile.col_min %h : !tile.tile<64x64xf16, register> -> !tile.tile<1x64xf16, register>\n"
       "    %s = tile.cast %m : !tile.tile<1x64xf16, register> -> !tile.tile<1x64xf32, register>")


@pytest.mark.parametrize("rows, cols, reduction, line, message", [
    (64, 64, F16, 9, "tile.col_min computes on f32 or i32 register tiles, and a f16 register tile is held packed"),
    (64, 12, PLAIN, 7, "register tiles need a column count that is a legal wgmma N (8..256 step 8), got 12"),
    (64, 264, PLAIN, 7, "register tiles need a column count that is a legal wgmma N (8..256 step 8), got 264"),
    (32, 64, PLAIN, 2, "register tiles have 32 rows; warpgroups take 64 rows each"),
])
def test_refused_by_name_below_tile_ir(rows, cols, reduction, line, message, tmp_path):
    """The Tile interpreter runs each; the lowering refuses it at its line, through the Python API and through
    tessera-run (exit 1, no traceback)."""
    text = _one_block(rows, cols, reduction.replace("{cols}", str(cols)))
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    np.testing.assert_allclose(_launch(text, x, level="tile"), x.sum(0) if "col_sum" in text else x.min(0),
                               rtol=1e-3, atol=1e-3)  # f16's rounding for the col_min
    with pytest.raises(LoweringError, match=rf"k.mlir:{line}:\d+: .*" + re.escape(message)):
        tessera.compile(tessera.parse_module(text, "k.mlir"), target="target")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "ptx",
                            "-d", f"M={rows}", "-d", f"N={cols}"])
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert f"k.mlir:{line}:" in result.stderr, result.stderr

def test_store_global_rows_of_a_column_vector_into_a_1d_window_is_refused_where_written():
    """Its columns are the window's elements, no rows to count: the Tile interpreter stopped with an IndexError
    and the lowering took it for a row vector (an IndexError in the CTA simulator)."""
    text = _one_block(64, 64, PLAIN.replace("{cols}", "64")).replace(
        "tile.store_global %s, %sw", "%c5 = arith.constant 5 : index\n    tile.store_global_rows %s, %sw, %c5")
    message = ("'tile.store_global_rows' op a column vector [1, N] goes into a 1-D window [N] by its columns, not its "
               "rows: store it with tile.store_global")
    with pytest.raises(LocatedVerifyException, match=r"k.mlir:11:5: .*" + re.escape(message)):
        tessera.parse_module(text, "k.mlir")

# endregion
# region tessera-run


@pytest.mark.parametrize("name, sizes", [("col_softmax_online", "M=130 N=40"), ("batchnorm_stats", "M=100 N=40"),
                                         ("gemm_bias_colstats", "M=100 N=48 K=72")])
def test_tessera_run_checks_at_ptx_level(name, sizes):
    sizes_args = [arg for size in sizes.split() for arg in ("-d", size)]
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(USER_KERNELS / f"{name}.mlir"),
                            "--level", "ptx", "--check", *sizes_args])
    assert result.returncode == 0 and ": ok" in result.stdout, result.stdout + result.stderr

# endregion
