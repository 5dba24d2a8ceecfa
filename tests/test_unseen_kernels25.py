"""Kernels a user writes next, round 25 (`tests/user_kernels/*.mlir`, not earlier rounds'): a row argmax with NumPy's
first-index tie-break, a count of positive entries, a wrapping i32 row sum, a signed i32 row maximum and an f32 row
minimum, over rows of any length in column blocks of 64 (`row_argmax_count.mlir`); int4 weights packed eight to an
i32 word (AWQ/GPTQ's order, zero point 8, a scale per column) unpacked by shifts and masks, an xorshift32 hash of
each element's index and a seed (a dropout mask's randomness), and shifts through the sign bit and by 32 or more
(`int4_unpack_hash.mlir`); GPT-NeoX's rotary embedding with its angles computed in the kernel from position ids in
no order (`rope_angles.mlir`).

Bugs found: `tile.row_max` and `tile.row_sum` refused i32 tiles (the verifier asked for a float), and Tile IR had no
row minimum, so an argmax's "smallest column at the maximum" and a count of a row's flags needed a round trip
through f32 (exact only below 2^24) and a negation. They take i32 now, and `tile.row_min` exists, at every level:
the Tile interpreter's NumPy extrema and a sum wrapping modulo 2^32, the lowering's `max/min.s32` / `add.s32` trees
and butterfly shuffles (an i32 sum is never held as a per-thread partial sum: `row_sums.partial_row_sums` takes
float sums only). Tile IR had no bitwise ops: `tile.and`, `tile.or`, `tile.xor`, `tile.shl`, `tile.shrs`
(arithmetic) and `tile.shru` (logical) on i32 tiles now, with broadcasting, an amount read as unsigned and clamped
to 32 as PTX's `shl.b32` / `shr.s32` / `shr.u32` do (the CTA simulator and the PTX executor already modelled those).
Tile IR had no sin or cos (round 24's rotary embedding read a table of angles): `tile.sin` / `tile.cos` lower to
`sin.approx.f32` / `cos.approx.f32` of the angle reduced to [-2 pi, 2 pi] first (the instructions are bounded there,
2^-20.5, and not at all past 100 pi, where a position times a frequency lies), with the bound in
`tessera.sm90.approx` and the validator. The Tile interpreter's row maximum of a row of zeros kept whichever zero
NumPy met first (-0 for [-0, +0]), where max.NaN.f32 gives +0 below Tile IR; it gives max.NaN/min.NaN's sign now.

The default run takes the kernel at PTX level on a shape no tile divides and the zeros at every level; `-m slow`
runs every level on every shape, every ptxas found (no warning, no spill) and `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.ir.diagnostics import LocatedVerifyException
from unseen_rounds import Case, round_tests


def _argmax_inputs(shape, rng):
    """Values in quarter steps (ties in most rows), i32 values over the whole range (sums that wrap)."""
    m, n = shape
    x = (np.round(rng.standard_normal((m, n)) * 4) / 4).astype(np.float32)
    k = rng.integers(-2**31, 2**31, size=(m, n), dtype=np.int64).astype(np.int32)
    return [x, k], {}


def _argmax_ref(x, k):
    total = k.astype(np.int64).sum(1).astype(np.uint32).view(np.int32)
    return tuple(np.asarray(a, np.float64) for a in (np.argmax(x, 1), (x > 0).sum(1), total, k.max(1), x.min(1)))


def _int4_inputs(shape, rng):
    """Packed words over the whole i32 range (every code 0..15 in every slot), a scale per column, a seed."""
    k, n = shape
    words = rng.integers(-2**31, 2**31, size=(-(-k // 8), n), dtype=np.int64).astype(np.int32)
    return [words, rng.standard_normal(n).astype(np.float32),
            np.array([rng.integers(-2**31, 2**31)], np.int32)], {}


def _int4_ref(words, scale, seed):
    """The unpacked weights, the xorshift32 hash, its top byte with its sign, -1 from the shifts through the sign
    bit, and 1 << (k % 40) (0 for amounts of 32 or more), each in uint32/int64 arithmetic of its own."""
    k = np.arange(8 * words.shape[0])[:, None]
    n = np.arange(words.shape[1])[None, :]
    word = words.view(np.uint32)[k // 8, n].astype(np.uint64)
    code = ((word >> (4 * (k % 8)).astype(np.uint64)) & 15).astype(np.int64) - 8
    x = (k * words.shape[1] + n).astype(np.uint32) ^ seed.view(np.uint32)[0]
    x ^= x << np.uint32(13)
    x ^= x >> np.uint32(17)
    x ^= x << np.uint32(5)
    h = x.view(np.int32)
    amount = np.broadcast_to(k % 40, h.shape)
    big = np.where(amount < 32, np.left_shift(1, np.minimum(amount, 31), dtype=np.int64), 0)
    big = big.astype(np.uint32).view(np.int32)
    return tuple(np.asarray(a, np.float64) for a in (
        (code * scale.astype(np.float64)[None, :]).astype(np.float32), h, h >> 24, np.full(h.shape, -1), big))


def _rope_inputs(shape, rng):
    """Rows in [-1, 1], position ids up to 65535 in no order, GPT-NeoX's inverse frequencies 10000^(-2i/64)."""
    (s,) = shape
    inv = (10000.0 ** (-np.arange(32) * 2 / 64)).astype(np.float32)
    return [rng.uniform(-1, 1, (s, 64)).astype(np.float32), rng.integers(0, 65536, s).astype(np.int32), inv], {}


