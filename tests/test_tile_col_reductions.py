"""tile.col_sum / tile.col_max / tile.col_min ([M, N] -> [1, N]): the verifier, the Tile interpreter on a grid of
shapes against float64 NumPy (rows past M masked as a kernel masks them: 0 for a sum, -inf / +inf for max / min),
NaN and infinite columns, i32 (signed, the sum wrapping), and a slice lowered (two warpgroups, a warp-specialized
GEMM, an [BM, 1] column to a [1, 1] tile) at the target and PTX levels, bit for bit equal there and
ptxas-clean."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import inprocess
import tessera
from tessera.ir.diagnostics import LocatedVerifyException
from tessera.passes.convert_tile_to_sm90 import LoweringError

F32_U = 2.0**-24


def _stats_kernel(bm: int, bn: int, element: str = "f32") -> str:
    """Column sums, maxima and minima of X [M, N] over all its rows: one block per `bn` columns loops over row
    blocks of `bm`; rows past M are selected to 0 / the type's lowest / its highest before the reductions."""
    t = f"!tile.tile<{bm}x{bn}x{element}, register>"
    v = f"!tile.tile<1x{bn}x{element}, register>"
    g = f"!tile.tile<?x?x{element}, global>"
    zero = "0.0" if element == "f32" else "0"
    if element == "f32":
        fills = "\n".join(f"    %{name} = tile.fill {bits} : {tile}" for name, bits, tile in (
            ("lo", "0xFF800000", t), ("hi", "0x7F800000", t), ("x0", "0xFF800000", v), ("n0v", "0x7F800000", v)))
    else:  # past 2^24 an i32 fill is refused (it holds an f32): splat constants
        fills = "\n".join(
            f"    %{name}c = arith.constant {value} : i32\n    %{name} = tile.splat %{name}c : i32 -> {tile}"
            for name, value, tile in (("lo", -2**31, t), ("hi", 2**31 - 1, t), ("x0", -2**31, v), ("n0v", 2**31 - 1, v)))
    outs = ", ".join(f'%{name}: !tile.tile<1x?x{element}, global> {{tile.dims = #tile.dims<1, N>, tile.role = "out"}}'
                     for name in ("S", "MX", "MN"))
    stores = "\n".join(
        f"    %{name.lower()}w = tile.view %{name}[%c0, %n0] : !tile.tile<1x?x{element}, global> -> "
        f"!tile.tile<1x{bn}x{element}, global>\n"
        f"    tile.store_global %r#{k}, %{name.lower()}w : {v}, !tile.tile<1x{bn}x{element}, global>"
        for k, name in enumerate(("S", "MX", "MN")))
    return f"""
builtin.module {{
  func.func @col_stats(%X: {g} {{tile.dims = #tile.dims<M, N>}}, {outs})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(N, {bn})>}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cbm = arith.constant {bm} : index
    %cbn = arith.constant {bn} : index
    %b = tile.program_id x : index
    %n0 = arith.muli %b, %cbn : index
    %m = tile.dim %X[0] : {g}
    %mb = arith.ceildivui %m, %cbm : index
    %mt = tile.splat %m : index -> !tile.tile<{bm}xi32, register>
    %zero = tile.fill {zero} : {t}
    %s0 = tile.fill {zero} : {v}
{fills}
    %r:3 = scf.for %i = %c0 to %mb step %c1 iter_args(%s = %s0, %mx = %x0, %mn = %n0v) -> ({v}, {v}, {v}) {{
      %m0 = arith.muli %i, %cbm : index
      %xw = tile.view %X[%m0, %n0] : {g} -> !tile.tile<{bm}x{bn}x{element}, global>
      %x = tile.load %xw : !tile.tile<{bm}x{bn}x{element}, global> -> {t}
      %row = tile.iota rows offset %m0 : !tile.tile<{bm}xi32, register>
      %past = tile.cmp ge %row, %mt : !tile.tile<{bm}xi32, register>
      %xs = tile.select %past, %zero, %x : !tile.tile<{bm}xi1, register>, {t}
      %xl = tile.select %past, %lo, %x : !tile.tile<{bm}xi1, register>, {t}
      %xh = tile.select %past, %hi, %x : !tile.tile<{bm}xi1, register>, {t}
      %ps = tile.col_sum %xs : {t} -> {v}
      %px = tile.col_max %xl : {t} -> {v}
      %pn = tile.col_min %xh : {t} -> {v}
      %s1 = tile.add %s, %ps : {v}
      %mx1 = tile.element_max %mx, %px : {v}
      %mn1 = tile.element_min %mn, %pn : {v}
      scf.yield %s1, %mx1, %mn1 : {v}, {v}, {v}
    }}
{stores}
    func.return
  }}
}}
"""


