"""The elementwise Tile IR vocabulary (`dialects/tile_elementwise.py`): broadcasting rules, the Tile
interpreter's values against NumPy, and the same kernels lowered (convert-tile-to-sm90) and run in the CTA
simulator and, printed as PTX, in the PTX executor and under ptxas. The kernels of the gallery
(`examples/kernels/`: softmax, RMSNorm, a GEMM with soft-capping, SiLU and an iota mask, ALiBi with a sliding
window, and more) are checked at every level against NumPy in tests/test_gallery.py."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.ir.diagnostics import LocatedVerifyException
from tessera.dialects.tile_elementwise import broadcast_shape
from tessera.ir import parse_module
from tessera.sm90 import approx
from text_edits import checked, filled

KERNELS = Path(__file__).resolve().parent.parent / "examples" / "kernels"
LEVELS = ("tile", "target", "ptx")
F32_ULP = 2.0**-23


def _interpret(module, *inputs, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        return tessera.interpret(module, *inputs, level=level)


@pytest.mark.parametrize("shapes,expected", [
    ([(64, 32), (64, 32)], (64, 32)),
    ([(64, 32), (64,)], (64, 32)),
    ([(64,), (1, 32)], (64, 32)),
    ([(64, 1), (1, 32)], (64, 32)),
    ([(1, 32), (64, 32)], (64, 32)),
    ([(64,), (64,)], (64,)),
    ([(64, 32), (32,)], None),           # a 1-D operand is a row vector: [32] is not one of [64, 32]
    ([(64, 32), (64, 16)], None),
    ([(64,), (32,)], None),
    ([(2, 64, 32), (2, 64, 32)], None),  # register tiles of rank 3 do not broadcast
])
def test_broadcast_shapes(shapes, expected):
    assert broadcast_shape(shapes) == expected


# region every op in one kernel

EVERY_OP = """\
builtin.module {
  func.func @every_op(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %P: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %W: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},
      %O: !tile.tile<?xWIDTHxf32, global> {tile.dims = #tile.dims<M, WIDTH>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c3 = arith.constant 3 : index
    %c64 = arith.constant 64 : index
    %k20 = arith.constant 20 : i32
    %kmin = arith.constant -2147483648 : i32
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %pw = tile.view %P[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %p = tile.load %pw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %ww = tile.view %W[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
BODY
    func.return
  }
}
"""
T = "!tile.tile<64x64xf32, register>"
I = "!tile.tile<64x64xi32, register>"
ROW = "!tile.tile<64xf32, register>"
COL = "!tile.tile<1x64xf32, register>"
RESULTS = [
    # (Tile IR computing %rK, NumPy reference of X, P, W (float64; f32 where the IR rounds an intermediate),
    # relative tolerance of the lowered kernel against it: the documented bound of its approximations)
    (f"%rK = tile.exp %x : {T}", lambda x, p, w, i, j: np.exp(x), "exp"),
    (f"%rK = tile.exp2 %x : {T}", lambda x, p, w, i, j: np.exp2(x), approx.approx_relative_error("ex2") + F32_ULP),
    (f"%rK = tile.log2 %p : {T}", lambda x, p, w, i, j: np.log2(p), "lg2"),
    (f"%rK = tile.tanh %x : {T}", lambda x, p, w, i, j: np.tanh(x), approx.approx_relative_error("tanh")),
    (f"%rK = tile.sigmoid %x : {T}", lambda x, p, w, i, j: 1 / (1 + np.exp(-x)), "sigmoid"),
    (f"%rK = tile.silu %x : {T}", lambda x, p, w, i, j: x / (1 + np.exp(-x)), "sigmoid"),
    (f"%rK = tile.sqrt %p : {T}", lambda x, p, w, i, j: np.sqrt(p), F32_ULP / 2),
    (f"%rK = tile.rsqrt %p : {T}", lambda x, p, w, i, j: 1 / np.sqrt(p), approx.approx_relative_error("rsqrt")),
    (f"%rK = tile.reciprocal %x : {T}", lambda x, p, w, i, j: 1 / x, approx.approx_relative_error("rcp")),
    (f"%aK = tile.abs %x : {T}\n%rK = tile.neg %aK : {T}", lambda x, p, w, i, j: -np.abs(x), 0.0),
    (f"%mK = tile.row_max %x : {T} -> {ROW}\n%dK = tile.sub %x, %mK : {T}, {ROW}\n"
     f"%rK = tile.div %dK, %w : {T}, {COL}",
     lambda x, p, w, i, j: (x - x.max(1, keepdims=True)).astype(np.float32) / w, F32_ULP),
    (f"%mK = tile.row_max %x : {T} -> {ROW}\n%fK = tile.fill 3.0 : {ROW}\n%sK = tile.sub %mK, %fK : {ROW}\n"
     f"%nK = tile.element_min %x, %w : {T}, {COL}\n%rK = tile.element_max %nK, %sK : {T}, {ROW}",
     lambda x, p, w, i, j: np.maximum(np.minimum(x, w), x.max(1, keepdims=True) - 3), 0.0),
    (f"%iK = tile.iota rows offset %m0 : {I}\n%jK = tile.iota cols : !tile.tile<1x64xi32, register>\n"
     f"%dK = tile.sub %iK, %jK : {I}, !tile.tile<1x64xi32, register>\n%aK = tile.abs %dK : {I}\n"
     f"%tK = tile.splat %c3 : index -> {I}\n%uK = tile.splat %k20 : i32 -> {I}\n"
     f"%bK = tile.element_max %aK, %tK : {I}\n%cK = tile.element_min %bK, %uK : {I}\n"
     f"%eK = tile.mul %cK, %cK : {I}\n%gK = tile.neg %iK : {I}\n%hK = tile.add %eK, %gK : {I}\n"
     f"%rK = tile.cast %hK : {I} -> {T}",
     lambda x, p, w, i, j: np.minimum(np.maximum(np.abs(i - j), 3), 20) ** 2 - i, 0.0),
    # |-2^31| wraps to itself in i32 (one abs.s32 below Tile IR): odd rows times -2^31 are -2^31
    (f"%iK = tile.iota rows offset %m0 : {I}\n%kK = tile.splat %kmin : i32 -> {I}\n%pK = tile.mul %iK, %kK : {I}\n"
     f"%aK = tile.abs %pK : {I}\n%rK = tile.cast %aK : {I} -> {T}",
     lambda x, p, w, i, j: np.where(i % 2 == 1, -2.0**31, 0.0) + 0 * j, 0.0),
    (f"%qK = tile.cast %x : {T} -> {I}\n%rK = tile.cast %qK : {I} -> {T}", lambda x, p, w, i, j: np.trunc(x), 0.0),
    (f"%lK = tile.cmp lt %x, %w : {T}, {COL}\n%gK = tile.cmp ge %p, %x : {T}\n"
     f"%zK = tile.fill 0.0 : {T}\n%sK = tile.select %gK, %p, %zK : !tile.tile<64x64xi1, register>, {T}\n"
     f"%rK = tile.select %lK, %x, %sK : !tile.tile<64x64xi1, register>, {T}",
     lambda x, p, w, i, j: np.where(x < w, x, np.where(p >= x, p, 0.0)), 0.0),
]


def _every_op_module():
    lines = []
    for k, (body, _, _) in enumerate(RESULTS):
        lines += re.sub(r"%([a-z]+)K\b", rf"%\g<1>{k}", body).splitlines()
        lines += [f"%col{k} = arith.constant {64 * k} : index",
                  f"%ow{k} = tile.view %O[%m0, %col{k}] : !tile.tile<?xWIDTHxf32, global> -> !tile.tile<64x64xf32, global>",
                  f"tile.store_global %r{k}, %ow{k} : {T}, !tile.tile<64x64xf32, global>"]
    text = filled(EVERY_OP, BODY="\n".join("    " + line for line in lines))
    return parse_module(filled(text, WIDTH=str(64 * len(RESULTS))))


def _every_op_inputs(m: int):
    rng = np.random.default_rng(5)
    x = rng.uniform(-6, 6, (m, 64)).astype(np.float32)
    p = np.exp2(rng.uniform(-20, 20, (m, 64))).astype(np.float32)
    p[0, :4] = x[0, :4] = [0.5, 1.0, 2.0, 3.0]  # p >= x compares equal somewhere
    w = (rng.choice([-1, 1], 64) * rng.uniform(0.5, 2, 64)).astype(np.float32)
    return x, p, w


@pytest.mark.parametrize("level", LEVELS)
def test_every_op_against_numpy(level):
    """All ops at once (one kernel, 100 rows: a partial second block), each result in its own 64 columns."""
    m = 100
    x, p, w = _every_op_inputs(m)
    out = _interpret(_every_op_module(), x, p, w, level=level)
    i, j = np.arange(m)[:, None], np.arange(64)[None, :]
    args = [a.astype(np.float64) for a in (x, p, w)] + [i, j]
    for k, (body, reference, tolerance) in enumerate(RESULTS):
        got = out[:, 64 * k: 64 * k + 64].astype(np.float64)
        expected = reference(*args)
        if tolerance == "lg2":
            bound = approx.lg2_approx_error_bound(p) + F32_ULP * np.abs(expected)
        elif tolerance in ("exp", "sigmoid"):
            # ex2.approx of f32(x log2 e): the product's rounding moves the exponent by up to |x| 2^-24; then
            # 1 + e, rcp.approx and SiLU's multiply round once more each (sigmoid)
            relative = approx.approx_relative_error("ex2") + np.abs(args[0]) * 2.0**-24
            if tolerance == "sigmoid":
                relative += approx.approx_relative_error("rcp") + 3 * 2.0**-24
            bound = relative * np.abs(expected)
        else:
            bound = tolerance * np.abs(expected)
        if level == "tile":  # the exact function rounded once to f32
            bound = np.maximum(bound, 0) if tolerance == 0.0 else F32_ULP / 2 * np.abs(expected) * 1.01
        err = np.abs(got - expected)
        assert (err <= bound).all(), f"{body.splitlines()[-1]}: max error {err.max()} at {np.unravel_index(err.argmax(), err.shape)}"

# endregion
# region the every-op kernel lowered


def test_lowered_kernel_verifies():
    """The Target IR of the every-op kernel verifies after the full pipeline (upstream ops keep their scalar-only
    constraints: vector conversions are sm90.cvt)."""
    module = _every_op_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tessera.ir.verify(tessera.compile(module, target="target"))


def test_every_op_assembles(ptxas):
    from tessera.toolchain import compile_ptx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        ptx = tessera.compile(_every_op_module(), target="ptx")
    result = compile_ptx(ptx, source_name="every_op", ptxas=ptxas)
    assert result.warnings == (), "\n".join(map(str, result.warnings))
    for entry in result.entries.values():
        assert not entry.spills, f"{entry.name} spills: {entry}"

# endregion
# region refusals


_PACKED = "!tile.tile<64x64x{t}, register>"
_ON_PACKED = {  # an op computing on the 16-bit cast of softmax.mlir's %e (its row sums %s at hand)
    "tile.add": "%h2 = tile.add %h, %h : {p}",
    "tile.select": "%c = tile.cmp gt %e, %e : !tile.tile<64x64xf32, register>\n"
                   "%h2 = tile.select %c, %h, %h : !tile.tile<64x64xi1, register>, {p}",
    "tile.scale": "%h2 = tile.scale %h by 2.0 : {p}",
    "tile.fma": "%h2 = tile.fma %h, %h, %h : {p}",
    "tile.exp_diff": "%h2 = tile.exp_diff %h, %h : {p}",
    "tile.mul_rows": "%h2 = tile.mul_rows %h, %s : {p}, !tile.tile<64xf32, register>",
    "tile.div_rows": "%h2 = tile.div_rows %h, %s : {p}, !tile.tile<64xf32, register>",
    "tile.exp_subtract": "%h2 = tile.exp_subtract %h, %s : {p}, !tile.tile<64xf32, register>",
}


@pytest.mark.parametrize("element", ["bf16", "f16"])
@pytest.mark.parametrize("name", _ON_PACKED)
def test_lowering_refuses_arithmetic_on_packed_tiles_by_name(name, element):
    """Regression: a 16-bit register tile is held packed, two elements to a register, and only tile.add and the
    other binary ops were refused on it; tile.scale and tile.fma were lowered as f32 arithmetic on the packed
    registers (silently wrong numbers in the CTA simulator), tile.select, tile.mul_rows, tile.div_rows,
    tile.exp_diff and tile.exp_subtract stopped the CTA simulator with a NumPy error and the PTX printer with an
    error about Target IR. Each is now refused at its line, and runs at Tile level."""
    packed = _PACKED.format(t=element)
    body = _ON_PACKED[name].format(p=packed)
    text = checked((KERNELS / "softmax.mlir").read_text()).replace(
        "%y = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>",
        f"%h = tile.cast %e : !tile.tile<64x64xf32, register> -> {packed}\n{body}\n"
        f"%y = tile.cast %h2 : {packed} -> !tile.tile<64x64xf32, register>")
    module = parse_module(text, "k.mlir")
    x = np.random.default_rng(0).standard_normal((70, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tessera.launch(module, x, level="tile").shape == (70, 64)
    line = 1 + text.splitlines().index(body.splitlines()[-1])
    with pytest.raises(Exception, match=rf"k.mlir:{line}:1: .*{name} computes on f32 or i32 register tiles, and a "
                                        rf"{element} register tile is held packed, 2 elements to a 32-bit register: "
                                        "tile.cast it to f32 first"):
        tessera.compile(module, target="target")


@pytest.mark.parametrize("shape", ("1x1", "1"))
def test_one_value_for_the_block(shape):
    """One value for the whole block: a [1, 1] tile runs at every level (every thread holds it: small_tiles.py); a
    1-D [1] tile runs at Tile level and is refused below it at its line, naming the [1, 1] tile to write instead
    (it was refused at the kernel's line, as every register tile but a column vector [1, N] has the block's rows)."""
    text = checked((KERNELS / "softmax.mlir").read_text()).replace(
        "%y = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>",
        f"%half = tile.fill 0.5 : !tile.tile<{shape}xf32, register>\n"
        "%y0 = tile.div %e, %s : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>\n"
        f"%y = tile.mul %y0, %half : !tile.tile<64x64xf32, register>, !tile.tile<{shape}xf32, register>")
    module = parse_module(text, "k.mlir")
    x = np.random.default_rng(0).standard_normal((70, 64)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    levels = ("tile", "target") if shape == "1x1" else ("tile",)
    for level in levels:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = tessera.launch(module, x, level=level)
        np.testing.assert_allclose(y, 0.5 * e / e.sum(1, keepdims=True), rtol=1e-5)
    if shape == "1":
        line = 1 + text[:text.index("%half = tile.fill")].count("\n")
        with pytest.raises(Exception, match=rf"k.mlir:{line}:5: .*register tiles must all have the same number of "
                                            r"rows .*!tile.tile<1xf32, register> has 1, others 64; one value for the "
                                            r"whole block is a \[1, 1\] tile"):
            tessera.compile(module, target="target")


def test_verifier_refuses_non_broadcasting_shapes():
    text = ("func.func @f(%a: !tile.tile<64x32xf32, register>, %b: !tile.tile<32xf32, register>) {\n"
            "  %c = tile.add %a, %b : !tile.tile<64x32xf32, register>, !tile.tile<32xf32, register>\n"
            "  func.return\n}")
    with pytest.raises(LocatedVerifyException, match=r"'tile.add' op operand shapes \[\[64, 32\], \[32\]\] do not broadcast"):
        parse_module(text)

# endregion


@pytest.mark.parametrize("line,message", [
    ("%c = tile.add %a, %a : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, register>, "
     "!tile.tile<64x32xf32, register>", "tile.add: expected one type for all operands or one per operand (2), got 3"),
    ("%c = tile.sub %a, %a, %a : !tile.tile<64x32xf32, register>", "tile.sub takes 2 operands, got 3"),
    ("%c = tile.iota rows offset %a : !tile.tile<64x32xi32, register>", "index"),
])
def test_syntax_errors_are_located(line, message):
    from xdsl.utils.exceptions import ParseError

    text = f"func.func @f(%a: !tile.tile<64x32xf32, register>) {{\n  {line}\n  func.return\n}}"
    with pytest.raises(ParseError, match=re.escape(message)) as error:
        parse_module(text)
    assert "<string>:2:" in str(error.value)


PREDICATES = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
              "ne": np.not_equal}


@pytest.mark.parametrize("level", ["tile", "target"])
def test_compares_with_nan_infinities_and_signed_zeros(level):
    """f32 compares are ordered (NaN false) except ne (NaN true), -0 == +0; the same at every level."""
    body = []
    for k, predicate in enumerate(PREDICATES):
        body += [f"%p{k} = tile.cmp {predicate} %x, %y : {T}",
                 f"%r{k} = tile.select %p{k}, %one, %zero : !tile.tile<64x64xi1, register>, {T}",
                 f"%col{k} = arith.constant {64 * k} : index",
                 f"%ow{k} = tile.view %O[%m0, %col{k}] : !tile.tile<?x384xf32, global> -> !tile.tile<64x64xf32, global>",
                 f"tile.store_global %r{k}, %ow{k} : {T}, !tile.tile<64x64xf32, global>"]
    text = (checked(EVERY_OP).replace("WIDTH", "384")
            .replace("%W: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>},\n", "")
            .replace("    %ww = tile.view %W[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>\n", "")
            .replace("    %w = tile.load_broadcast %ww : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>\n",
                     f"    %one = tile.fill 1.0 : {T}\n    %zero = tile.fill 0.0 : {T}\n")
            .replace("%P:", "%Y:").replace("%P[", "%Y[").replace("%p = tile.load", "%y = tile.load")
            .replace("BODY", "\n".join("    " + line for line in body)))
    rng = np.random.default_rng(9)
    special = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0])
    x = rng.choice(special, (64, 64))
    y = rng.choice(special, (64, 64))
    out = _interpret(parse_module(text), x, y, level=level)
    with np.errstate(invalid="ignore"):
        for k, compare in enumerate(PREDICATES.values()):
            np.testing.assert_array_equal(out[:, 64 * k: 64 * k + 64], compare(x, y).astype(np.float32))


DIVISORS = (2.0, 0.25, -4.0, 2.0**126, 2.0**-126, 1.0, 3.0, 30.0)


@pytest.mark.parametrize("level", ["tile", "target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_division_by_a_power_of_two_is_a_multiply_bit_for_bit(level):
    """x / 2^k lowers as x * 2^-k (`numerics.exact_reciprocal`): the same bits as NumPy's f32 division on
    infinities, signed zeros, subnormal quotients and overflow, NaN where it gives NaN; 3.0 and 30.0 stay
    divisions."""
    body = []
    for k, d in enumerate(DIVISORS):
        body += [f"%d{k} = tile.fill {d!r} : {ROW}", f"%r{k} = tile.div %x, %d{k} : {T}, {ROW}",
                 f"%col{k} = arith.constant {64 * k} : index",
                 f"%ow{k} = tile.view %O[%m0, %col{k}] : !tile.tile<?xWIDTHxf32, global> -> !tile.tile<64x64xf32, global>",
                 f"tile.store_global %r{k}, %ow{k} : {T}, !tile.tile<64x64xf32, global>"]
    text = filled(EVERY_OP, BODY="\n".join("    " + line for line in body), WIDTH=str(64 * len(DIVISORS)))
    module = parse_module(text)
    rng = np.random.default_rng(3)
    tiny, huge = np.finfo(np.float32).tiny, np.finfo(np.float32).max
    special = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny / 8, 3 * tiny, huge, -huge, 1.0, 1e-30])
    x = np.where(rng.random((64, 64)) < 0.5, rng.choice(special, (64, 64)),
                 rng.standard_normal((64, 64)) * np.exp2(rng.integers(-140, 120, (64, 64)))).astype(np.float32)
    _, p, w = _every_op_inputs(64)
    out = _interpret(module, x, p, w, level=level)
    with np.errstate(all="ignore"):
        expected = np.concatenate([x / np.float32(d) for d in DIVISORS], axis=1)
    # A NaN quotient is NumPy's quiet NaN at Tile and target level and the GPU's canonical NaN (0x7FFFFFFF,
    # tessera.sm90.nan) in the PTX executor: NaN where NumPy's is, every other result the same bits.
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(out.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])
    if level == "target":
        lowered = parse_module(text)
        tessera.passes.apply_pipeline(lowered, "convert-tile-to-sm90")
        divisions = [op for op in lowered.walk() if op.name == "arith.divf"]
        assert len(divisions) == 2  # by 3.0 and by 30.0


def test_exact_reciprocal():
    from tessera.numerics import exact_reciprocal

    assert [exact_reciprocal(d) for d in (2.0, -0.5, 1.0, 2.0**126, 2.0**-126)] == [0.5, -2.0, 1.0, 2.0**-126, 2.0**126]
    assert [exact_reciprocal(d) for d in (3.0, 30.0, 0.0, float("inf"), float("nan"), 2.0**127, 2.0**-127, 0.1)] \
        == [None] * 8


@pytest.mark.parametrize("level", ["tile", "target"])
def test_float_to_integer_cast_saturates_with_nan_to_zero(level):
    """tile.cast f32 -> i32 truncates toward zero, saturates and maps NaN to 0 at every level, as cvt.rzi does
    (what NumPy's cast leaves undefined): NumPy's `.astype(int)` in a score_mod is traced to it."""
    special = np.float32([np.nan, np.inf, -np.inf, 3e9, -3e9, -2.7, 2.7, -0.5])
    expected = np.float32([0, 2**31, -2**31, 2**31, -2**31, -2, 2, 0])  # i32 back to f32: 2^31 - 1 rounds up
    body = [f"%q = tile.cast %x : {T} -> {I}", f"%r = tile.cast %q : {I} -> {T}",
            "%ow = tile.view %O[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>",
            f"tile.store_global %r, %ow : {T}, !tile.tile<64x64xf32, global>"]
    text = filled(EVERY_OP, BODY="\n".join("    " + line for line in body), WIDTH="64")
    x = np.resize(special, (64, 64)).astype(np.float32)
    _, p, w = _every_op_inputs(64)
    out = _interpret(parse_module(text), x, p, w, level=level)
    np.testing.assert_array_equal(out, np.resize(expected, (64, 64)))


ROUNDINGS = {"floor": np.floor, "ceil": np.ceil, "rint": np.rint, "trunc": np.trunc}


@pytest.mark.parametrize("level", ["tile", "target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_rounding_to_integral_values_bit_for_bit(level, request):
    """tile.floor / ceil / rint / trunc are NumPy's functions bit for bit at every level (cvt.rmi/rpi/rni/rzi
    .f32.f32 in the CTA simulator and the PTX executor): halves (rint's ties to even), signed zeros of the
    result (ceil(-0.5) = -0), subnormals (kept: floor(-tiny) = -1), values past 2^23 (integral already), NaN
    and infinities; the PTX assembles under ptxas without spilling."""
    body = []
    for k, name in enumerate(ROUNDINGS):
        body += [f"%r{k} = tile.{name} %x : {T}", f"%col{k} = arith.constant {64 * k} : index",
                 f"%ow{k} = tile.view %O[%m0, %col{k}] : !tile.tile<?xWIDTHxf32, global> -> !tile.tile<64x64xf32, global>",
                 f"tile.store_global %r{k}, %ow{k} : {T}, !tile.tile<64x64xf32, global>"]
    text = filled(EVERY_OP, BODY="\n".join("    " + line for line in body))
    text = filled(text, WIDTH=str(64 * len(ROUNDINGS)))
    tiny = np.finfo(np.float32).tiny
    special = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, tiny / 4, -tiny / 4,
                          2.0**23 + 1, -(2.0**24) - 2, 1e30, 0.49999997, -2.0000002])
    rng = np.random.default_rng(11)
    x = np.where(rng.random((64, 64)) < 0.5, rng.choice(special, (64, 64)),
                 rng.uniform(-40, 40, (64, 64))).astype(np.float32)
    _, p, w = _every_op_inputs(64)
    module = parse_module(text)
    out = _interpret(module, x, p, w, level=level)
    expected = np.concatenate([f(x) for f in ROUNDINGS.values()], axis=1)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    if level == "target":  # the printed PTX: the four cvt forms, which ptxas assembles
        from tessera.toolchain import compile_ptx

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ptx = tessera.compile(parse_module(text), target="ptx")
        assert all(f"cvt.{m}.f32.f32" in ptx for m in ("rmi", "rpi", "rni", "rzi"))
        result = compile_ptx(ptx, source_name="rounding", ptxas=request.getfixturevalue("ptxas"))
        assert result.warnings == () and not any(e.spills for e in result.entries.values())


@pytest.mark.slow  # ALiBi's kernels run at target level in the default run (tests/test_attention_mods_ws.py)
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_scaled_difference_of_indices_added_slab_by_slab_is_bitwise_the_tile_value(level):
    """x + slope * f32(kv_idx - q_idx) (tests/lit/passes/convert-tile-to-sm90-scaled-diagonal.mlir: computed 8
    registers at a time from the thread's scalar) gives the Tile interpreter's bits: the same roundings."""
    lit = Path(__file__).resolve().parent / "lit" / "passes"
    text = (lit / "convert-tile-to-sm90-scaled-diagonal.mlir").read_text()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    slopes = np.float32([0.3, 0.25, 0.125, 1.0])
    tile_value = _interpret(parse_module(text), x, slopes, level="tile")
    lowered = _interpret(parse_module(text), x, slopes, level=level)
    np.testing.assert_array_equal(np.asarray(lowered).view(np.uint32), np.asarray(tile_value).view(np.uint32))
    i, j = np.arange(64)[:, None] + 5, np.arange(64)[None, :]
    np.testing.assert_allclose(tile_value, x + np.float32(0.3) * (j - i).astype(np.float32), rtol=2**-22, atol=2**-20)