def _rope_ref(x, pos, inv):
    """The rotation at the kernel's f32 angles (one IEEE product each), in float64."""
    angle = (pos.astype(np.float32)[:, None] * inv[np.arange(64) % 32][None, :]).astype(np.float64)
    x = x.astype(np.float64)
    partner = x[:, np.arange(64) ^ 32] * np.where(np.arange(64) < 32, -1.0, 1.0)
    return (x * np.cos(angle) + partner * np.sin(angle),)


CASES = {
    # exact: compares, selects, integer maxima and wrapping sums
    "row_argmax_count": Case("row_argmax_count", _argmax_inputs, _argmax_ref, 0.0, 0.0,
                             ((100, 129), (1, 1), (17, 1000), (129, 64), (65, 3))),
    # exact: bit operations, and each code times its scale rounded once to f32 (codes -8..7)
    # sin/cos of angles below 2^16: each within sin_cos_error_bound (about 1.2e-6) of the exact value; |x| <= 1,
    # then two products and a sum in f32
    "rope_angles": Case("rope_angles", _rope_inputs, _rope_ref, 0.0, 2 * 1.2e-6 + 4 * 2.0**-24,
                        ((100,), (1,), (1000,), (64,))),
    "int4_unpack_hash": Case("int4_unpack_hash", _int4_inputs, _int4_ref, 0.0, 0.0,
                             ((100, 70), (8, 1), (1000, 130), (72, 64))),
}

FAST = {"row_argmax_count": ("ptx",), "int4_unpack_hash": ("ptx",), "rope_angles": ("ptx",)}

TOOL_SIZES = {"row_argmax_count": ["M=70", "N=100"], "int4_unpack_hash": ["KP=13", "N=70"], "rope_angles": ["S=70"]}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


ROW_REDUCTION = """
builtin.module {{
  func.func @f(%X: !tile.tile<64x64x{src}, global>, %Y: !tile.tile<64xf32, global> {{tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %v = tile.load %X : !tile.tile<64x64x{src}, global> -> !tile.tile<64x64x{src}, register>
    %x = {x}
    %r = tile.{op} %x : !tile.tile<64x64x{element}, register> -> !tile.tile<64x{element}, register>
    func.return
  }}
}}
"""


def test_integer_row_reduction_result_type():
    """An i32 row reduction gives an i32 row vector, not an f32 one."""
    text = ROW_REDUCTION.format(op="row_max", src="i32", x="tile.add %v, %v : !tile.tile<64x64xi32, register>",
                                element="i32").replace("-> !tile.tile<64xi32, register>", "-> !tile.tile<64xf32, register>")
    with pytest.raises(LocatedVerifyException, match="result element type must match the source's") as info:
        tessera.parse_module(text, "k.mlir")
    assert "k.mlir:7:" in str(info.value)


@pytest.mark.parametrize("op", ["row_max", "row_sum"])
def test_predicate_row_reduction_refused(op):
    """An i1 tile (a compare's) is refused at the reduction's line: select it into an i32 tile of 0 and 1."""
    text = ROW_REDUCTION.format(op=op, src="f32", x="tile.cmp gt %v, %v : !tile.tile<64x64xf32, register>",
                                element="i1")
    with pytest.raises(LocatedVerifyException, match="source must have a float or i32 element type, got i1 \\(select it into an i32 tile of 0 and 1 to count\\)") as info:
        tessera.parse_module(text, "k.mlir")
    assert "k.mlir:7:" in str(info.value)