def _launch(text: str, *arrays, level: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        return tessera.launch(tessera.parse_module(text, "k.mlir"), *arrays, level=level)


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """The same bits, but for a NaN's: the PTX executor gives f32 arithmetic's NaN results the hardware's
    canonical NaN (`tessera.sm90.nan`), the CTA simulator keeps NumPy's (an input's payload)."""
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(nan, np.isnan(b))
    np.testing.assert_array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan])


def _check_stats(x: np.ndarray, got) -> None:
    """Sums within M 2^-24 sum |x| of float64's (exact for i32, wrapped); max and min exact, NaN where the column
    holds one."""
    s, mx, mn = (np.asarray(a)[0] for a in got)
    if x.dtype == np.int32:
        np.testing.assert_array_equal(s, x.astype(np.int64).sum(0).astype(np.uint32).view(np.int32))
    else:
        exact = x.astype(np.float64).sum(0)
        bound = len(x) * F32_U * np.abs(x.astype(np.float64)).sum(0)
        finite = np.isfinite(exact)
        assert np.all(np.abs(s[finite] - exact[finite]) <= bound[finite])
        np.testing.assert_array_equal(s[~finite], exact[~finite].astype(np.float32))
    np.testing.assert_array_equal(mx, x.max(0))
    np.testing.assert_array_equal(mn, x.min(0))


# region verifier

VERIFY_CASES = [
    ("!tile.tile<64x64xf32, register> -> !tile.tile<1x32xf32, register>",
     "result must be the column vector [1, 64] (one entry per column), got [1, 32]"),
    ("!tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>",
     "result must be the column vector [1, 64] (one entry per column), got [64]"),
    ("!tile.tile<64x64xf32, register> -> !tile.tile<1x64xi32, register>",
     "result element type must match the source's"),
    ("!tile.tile<64xf32, register> -> !tile.tile<1x64xf32, register>", "source must be a 2-D [M, N] tile, got rank 1"),
    ("!tile.tile<64x64xf32, shared> -> !tile.tile<1x64xf32, register>", "source must be a register tile, got shared"),
    ("!tile.tile<64x64xi1, register> -> !tile.tile<1x64xi1, register>",
     "source must have a float or i32 element type, got i1"),
    ("!tile.tile<64x64xf8E4M3FN, register> -> !tile.tile<1x64xf8E4M3FN, register>",
     "an 8-bit float's only arithmetic is tile.mma"),
]


@pytest.mark.parametrize("op", ["col_sum", "col_max", "col_min"])
@pytest.mark.parametrize("types, message", VERIFY_CASES)
def test_verifier_names_the_op_and_the_rule(op, types, message):
    source, _ = types.split(" -> ")
    text = f"""builtin.module {{
  func.func @f(%x: {source}) {{
    %c = tile.{op} %x : {types}
    func.return
  }}
}}"""
    with pytest.raises(LocatedVerifyException, match=re.escape(f"'tile.{op}' op ") + ".*" + re.escape(message)):
        tessera.parse_module(text, "k.mlir")


def test_the_builder_infers_the_column_vector():
    from xdsl.dialects.builtin import f32
    from xdsl.ir import Block

    from tessera.dialects import tile
    from tessera.dialects.tile_types import MemSpace, TileType

    x = Block(arg_types=[TileType([37, 96], f32, MemSpace.REGISTER)]).args[0]
    op = tile.ColSumOp(x)
    assert op.result.type.get_shape() == (1, 96)
    op.verify()

