"""Kernels a user writes next, round 9: 16-bit row vectors and [1, 1] tiles below Tile IR (`tests/user_kernels/`).

The most common GEMM epilogue keeps its vectors in the checkpoint's precision: a bf16 or f16 per-column bias
broadcast with `tile.load_broadcast` (promised aligned, and at any N: a bias of 135 columns), a bf16 per-row scale
[M, 1] and an f16 per-row bias [M] read with `tile.load`, a bf16 per-column scale [1, N] read from a one-row tensor
and written back, a bf16 bias broadcast straight into a full [64, 64] tile, row statistics stored in bf16 and f16,
and per-tensor scales read from memory as [1, 1] tiles (bf16 from a [1, 1] tensor, f32 from a [1] one) multiplying
a [128, 64] accumulator and a column vector, their product stored as a [1, 1] bf16 by one block; and a bf16
per-column weight [1, N] scaled by a [1, 1] f32 in a kernel with no other tile. Each runs through
`tessera.launch` at the Tile, target and PTX levels against a float64 NumPy reference.

Before this round all of them ran at Tile level and were refused below it by name: row vectors, columns and column
vectors were f32, i32 or i1 only, and a [1, 1] tile did not have the block's rows. They lower now
(`passes/convert_tile_to_sm90/small_tiles.py`), and so does a bf16 bias broadcast from a one-row shared tile; the
ops whose meaning depends on where a value lies in the block (tile.iota) refuse a [1, 1] tile by name at their line.
A one-row shared tile of a tensor TMA cannot read stopped the compiler with a ZeroDivisionError; it is refused by
name (`tests/test_any_shape.py`). A kernel of column vectors [1, N] (and [1, 1] tiles) only, no tile with the
block's rows, stopped it with a ValueError; it runs on one warpgroup (`column_vector_scale`).

The default run takes each kernel at one level and the refusals; `-m slow` runs every kernel at every level on
every shape, and checks each with every ptxas found (no warning, no spill) and with `tessera-run --level ptx
--check`.
"""

from __future__ import annotations

import re
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.passes.convert_tile_to_sm90 import LoweringError
from text_edits import checked
from unseen_rounds import KERNELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F16 = np.float16


# region inputs and references: integers and eighths, every product and sum exact in f32

def _gemm(m, n, k, rng):
    return rng.integers(-3, 4, (m, k)).astype(BF16), (rng.integers(-8, 9, (k, n)) / 8).astype(BF16)


def _bias_inputs(dtype):
    def inputs(shape, rng):
        m, n, k = shape
        return [*_gemm(m, n, k, rng), (rng.integers(-64, 65, n) / 16).astype(dtype)], {}
    return inputs


def _bias_ref(a, b, bias):
    a, b, bias = f64(a, b, bias)
    return ((a @ b + bias).astype(BF16).astype(np.float64),)


def _row_scale_inputs(shape, rng):
    m, n, k = shape
    return [*_gemm(m, n, k, rng), (rng.integers(-16, 17, (m, 1)) / 8).astype(BF16),
            (rng.integers(-64, 65, m) / 16).astype(F16)], {}


def _row_scale_ref(a, b, s, r):
    a, b, s, r = f64(a, b, s, r)
    return (a @ b * s + r[:, None],)


def _scales_inputs(shape, rng):
    m, n, k = shape
    return [*_gemm(m, n, k, rng), (rng.integers(-64, 65, n) / 16).astype(np.float32),
            np.array([[-0.375]], BF16), np.array([2.5], np.float32)], {}


def _scales_ref(a, b, bias, sa, sb):
    a, b, bias, sa, sb = f64(a, b, bias, sa, sb)
    return ((a @ b + bias * sb[0]) * sa[0, 0], (sa * sb[0]).astype(BF16).astype(np.float64))


def _stats_inputs(shape, rng):
    (m,) = shape
    return [(rng.integers(-64, 65, (m, 64)) / 8).astype(np.float32)], {}


def _stats_ref(x):
    (x,) = f64(x)
    return (x.sum(1, keepdims=True).astype(BF16).astype(np.float64), x.max(1).astype(F16).astype(np.float64))


def _column_scale_inputs(shape, rng):
    m, n = shape
    return [(rng.integers(-64, 65, (m, n)) / 8).astype(BF16), (rng.integers(-16, 17, (1, n)) / 8).astype(BF16),
            (rng.integers(-64, 65, n) / 16).astype(BF16)], {}