SIGNED_ZEROS = """
builtin.module {
  func.func @extrema(%X: !tile.tile<64x64xf32, global> {tile.dims = #tile.dims<64, 64>},
      %MX: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>, tile.role = "out"},
      %MN: !tile.tile<64xf32, global> {tile.dims = #tile.dims<64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %xw = tile.view %X[%c0, %c0] : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %mx = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %mxw = tile.view %MX[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mx, %mxw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %mn = tile.row_min %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %mnw = tile.view %MN[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mn, %mnw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_row_extrema_signed_zeros(level):
    """max.NaN.f32 / min.NaN.f32's zeros at every level: a row of +-0 has the maximum +0 unless every zero is -0,
    the minimum -0 unless every zero is +0, whatever order the row holds them in (NumPy's reduction keeps the
    first zero it meets); a NaN anywhere in a row is the row's result."""
    rng = np.random.default_rng(25)
    x = np.where(rng.random((64, 64)) < 0.5, -0.0, 0.0).astype(np.float32)
    x[0], x[1] = -0.0, 0.0
    x[2, 5] = -1.0
    x[3, 7] = 2.0
    x[4, 9] = np.nan
    got_max, got_min = tessera.launch(tessera.parse_module(SIGNED_ZEROS, "extrema.mlir"), x, level=level)
    every_negative, every_positive = np.signbit(x).all(1), ~np.signbit(x).any(1)
    want_max = np.where(every_negative, -0.0, 0.0).astype(np.float32)
    want_min = np.where(every_positive, 0.0, -0.0).astype(np.float32)
    want_max[3], want_min[2] = 2.0, -1.0
    want_max[4] = want_min[4] = np.nan
    np.testing.assert_array_equal(got_max.view(np.uint32)[np.arange(64) != 4], want_max.view(np.uint32)[np.arange(64) != 4])
    np.testing.assert_array_equal(got_min.view(np.uint32)[np.arange(64) != 4], want_min.view(np.uint32)[np.arange(64) != 4])
    assert np.isnan(got_max[4]) and np.isnan(got_min[4])


SHIFTS = """
builtin.module {
  func.func @shifts(%A: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>},
      %B: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>},
      %L: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %RS: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %RU: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %X: !tile.tile<64x64xi32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %c0 = arith.constant 0 : index
    %aw = tile.view %A[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    %a = tile.load %aw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %bw = tile.view %B[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    %b = tile.load %bw : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, register>
    %l = tile.shl %a, %b : !tile.tile<64x64xi32, register>
    %rs = tile.shrs %a, %b : !tile.tile<64x64xi32, register>
    %ru = tile.shru %a, %b : !tile.tile<64x64xi32, register>
    %o = tile.or %a, %b : !tile.tile<64x64xi32, register>
    %n = tile.and %a, %b : !tile.tile<64x64xi32, register>
    %x = tile.xor %o, %n : !tile.tile<64x64xi32, register>
    %lw = tile.view %L[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %l, %lw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %rsw = tile.view %RS[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %rs, %rsw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %ruw = tile.view %RU[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %ru, %ruw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    %xw = tile.view %X[%c0, %c0] : !tile.tile<64x64xi32, global> -> !tile.tile<64x64xi32, global>
    tile.store_global %x, %xw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    func.return
  }
}
"""


def _ptx_shift(value: int, amount: int, kind: str) -> int:
    """The PTX ISA's shl.b32 / shr.s32 / shr.u32 on Python integers: the amount as unsigned, clamped to 32."""
    amount = min(amount & 0xFFFFFFFF, 32)
    bits = value & 0xFFFFFFFF
    if kind == "shl":
        bits = (bits << amount) & 0xFFFFFFFF
    elif kind == "shru":
        bits >>= amount
    else:
        bits = (value >> amount) & 0xFFFFFFFF  # Python's >> on a signed int fills with the sign
    return bits - (1 << 32) if bits >= 1 << 31 else bits


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_shift_amounts_as_ptx_reads_them(level):
    """Amounts 0..33, 63, -1, 2^31 - 1 and -2^31 on values of either sign: each level as the PTX ISA's shifts
    (the amount unsigned, clamped to 32), and a ^ b as (a | b) ^ (a & b)."""
    rng = np.random.default_rng(7)
    a = rng.integers(-2**31, 2**31, size=(64, 64), dtype=np.int64).astype(np.int32)
    a[0, :4] = [-1, -2**31, 2**31 - 1, 1]
    amounts = [*range(34), 63, -1, 2**31 - 1, -2**31]
    b = np.array([amounts[i % len(amounts)] for i in range(64 * 64)], np.int64).reshape(64, 64).astype(np.int32)
    got = tessera.launch(tessera.parse_module(SHIFTS, "shifts.mlir"), a, b, level=level)
    for out, kind in zip(got[:3], ("shl", "shrs", "shru")):
        want = np.array([_ptx_shift(int(x), int(y), kind) for x, y in zip(a.ravel(), b.ravel())], np.int64)
        np.testing.assert_array_equal(out.ravel().astype(np.int64), want, kind)
    np.testing.assert_array_equal(got[3], a ^ b)