# endregion
# region the Tile interpreter on a grid of shapes


@pytest.mark.parametrize("rows", [1, 37, 64, 130])
@pytest.mark.parametrize("cols", [8, 64, 96])
def test_tile_level_against_float64(rows, cols):
    x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 10).astype(np.float32)
    _check_stats(x, _launch(_stats_kernel(64, cols), x, level="tile"))


def test_tile_level_nan_inf_and_signed_zeros():
    x = np.random.default_rng(1).standard_normal((70, 64)).astype(np.float32)
    x[:, 3] = -np.inf                 # a column of -inf: max -inf, sum -inf
    x[5, 4] = np.nan                  # NaN wins max, min and sum
    x[:, 6] = np.inf
    x[:, 7], x[::2, 7] = 0.0, -0.0    # +0 is the larger zero, -0 the smaller
    x[:, 8] = -0.0
    s, mx, mn = _launch(_stats_kernel(64, 64), x, level="tile")
    _check_stats(x, (s, mx, mn))
    assert np.isnan(s[0, 4]) and np.isnan(mx[0, 4]) and np.isnan(mn[0, 4])
    assert not np.signbit(mx[0, 7]) and np.signbit(mn[0, 7]) and np.signbit(mx[0, 8])


def test_tile_level_i32_signed_and_wrapping():
    rng = np.random.default_rng(2)
    x = rng.integers(-2**31, 2**31, size=(130, 64), dtype=np.int64).astype(np.int32)
    x[:, 0] = 2**31 - 1               # the sum wraps (130 (2^31 - 1) mod 2^32)
    _check_stats(x, _launch(_stats_kernel(64, 64, "i32"), x, level="tile"))

# endregion
# region lowered: target and PTX


LOWERED = [(130, 100, 64, 96, "f32"), (100, 64, 128, 64, "f32"), (70, 64, 64, 64, "i32")]


@pytest.mark.parametrize("rows, cols, bm, bn, element", LOWERED)
def test_lowered_levels_agree_bit_for_bit_and_with_float64(rows, cols, bm, bn, element):
    """[64, 96] (N not a power of two; a second, partial column block), [128, 64] (two warpgroups, 8 warps through the scratch buffer) and i32."""
    rng = np.random.default_rng(rows + bm)
    if element == "i32":
        x = rng.integers(-2**31, 2**31, size=(rows, cols), dtype=np.int64).astype(np.int32)
    else:
        x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
        x[3, 5], x[:, 9] = np.nan, -np.inf
    text = _stats_kernel(bm, bn, element)
    target = _launch(text, x, level="target")
    ptx = _launch(text, x, level="ptx")
    for a, b in zip(target, ptx):
        _same_bits(a, b)
    _check_stats(x, target)