def _column_scale_ref(x, w, b):
    x, w, b = f64(x, w, b)
    return ((x * w + b).astype(BF16).astype(np.float64), (2 * w).astype(BF16).astype(np.float64))

def _vector_scale_inputs(shape, rng):
    (n,) = shape
    return [(rng.integers(-64, 65, (1, n)) / 8).astype(BF16), np.array([[1.25]], np.float32)], {}


def _vector_scale_ref(w, s):
    w, s = f64(w, s)
    return (w * s[0, 0],)

# endregion


GEMM_SHAPES = ((70, 72, 64), (200, 136, 40), (1, 8, 8), (129, 64, 72))
ANY_GEMM_SHAPES = ((65, 135, 40), (1, 7, 3), (70, 72, 64), (131, 129, 17))

CASES = {
    # products of integers and eighths, sums of at most 72 of them, a bias in sixteenths: exact in f32, then one
    # bf16 rounding on both sides
    "gemm_bias_bf16": Case("gemm_bias_bf16", _bias_inputs(BF16), _bias_ref, 0.0, 0.0, GEMM_SHAPES),
    "gemm_bias_f16_any": Case("gemm_bias_f16_any", _bias_inputs(F16), _bias_ref, 0.0, 0.0, ANY_GEMM_SHAPES),
    # the same exact sums, times a scale in eighths, plus a bias in sixteenths: exact in f32
    "gemm_row_scale": Case("gemm_row_scale", _row_scale_inputs, _row_scale_ref, 0.0, 0.0, ANY_GEMM_SHAPES),
    "gemm_tensor_scales": Case("gemm_tensor_scales", _scales_inputs, _scales_ref, 0.0, 0.0,
                               ((130, 72, 64), (1, 7, 3), (257, 65, 40))),
    # sums of 64 values in eighths below 2^9: exact in f32, then one bf16 rounding; the max exact
    "row_stats_16bit": Case("row_stats_16bit", _stats_inputs, _stats_ref, 0.0, 0.0, ((70,), (1,), (129,))),
    # eighths times eighths plus sixteenths: exact in f32, then one bf16 rounding; 2 W exact
    "column_scale_bf16": Case("column_scale_bf16", _column_scale_inputs, _column_scale_ref, 0.0, 0.0,
                              ((70, 135), (1, 1), (129, 64), (3, 200))),
    # eighths times 1.25: exact
    "column_vector_scale": Case("column_vector_scale", _vector_scale_inputs, _vector_scale_ref, 0.0, 0.0,
                                ((135,), (1,), (64,))),
}