SIN_COS = """
builtin.module {
  func.func @sincos(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %S: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %C: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %s = tile.sin %x : !tile.tile<64x64xf32, register>
    %c = tile.cos %x : !tile.tile<64x64xf32, register>
    %sw = tile.view %S[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %s, %sw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %cw = tile.view %C[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %c, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_sin_cos_within_their_bound(level):
    """Angles from subnormal to 2^24 and beyond, each level within `sin_cos_error_bound` of the float64 value
    (the Tile level within its f32 rounding), NaN for +-inf and NaN, and within [-1, 1] where nothing is
    guaranteed (|x| > 2^24)."""
    from tessera.sm90.approx import sin_cos_error_bound

    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-10, 10, 1000), rng.uniform(-1e6, 1e6, 1000), rng.uniform(-2**24, 2**24, 200),
                        [0.0, -0.0, np.pi, -np.pi, 1e-40, -1e-40, 2.0**24, -(2.0**24), 3e38, -3e38, 1e30,
                         np.inf, -np.inf, np.nan]]).astype(np.float32)
    x = np.pad(x, (0, -len(x) % 64)).reshape(-1, 64)
    got = tessera.launch(tessera.parse_module(SIN_COS, "sincos.mlir"), x, level=level)
    for out, function in zip(got, (np.sin, np.cos)):
        with np.errstate(invalid="ignore"):
            want = function(x.astype(np.float64))
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        finite = np.isfinite(want)
        bound = 2.0**-24 if level == "tile" else sin_cos_error_bound(x[finite])
        assert np.all(np.abs(out[finite] - want[finite]) <= bound)
        assert np.all(np.abs(out[finite]) <= 1)


@pytest.mark.slow
def test_rope_angles_validates():
    """`tessera.validate` judges every level of the default pipeline against the kernel's own Tile IR in float64,
    sin and cos within their bound."""
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate
    from unseen_rounds import KERNELS

    module = tessera.parse_module((KERNELS / "rope_angles.mlir").read_text(), "rope_angles.mlir")
    report = validate(module, PTX_PIPELINE, sizes={"S": 70})
    assert report.ok, report.table()


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_erf_within_its_bound(level):
    """erf from subnormal inputs to beyond where erfc underflows, across the branches' boundary at 1: each level
    within `erf_error_bound` of math.erf (the Tile level within its f32 rounding), +-1 at +-inf, NaN at NaN,
    -0 at -0."""
    import math

    from tessera.sm90.approx import erf_error_bound

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-1.2, 1.2, 1000), rng.uniform(-6, 6, 1000), np.linspace(0.99, 1.01, 100),
                        10.0 ** rng.uniform(-45, 1, 200),
                        [0.0, -0.0, 1.0, -1.0, 1e-40, 9.3, 9.5, 30, 1e19, -3e38, np.inf, -np.inf, np.nan]])
    x = np.pad(x.astype(np.float32), (0, -len(x) % 64)).reshape(-1, 64)
    module = tessera.parse_module(SIN_COS.replace("tile.sin %x", "tile.erf %x").replace("tile.cos %x", "tile.erf %x"),
                                  "erf.mlir")
    got = tessera.launch(module, x, level=level)[0]
    want = np.asarray(np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)), np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    bound = erf_error_bound(x[finite]) if level != "tile" else 2.0**-24 * np.abs(want[finite]) + 2.0**-150
    assert np.all(np.abs(got[finite] - want[finite]) <= bound)
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_erf_constants():
    """The series is erf's Maclaurin series of erf(x) / x with its first omitted term below 1.5e-8; the fit of
    erfc is within Numerical Recipes' 1.2e-7 relative error of math.erfc in exact (float64) arithmetic."""
    import math

    from tessera.numerics import ERF_SERIES, ERFC_FIT, ERFC_FIT_RELATIVE_ERROR
    from tessera.variants.torch_activations import erf as fit_erf

    for n, a in enumerate(ERF_SERIES):
        assert a == pytest.approx(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)), rel=1e-15)
    assert 2 / math.sqrt(math.pi) / (math.factorial(10) * 21) < 1.5e-8
    z = np.linspace(0, 9, 20001)
    t = 1 / (1 + z / 2)
    fit = t * np.exp(-z * z + sum(c * t**i for i, c in enumerate(ERFC_FIT)))
    exact = np.asarray(np.frompyfunc(math.erfc, 1, 1)(z), np.float64)
    assert np.max(np.abs(fit / exact - 1)) <= ERFC_FIT_RELATIVE_ERROR
    np.testing.assert_allclose(fit_erf(z[1:]), 1 - fit[1:], rtol=1e-12)  # the variants' erf (0 at 0): the same fit