USER_KERNELS = Path(__file__).resolve().parent / "user_kernels"


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_column_softmax_and_argmax(level):
    """tests/user_kernels/col_softmax.mlir and col_argmax.mlir: a column vector from tile.col_max broadcast back
    onto the tile (sub, cmp eq), a tile.col_sum divided into it, an i32 tile.col_min of row indices (ties: the
    first row)."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((50, 100)) * 3).astype(np.float32)
    y = _launch((USER_KERNELS / "col_softmax.mlir").read_text(), x, level=level).astype(np.float64)
    e = np.exp(x - x.max(0).astype(np.float64))
    # ex2.approx per term and f32 column sums of 50 terms, relative to the largest value of the column (1)
    np.testing.assert_allclose(y, e / e.sum(0), rtol=0, atol=2.0**-19)
    ties = rng.integers(-3, 4, size=(50, 100)).astype(np.float32)
    index = _launch((USER_KERNELS / "col_argmax.mlir").read_text(), ties, level=level)
    np.testing.assert_array_equal(index[0], ties.argmax(0))


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_column_sums_added_into_a_1d_and_a_one_row_tensor(level):
    """tests/user_kernels/layernorm_dgamma.mlir: per row block, tile.atomic_add of [1x64] column sums into a 1-D
    window [64] (`columns_into_row`) and into a [1, 64] one."""
    rng = np.random.default_rng(7)
    dy, xh = rng.standard_normal((2, 200, 64)).astype(np.float32)
    dg, db = _launch((USER_KERNELS / "layernorm_dgamma.mlir").read_text(), dy, xh, level=level)
    assert dg.shape == (64,) and db.shape == (1, 64)
    p = dy.astype(np.float64) * xh
    # f32 products, then 200 terms summed in f32 in any order (blocks, atomics)
    np.testing.assert_array_less(np.abs(dg - p.sum(0)), 201 * F32_U * np.abs(p).sum(0) + 1e-30)
    np.testing.assert_array_less(np.abs(db[0] - dy.astype(np.float64).sum(0)),
                                 200 * F32_U * np.abs(dy.astype(np.float64)).sum(0) + 1e-30)


STORE_SHAPES = [
    ("tile.store_global", "!tile.tile<1x64xf32, register>", "!tile.tile<64xf32, global>", None),
    ("tile.atomic_add", "!tile.tile<1x64xf32, register>", "!tile.tile<64xf32, global>", None),
    ("tile.store_global", "!tile.tile<1x64xf32, register>", "!tile.tile<32xf32, global>",
     "value shape [1, 64] and window shape [32] must match"),
    ("tile.atomic_add", "!tile.tile<2x64xf32, register>", "!tile.tile<64xf32, global>",
     "value shape [2, 64] and window shape [64] must match"),
    ("tile.store_shared", "!tile.tile<1x64xf32, register>", "!tile.tile<64xf32, shared>",
     "value shape [1, 64] and destination shape [64] must match"),
]


@pytest.mark.parametrize("op, value, window, message", STORE_SHAPES)
def test_a_column_vector_stores_or_adds_into_a_1d_window_only(op, value, window, message):
    text = f"""builtin.module {{
  func.func @f(%v: {value}, %w: {window}) {{
    {op} %v, %w : {value}, {window}
    func.return
  }}
}}"""
    if message is None:
        tessera.parse_module(text, "k.mlir")
    else:
        with pytest.raises(LocatedVerifyException, match=re.escape(f"'{op}' op {message}")):
            tessera.parse_module(text, "k.mlir")


def _column_total_kernel() -> str:
    """sum(X) of X [M, 64] per 64-row block, through a row sum, an [64, 1] column and its col_sum to [1, 1]."""
    return """