FAST = {"gemm_bias_bf16": ("ptx",), "gemm_bias_f16_any": ("target",), "gemm_row_scale": ("target",),
        "gemm_tensor_scales": ("ptx",), "row_stats_16bit": ("target",), "column_scale_bf16": ("target",),
        "column_vector_scale": ("ptx",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "gemm_bias_bf16": ["M=70", "N=72", "K=64"], "gemm_bias_f16_any": ["M=65", "N=135", "K=40"],
    "gemm_row_scale": ["M=70", "N=135", "K=40"], "gemm_tensor_scales": ["M=130", "N=72", "K=40"],
    "row_stats_16bit": ["M=70"], "column_scale_bf16": ["M=70", "N=135"], "column_vector_scale": ["N=135"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


def _launch(module, arrays, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        return tessera.launch(module, *arrays, level=level)


# region a bias through a one-row shared tile

_GLOBAL_BIAS = """    %biasw = tile.view %bias[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>
    %bh = tile.load_broadcast %biasw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>
    %bv = tile.cast %bh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>
    %y = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>"""


def _shared_bias_kernel(result: str) -> str:
    """gemm_bias_bf16 with its bias [1, N] copied into a one-row shared tile and broadcast from there, into a column
    vector [1, 64] or straight into a full [64, 64] bf16 tile."""
    text = checked((KERNELS / "gemm_bias_bf16.mlir").read_text()).replace(
        "%bias: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>}",
        "%bias: !tile.tile<1x?xbf16, global> {tile.dims = #tile.dims<1, N>}").replace(_GLOBAL_BIAS, f"""\
    %brow = tile.alloc_shared : !tile.tile<1x64xbf16, shared>
    %biasw = tile.view %bias[%c0, %n0] : !tile.tile<1x?xbf16, global> -> !tile.tile<1x64xbf16, global>
    tile.cp_async %biasw, %brow : !tile.tile<1x64xbf16, global>, !tile.tile<1x64xbf16, shared>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %bh = tile.load_broadcast %brow : !tile.tile<1x64xbf16, shared> -> !tile.tile<{result}xbf16, register>
    %bv = tile.cast %bh : !tile.tile<{result}xbf16, register> -> !tile.tile<{result}xf32, register>
    %y = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<{result}xf32, register>""")
    return text


@pytest.mark.parametrize("result", ("1x64", "64x64"))
def test_a_16_bit_bias_broadcast_from_a_one_row_shared_tile(result):
    """The bias row by TMA into shared memory, then each thread's pairs of columns one 32-bit word each."""
    module = tessera.parse_module(_shared_bias_kernel(result), "k.mlir")
    rng = np.random.default_rng(0)
    a, b = _gemm(70, 72, 64, rng)
    bias = (rng.integers(-64, 65, (1, 72)) / 16).astype(BF16)
    expected = _bias_ref(a, b, bias[0])[0]
    for level in ("tile", "target"):
        np.testing.assert_array_equal(_launch(module, [a, b, bias], level).astype(np.float64), expected)


# endregion
# region [1, 1] tiles where the block's rows matter


def _iota_scale_kernel() -> str:
    """gemm_tensor_scales with its scale plus the row coordinate of a [1, 1] tile (0 at Tile level)."""
    return checked((KERNELS / "gemm_tensor_scales.mlir").read_text()).replace(
        "    %y = tile.mul %x, %sa : !tile.tile<128x64xf32, register>, !tile.tile<1x1xf32, register>",
        "    %row = tile.iota rows : !tile.tile<1x1xi32, register>\n"
        "    %rowf = tile.cast %row : !tile.tile<1x1xi32, register> -> !tile.tile<1x1xf32, register>\n"
        "    %sa0 = tile.add %sa, %rowf : !tile.tile<1x1xf32, register>\n"
        "    %y = tile.mul %x, %sa0 : !tile.tile<128x64xf32, register>, !tile.tile<1x1xf32, register>")


def test_a_1x1_iota_runs_at_tile_level_and_is_refused_below_it(tmp_path):
    """tile.iota of a [1, 1] tile would give each thread its own rows: refused at its line, by the Python API and by
    the tools (exit 1, no traceback)."""
    text = _iota_scale_kernel()
    module = tessera.parse_module(text, "k.mlir")
    arrays, _ = _scales_inputs((70, 72, 64), np.random.default_rng(0))
    c, _ = _launch(module, arrays, "tile")
    np.testing.assert_array_equal(c.astype(np.float64), _scales_ref(*arrays)[0])
    line = 1 + text[:text.index("%row = tile.iota")].count("\n")
    message = ("a [1, 1] register tile is one value for the whole block, held by every thread: tile.iota of it is "
               "not supported below Tile IR")
    with pytest.raises(LoweringError, match=rf"k.mlir:{line}:5: .*" + re.escape(message)):
        tessera.compile(module, target="target")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "target",
                            "-d", "M=70", "-d", "N=72", "-d", "K=64"])
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert f"k.mlir:{line}:5" in result.stderr and "Traceback" not in result.stderr, result.stderr

# endregion


@pytest.mark.parametrize("dtype", ("f32", "f16"))
def test_a_1x1_scale_of_another_type(dtype):
    """gemm_tensor_scales with sa read from an f32 or f16 [1, 1] tensor: one element every thread loads (a 32-bit
    word, or 16 bits packed with itself)."""
    text = checked((KERNELS / "gemm_tensor_scales.mlir").read_text())
    sa_lines = text[text.index("%SA: "):text.index("\n", text.index("%SA: "))]
    load = text[text.index("    %saw = "):text.index("    %sbw = ")]
    cast = "" if dtype == "f32" else \
        f"    %sa = tile.cast %sah : !tile.tile<1x1x{dtype}, register> -> !tile.tile<1x1xf32, register>\n"
    text = text.replace(sa_lines, sa_lines.replace("xbf16", f"x{dtype}")).replace(load, f"""\
    %saw = tile.view %SA[%c0, %c0] : !tile.tile<1x1x{dtype}, global> -> !tile.tile<1x1x{dtype}, global>
    %sah = tile.load %saw : !tile.tile<1x1x{dtype}, global> -> !tile.tile<1x1x{dtype}, register>
{cast}""")
    if dtype == "f32":
        text = text.replace("%sah = tile.load", "%sa = tile.load")
    module = tessera.parse_module(text, "k.mlir")
    arrays, _ = _scales_inputs((130, 72, 64), np.random.default_rng(0))
    arrays[3] = arrays[3].astype({"f32": np.float32, "f16": F16}[dtype])
    expected = _scales_ref(*arrays)
    for level in ("tile", "target"):
        c, sc = _launch(module, arrays, level)
        np.testing.assert_array_equal(c.astype(np.float64), expected[0])
        np.testing.assert_array_equal(sc.astype(np.float64), expected[1])


def test_a_kernel_of_column_vectors_only():
    """No register tile has the block's rows (W + W of an f32 [1, N] row): it stopped convert-tile-to-sm90 with a
    ValueError from inside (`_block_rows` found no rows); it runs on one warpgroup."""
    text = checked((KERNELS / "column_vector_scale.mlir").read_text()).replace(
        "    %sw = tile.view %S[%c0, %c0] : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, global>\n"
        "    %s = tile.load %sw : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, register>\n"
        "    %v = tile.mul %s, %w : !tile.tile<1x1xf32, register>, !tile.tile<1x64xf32, register>",
        "    %v = tile.add %w, %w : !tile.tile<1x64xf32, register>")
    module = tessera.parse_module(text, "k.mlir")
    w, s = _vector_scale_inputs((135,), np.random.default_rng(0))[0]
    for level in ("tile", "target"):
        np.testing.assert_array_equal(_launch(module, [w, s], level), 2 * w.astype(np.float32))


# region the bias kernel as users vary it

_BIAS_LINES = ("    %biasw = tile.view %bias[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>\n"
               "    %bh = tile.load_broadcast %biasw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>\n"
               "    %bv = tile.cast %bh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>\n")


def _bias_variant(variant: str) -> str:
    """gemm_bias_bf16, varied: its bias read before the K loop; from column n0 + 1 (pairs at odd columns: one
    element a load even under the promise); from row 1 of a per-expert table [E, N]; or the result zeroed at columns
    >= a length read from memory as a [1, 1] i32."""
    text = checked((KERNELS / "gemm_bias_bf16.mlir").read_text())
    if variant == "before_loop":
        early = checked(text.replace(_BIAS_LINES, ""))
        return early.replace("    %zero = tile.fill", _BIAS_LINES + "    %zero = tile.fill")
    if variant == "odd_start":
        return text.replace("%biasw = tile.view %bias[%n0]", "%one = arith.constant 1 : index\n"
                            "    %n1 = arith.addi %n0, %one : index\n    %biasw = tile.view %bias[%n1]")
    if variant == "expert_row":
        return checked(text.replace("%bias: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>}",
                                    "%bias: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<E, N>}")).replace(
            "%biasw = tile.view %bias[%n0] : !tile.tile<?xbf16, global>",
            "%biasw = tile.view %bias[%c1, %n0] : !tile.tile<?x?xbf16, global>")
    return checked(text.replace("%bias: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>}",
                                "%bias: !tile.tile<?xbf16, global> {tile.dims = #tile.dims<N>},\n"
                                "      %L: !tile.tile<1x1xi32, global> {tile.dims = #tile.dims<1, 1>}")).replace(
        "    %y = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>", """\
    %y0 = tile.add %acc, %bv : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %lw = tile.view %L[%c0, %c0] : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, global>
    %l = tile.load %lw : !tile.tile<1x1xi32, global> -> !tile.tile<1x1xi32, register>
    %cols = tile.iota cols offset %n0 : !tile.tile<64x64xi32, register>
    %keep = tile.cmp lt %cols, %l : !tile.tile<64x64xi32, register>, !tile.tile<1x1xi32, register>
    %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %y = tile.select %keep, %y0, %z : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, \
!tile.tile<64x64xf32, register>""")


@pytest.mark.parametrize("variant", ("before_loop", "odd_start", "expert_row", "length"))
def test_the_bias_kernel_varied(variant):
    module = tessera.parse_module(_bias_variant(variant), "k.mlir")
    rng = np.random.default_rng(1)
    a, b = _gemm(70, 136, 64, rng)
    bias = (rng.integers(-64, 65, (3, 136)) / 16).astype(BF16)
    arrays = [a, b, bias if variant == "expert_row" else bias[0]]
    table = bias.astype(np.float64)
    row = {"odd_start": np.append(table[0, 1:], 0), "expert_row": table[1]}.get(variant, table[0])
    expected = f64(a)[0] @ f64(b)[0] + row
    if variant == "length":
        arrays.append(np.array([[50]], np.int32))
        expected[:, 50:] = 0
    for level in ("tile", "target"):
        got = _launch(module, arrays, level).astype(np.float64)
        np.testing.assert_array_equal(got, expected.astype(BF16).astype(np.float64))

# endregion


def test_a_bias_promised_aligned_loads_pairs_and_one_at_an_odd_column_elements():
    """Under tile.divisible N = 8 the bias's pairs start on 4 bytes: 32-bit words (and no 16-bit load anywhere in
    the kernel); from column n0 + 1 they do not: one ld.global.u16 an element."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligned = tessera.compile(tessera.parse_module((KERNELS / "gemm_bias_bf16.mlir").read_text()))
        odd = tessera.compile(tessera.parse_module(_bias_variant("odd_start")))
    assert "ld.global.u16" not in aligned and "ld.global.b32" in aligned
    assert "ld.global.u16" in odd


# region one value for the block carried by a loop, a 16-bit column from one element, a 16-bit row vector filled

LOOP_CARRIED_SCALE = """
builtin.module {
  func.func @k(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %S: !tile.tile<1x1xf32, global> {tile.dims = #tile.dims<1, 1>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %F: !tile.tile<1x1xbf16, global> {tile.dims = #tile.dims<1, 1>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %sw = tile.view %S[%c0, %c0] : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, global>
    %s = tile.load %sw : !tile.tile<1x1xf32, global> -> !tile.tile<1x1xf32, register>
    %one = tile.fill 1.0 : !tile.tile<1x1xf32, register>
    %t = scf.for %j = %c0 to %c3 step %c1 iter_args(%a = %one) -> (!tile.tile<1x1xf32, register>) {
      %a2 = tile.mul %a, %s : !tile.tile<1x1xf32, register>
      scf.yield %a2 : !tile.tile<1x1xf32, register>
    }
    %pos = tile.cmp gt %t, %one : !tile.tile<1x1xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %xt = tile.mul %x, %t : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>
    %y = tile.select %pos, %xt, %x : !tile.tile<1x1xi1, register>, !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %first = arith.cmpi eq, %b, %c0 : index
    scf.if %first {
      %f = tile.fill -1.5 : !tile.tile<1x1xbf16, register>
      %fw = tile.view %F[%c0, %c0] : !tile.tile<1x1xbf16, global> -> !tile.tile<1x1xbf16, global>
      tile.store_global %f, %fw : !tile.tile<1x1xbf16, register>, !tile.tile<1x1xbf16, global>
    }
    func.return
  }
}
"""


@pytest.mark.parametrize("scale", (1.5, 0.5))
def test_a_1x1_tile_carried_by_a_loop(scale):
    """t = s^3 by an scf.for carrying a [1, 1] tile, then Y = X t where t > 1 (a [1, 1] i1 condition), else X; and a
    bf16 [1, 1] constant stored by block 0."""
    module = tessera.parse_module(LOOP_CARRIED_SCALE, "k.mlir")
    x = (np.random.default_rng(0).integers(-64, 65, (130, 64)) / 8).astype(np.float32)
    t = scale**3
    for level in ("tile", "target"):
        y, f = _launch(module, [x, np.array([[scale]], np.float32)], level)
        np.testing.assert_array_equal(y, x * t if t > 1 else x)
        np.testing.assert_array_equal(f.astype(np.float32), [[-1.5]])


ELEMENT_AS_COLUMN = """
builtin.module {
  func.func @k(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %S: !tile.tile<1xbf16, global> {tile.dims = #tile.dims<1>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %R: !tile.tile<?xf16, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %sw = tile.view %S[%c0] : !tile.tile<1xbf16, global> -> !tile.tile<1xbf16, global>
    %sh = tile.load_broadcast %sw : !tile.tile<1xbf16, global> -> !tile.tile<64x1xbf16, register>
    %s = tile.cast %sh : !tile.tile<64x1xbf16, register> -> !tile.tile<64x1xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %y = tile.mul %x, %s : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %r = tile.fill 2.5 : !tile.tile<64xf16, register>
    %rw = tile.view %R[%m0] : !tile.tile<?xf16, global> -> !tile.tile<64xf16, global>
    tile.store_global %r, %rw : !tile.tile<64xf16, register>, !tile.tile<64xf16, global>
    func.return
  }
}
"""


def test_a_16_bit_element_broadcast_as_a_column_and_a_16_bit_row_vector_filled():
    """One bf16 element by tile.load_broadcast into a [64, 1] column (every thread loads it, packed with itself),
    and an f16 row vector [64] filled and stored into a 1-D output (each row once)."""
    module = tessera.parse_module(ELEMENT_AS_COLUMN, "k.mlir")
    x = (np.random.default_rng(0).integers(-64, 65, (70, 64)) / 8).astype(np.float32)
    for level in ("tile", "target"):
        y, r = _launch(module, [x, np.array([-0.75], BF16)], level)
        np.testing.assert_array_equal(y, x * -0.75)
        np.testing.assert_array_equal(r, np.full(70, 2.5, F16))

# endregion


# region column vectors of other widths

def _bias_width_kernel(bn: int, t: str) -> str:
    """X [M, N] f32 + a 16-bit bias [N] broadcast as a column vector [1, bn], which block row 0 also stores into
    B2 [1, N] (a column vector of the wgmma N bn: bn/8 packed registers a thread)."""
    return f"""builtin.module {{
  func.func @k(%X: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<M, N>}},
      %b: !tile.tile<?x{t}, global> {{tile.dims = #tile.dims<N>}},
      %Y: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<M, N>, tile.role = "out"}},
      %B2: !tile.tile<1x?x{t}, global> {{tile.dims = #tile.dims<1, N>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, {bn})>}} {{
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %cbn = arith.constant {bn} : index
    %bm = tile.program_id x : index
    %bb = tile.program_id y : index
    %m0 = arith.muli %bm, %c64 : index
    %n0 = arith.muli %bb, %cbn : index
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x{bn}xf32, global>
    %x = tile.load %xw : !tile.tile<64x{bn}xf32, global> -> !tile.tile<64x{bn}xf32, register>
    %bw = tile.view %b[%n0] : !tile.tile<?x{t}, global> -> !tile.tile<{bn}x{t}, global>
    %bh = tile.load_broadcast %bw : !tile.tile<{bn}x{t}, global> -> !tile.tile<1x{bn}x{t}, register>
    %bv = tile.cast %bh : !tile.tile<1x{bn}x{t}, register> -> !tile.tile<1x{bn}xf32, register>
    %y = tile.add %x, %bv : !tile.tile<64x{bn}xf32, register>, !tile.tile<1x{bn}xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x{bn}xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x{bn}xf32, register>, !tile.tile<64x{bn}xf32, global>
    %first = arith.cmpi eq, %bm, %c0 : index
    scf.if %first {{
      %b2w = tile.view %B2[%c0, %n0] : !tile.tile<1x?x{t}, global> -> !tile.tile<1x{bn}x{t}, global>
      tile.store_global %bh, %b2w : !tile.tile<1x{bn}x{t}, register>, !tile.tile<1x{bn}x{t}, global>
    }}
    func.return
  }}
}}"""


@pytest.mark.parametrize("bn, dtype", ((8, "bf16"), (24, "f16"), (256, "bf16")))
def test_16_bit_column_vectors_of_other_widths(bn, dtype):
    rng = np.random.default_rng(bn)
    x = (rng.integers(-64, 65, (70, 2 * bn + 3)) / 8).astype(np.float32)
    b = (rng.integers(-64, 65, 2 * bn + 3) / 16).astype({"bf16": BF16, "f16": F16}[dtype])
    module = tessera.parse_module(_bias_width_kernel(bn, dtype), "k.mlir")
    for level in ("tile", "target"):
        y, b2 = _launch(module, [x, b], level)
        np.testing.assert_array_equal(y, x + b.astype(np.float32))
        np.testing.assert_array_equal(b2[0], b)

# endregion


# region tile.store_global_rows of a row vector

def _first_rows_kernel(t: str) -> str:
    """Row sums of X [M, 64] (cast to t), only the first 10 rows of each block stored into the 1-D R [M]."""
    text = f"""builtin.module {{
  func.func @k(%X: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>}},
      %R: !tile.tile<?x{t}, global> {{tile.dims = #tile.dims<M>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %c10 = arith.constant 10 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %s = tile.row_sum %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sh = tile.cast %s : !tile.tile<64xf32, register> -> !tile.tile<64x{t}, register>
    %rw = tile.view %R[%m0] : !tile.tile<?x{t}, global> -> !tile.tile<64x{t}, global>
    tile.store_global_rows %sh, %rw, %c10 : !tile.tile<64x{t}, register>, !tile.tile<64x{t}, global>
    func.return
  }}
}}"""
    if t == "f32":
        return checked(text).replace(
            "%sh = tile.cast %s : !tile.tile<64xf32, register> -> !tile.tile<64xf32, register>",
            "%sh = tile.add %s, %s : !tile.tile<64xf32, register>")
    return text


@pytest.mark.parametrize("dtype", ("f32", "bf16"))
def test_the_first_rows_of_a_row_vector_into_a_1d_window(dtype):
    """tile.store_global_rows of a row vector [64] into a 1-D window: it stopped convert-tile-to-sm90 with an
    IndexError from inside (its row bound read the window's second-to-last index, which a 1-D window has not), in
    f32 too; now each row below min(M, row0 + 10) is written once."""
    module = tessera.parse_module(_first_rows_kernel(dtype), "k.mlir")
    x = np.ones((70, 64), np.float32)
    expected = np.zeros(70)
    expected[:10] = expected[64:70] = 128 if dtype == "f32" else 64
    for level in ("tile", "target"):
        np.testing.assert_array_equal(_launch(module, [x], level).astype(np.float64), expected)

# endregion


# region a 16-bit column of a table

def _table_column_kernel(col: int) -> str:
    """Y = X * S[:, col] by row, S [M, 5] bf16 (rows of 10 bytes), and T[:, col] = f16(S[:, col]): a 16-bit column
    [64, 1] read from and written to column `col` of a table."""
    return f"""builtin.module {{
  func.func @k(%X: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>}},
      %S: !tile.tile<?x5xbf16, global> {{tile.dims = #tile.dims<M, 5>}},
      %Y: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>, tile.role = "out"}},
      %T: !tile.tile<?x5xf16, global> {{tile.dims = #tile.dims<M, 5>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c0 = arith.constant 0 : index
    %cc = arith.constant {col} : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %sw = tile.view %S[%m0, %cc] : !tile.tile<?x5xbf16, global> -> !tile.tile<64x1xbf16, global>
    %sh = tile.load %sw : !tile.tile<64x1xbf16, global> -> !tile.tile<64x1xbf16, register>
    %s = tile.cast %sh : !tile.tile<64x1xbf16, register> -> !tile.tile<64x1xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %y = tile.mul %x, %s : !tile.tile<64x64xf32, register>, !tile.tile<64x1xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %t = tile.cast %s : !tile.tile<64x1xf32, register> -> !tile.tile<64x1xf16, register>
    %tw = tile.view %T[%m0, %cc] : !tile.tile<?x5xf16, global> -> !tile.tile<64x1xf16, global>
    tile.store_global %t, %tw : !tile.tile<64x1xf16, register>, !tile.tile<64x1xf16, global>
    func.return
  }}
}}"""


@pytest.mark.parametrize("col", (0, 3))
def test_a_16_bit_column_of_a_table(col):
    module = tessera.parse_module(_table_column_kernel(col), "k.mlir")
    rng = np.random.default_rng(0)
    x = (rng.integers(-64, 65, (70, 64)) / 8).astype(np.float32)
    s = (rng.integers(-16, 17, (70, 5)) / 8).astype(BF16)
    t = np.zeros((70, 5), F16)
    t[:, col] = s[:, col].astype(F16)
    for level in ("tile", "target"):
        y, got = _launch(module, [x, s], level)
        np.testing.assert_array_equal(y, x * s[:, col:col + 1].astype(np.float32))
        np.testing.assert_array_equal(got, t)

# endregion