builtin.module {
  func.func @block_total(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %T: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %r = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %c = tile.reshape %r : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
    %t = tile.col_sum %c : !tile.tile<64x1xf32, register> -> !tile.tile<1x1xf32, register>
    %tw = tile.view %T[%m0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<1x1xf32, global>
    tile.store_global %t, %tw : !tile.tile<1x1xf32, register>, !tile.tile<1x1xf32, global>
    func.return
  }
}
"""


def test_a_column_reduces_to_one_value_for_the_block():
    x = np.random.default_rng(4).standard_normal((100, 64)).astype(np.float32)
    got = {level: _launch(_column_total_kernel(), x, level=level)[::64, 0] for level in ("tile", "target", "ptx")}
    _same_bits(got["target"], got["ptx"])
    blocks = [x[i:i + 64].astype(np.float64) for i in range(0, 100, 64)]
    for level, totals in got.items():
        for block, total in zip(blocks, totals):
            assert abs(total - block.sum()) <= block.size * F32_U * np.abs(block).sum(), level


def _gemm_col_sum_kernel() -> str:
    """examples/gemm.mlir's C = A B, and colsum [1, N] += the column sums of each block's C (a fused bias
    gradient), through tile.atomic_add: pipelined and warp-specialized by the default pipeline (the col_sum's
    barrier counts the consumer warpgroups only)."""
    text = (Path(__file__).resolve().parent.parent / "examples" / "gemm.mlir").read_text()
    text = text.replace(
        '%C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})',
        '%C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},\n'
        '      %CS: !tile.tile<1x?xf32, global> {tile.dims = #tile.dims<1, N>, tile.role = "out"})')
    text = text.replace('tile.kernel = {kind = "gemm"}', 'tile.kernel = {kind = "custom"}')
    store = text.index("    tile.store_global")
    end = text.index("\n", store) + 1
    added = ("    %cs = tile.col_sum %acc_final : !tile.tile<128x128xf32, register> -> !tile.tile<1x128xf32, register>\n"
             "    %csw = tile.view %CS[%c0, %n0] : !tile.tile<1x?xf32, global> -> !tile.tile<1x128xf32, global>\n"
             "    tile.atomic_add %cs, %csw : !tile.tile<1x128xf32, register>, !tile.tile<1x128xf32, global>\n")
    return text[:end] + added + text[end:]


def test_a_warp_specialized_gemm_with_fused_column_sums():
    import ml_dtypes

    text = _gemm_col_sum_kernel()
    target_ir = tessera.print_module(tessera.compile(tessera.parse_module(text, "k.mlir"), target="target"))
    assert "setmaxnreg" in target_ir  # the producer warpgroup is there: the barrier must not wait for it
    rng = np.random.default_rng(5)
    a = rng.standard_normal((200, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 136)).astype(ml_dtypes.bfloat16)
    c_ref = a.astype(np.float64) @ b.astype(np.float64)
    got = {level: _launch(text, a, b, level=level) for level in ("target", "ptx")}
    # C: exact products summed in f32 over K = 64; its column sums: 128 rows in f32 per block, and the two blocks'
    # atomic adds: (64 + 128 + 2) 2^-24 sum_i sum_k |a_ik| |b_kj| at most
    bound = (64 + 128 + 2) * F32_U * (np.abs(a.astype(np.float64)).sum(0) @ np.abs(b.astype(np.float64)))
    for level, (c, cs) in got.items():
        np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-4)
        assert np.all(np.abs(cs[0] - c_ref.sum(0)) <= bound), level
    for lowered, printed in zip(got["target"], got["ptx"]):
        _same_bits(lowered, printed)


@pytest.mark.parametrize("kernel", ["stats", "gemm"])
def test_assembles_without_warnings(kernel, ptxas):
    from tessera.toolchain import compile_ptx

    text = _stats_kernel(128, 96) if kernel == "stats" else _gemm_col_sum_kernel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ptx = tessera.compile(tessera.parse_module(text, "k.mlir"), target="ptx")
    result = compile_ptx(ptx, source_name=kernel, ptxas=ptxas)
    assert result.warnings == (), "\n".join(map(str, result.warnings))
    for entry in result.entries.values():
        assert not entry.spills, f"{entry.name} spills: {entry}"


def test_a_16_bit_source_is_refused_by_name_below_tile_ir(tmp_path):
    """A bf16 register tile is held packed: its column sum is refused at its line (cast to f32 first), by the
    Python API and by tessera-run (exit 1, no traceback); the Tile interpreter computes it."""
    text = _stats_kernel(64, 64).replace(
        "      %ps = tile.col_sum %xs : !tile.tile<64x64xf32, register> -> !tile.tile<1x64xf32, register>",
        "      %xb = tile.cast %xs : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>\n"
        "      %pb = tile.col_sum %xb : !tile.tile<64x64xbf16, register> -> !tile.tile<1x64xbf16, register>\n"
        "      %ps = tile.cast %pb : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>")
    x = np.ones((10, 64), np.float32)
    assert _launch(text, x, level="tile")[0][0, 0] == 10
    line = 1 + text[:text.index("%pb = tile.col_sum")].count("\n")
    message = "tile.col_sum computes on f32 or i32 register tiles"
    with pytest.raises(LoweringError, match=rf"k.mlir:{line}:7: .*" + re.escape(message)):
        tessera.compile(tessera.parse_module(text, "k.mlir"), target="target")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "target",
                            "-d", "M=10", "-d", "N=64"])
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert f"k.mlir:{line}:7" in result.stderr and "Traceback" not in result.stderr, result.stderr

# endregion
