"""8-bit floats in Tile IR: the facts of `tessera.sm90.fp8` against the PTX ISA text, the f8E4M3FN/f8E5M2 tile
types, and `tile.cast` to and from them, bit-exact over every code and around every rounding boundary.

Expected values come from the formats' definitions ([P#alternate-floating-point-data-formats]: sign, exponent,
mantissa; e4m3 bias 7 with S.1111.111 the only NaN and no infinity, e5m2 bias 15 IEEE-like), from the cvt text
([P#data-movement-and-conversion-instructions-cvt]: round to nearest even; ".satfinite: ... if the input value
is NaN, then the result is NaN ... If the absolute value of input (ignoring sign) is greater than MAX_NORM of
the specified destination format, then the result is sign-preserved MAX_NORM"), and from the fragment formulas
of Figure 88/152 and Figure 149, written out here, never from the module under test.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.ir import parse_module
from tessera.sm90 import fp8 as F
from text_edits import filled

# region The formats, decoded by hand


def decode(code: int, fmt: str) -> float:
    """The value of an 8-bit code by the format's definition (float64; NaN for NaN codes, +-inf for e5m2's)."""
    mantissa_bits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> mantissa_bits) & ((1 << (7 - mantissa_bits)) - 1)
    mantissa = code & ((1 << mantissa_bits) - 1)
    top = (1 << (7 - mantissa_bits)) - 1
    if fmt == "e4m3" and exponent == top and mantissa == (1 << mantissa_bits) - 1:
        return float("nan")
    if fmt == "e5m2" and exponent == top:
        return sign * float("inf") if mantissa == 0 else float("nan")
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_code_widens_exactly(fmt):
    """cvt.rn.f16x2.<fmt>x2 then cvt.f32.f16 is exact: all 256 codes decode to their defined value."""
    codes = np.arange(256)
    got = F.fp8_bits_to_f32(codes.astype(np.uint8), fmt).astype(np.float64)
    want = np.array([decode(c, fmt) for c in codes])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    assert np.signbit(got[0x80]) and got[0x80] == 0  # -0 keeps its sign


@pytest.mark.parametrize("fmt, largest, code", [("e4m3", 448.0, 0x7E), ("e5m2", 57344.0, 0x7B)])
def test_largest_finite_value_is_documented(fmt, largest, code):
    """MAX_NORM: e4m3 S.1111.110 = 1.75 x 2^8, e5m2 S.11110.11 = 1.75 x 2^15."""
    assert F.FP8_MAX_FINITE[fmt] == largest == decode(code, fmt)
    finite = [abs(decode(c, fmt)) for c in range(256) if np.isfinite(decode(c, fmt))]
    assert max(finite) == largest


def _narrow_codes(x, fmt):
    return F.satfinite_f32(np.asarray(x, np.float32), fmt).view(np.uint8).astype(int)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_finite_code_round_trips(fmt):
    """Each finite code's value narrows to itself (-0 to 0x80)."""
    codes = [c for c in range(256) if np.isfinite(decode(c, fmt))]
    values = np.array([decode(c, fmt) for c in codes], np.float32)
    assert list(_narrow_codes(values, fmt)) == codes


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_rounding_is_to_nearest_even_at_every_boundary(fmt):
    """Between consecutive positive finite values a < b (codes ca, cb = ca + 1): the midpoint goes to the one
    with an even code (an even mantissa, or the next binade's 0), a hair below it to a, a hair above to b; the
    same mirrored for negative values."""
    codes = [c for c in range(0x80) if np.isfinite(decode(c, fmt))]
    for ca, cb in zip(codes, codes[1:]):
        a, b = decode(ca, fmt), decode(cb, fmt)
        mid = (a + b) / 2  # exact in f32: one more bit than the format
        below, above = np.nextafter(np.float32(mid), np.float32(0)), np.nextafter(np.float32(mid), np.float32(1e9))
        even = ca if ca % 2 == 0 else cb
        assert list(_narrow_codes([mid, below, above], fmt)) == [even, ca, cb], (a, b)
        assert list(_narrow_codes([-mid, -below, -above], fmt)) == [0x80 | even, 0x80 | ca, 0x80 | cb], (a, b)


@pytest.mark.parametrize("fmt, largest, max_code", [("e4m3", 448.0, 0x7E), ("e5m2", 57344.0, 0x7B)])
def test_satfinite_saturates_overflow_and_infinity_and_keeps_nan(fmt, largest, max_code):
    """|x| > MAX_NORM (finite, including past the rounding midpoint above MAX_NORM, and infinite) gives
    sign-preserved MAX_NORM; NaN gives NaN (e4m3: S.1111.111; e5m2: exponent 11111 with a nonzero mantissa)."""
    step = largest / 7 if fmt == "e4m3" else largest / 3.5  # the spacing of the top binade: 32 / 8192
    over = [np.nextafter(np.float32(largest), np.float32(np.inf)), largest + step / 2, largest + step, 1e30,
            np.finfo(np.float32).max, np.inf]
    assert list(_narrow_codes(over, fmt)) == [max_code] * len(over)
    assert list(_narrow_codes([-x for x in over], fmt)) == [0x80 | max_code] * len(over)
    nan = _narrow_codes([np.nan, -np.nan], fmt)
    assert all(np.isnan(decode(int(c), fmt)) for c in nan)


def test_satfinite_flushes_below_half_the_smallest_subnormal():
    """e4m3's smallest subnormal is 2^-9: 2^-10 (a tie with 0) rounds to 0, anything above it to 2^-9."""
    assert list(_narrow_codes([2.0**-10, np.nextafter(np.float32(2.0**-10), np.float32(1)), 2.0**-9], "e4m3")) == [0, 1, 1]


def test_cvt_x2_puts_a_in_the_upper_byte():
    """"the value converted from input a is stored in the upper 8 bits of d and the value converted from input
    b is stored in the lower 8 bits": e4m3 1.0 = 0.0111.000 = 0x38, 2.0 = 0x40; e5m2 1.0 = 0x3C, -2.0 = 0xC0."""
    assert int(F.cvt_rn_satfinite_x2(np.float32(1.0), np.float32(2.0), "e4m3")) == 0x3840
    assert int(F.cvt_rn_satfinite_x2(np.float32(-2.0), np.float32(1.0), "e5m2")) == 0xC03C
    assert int(F.cvt_rn_satfinite_x2(np.float32(1e9), np.float32(np.inf), "e4m3")) == 0x7E7E


def test_the_dtypes_are_ml_dtypes_ocp_formats():
    assert F.fp8_dtype("e4m3") == np.dtype(ml_dtypes.float8_e4m3fn)
    assert F.fp8_dtype("e5m2") == np.dtype(ml_dtypes.float8_e5m2)
    with pytest.raises(ValueError, match="e4m3"):
        F.fp8_dtype("e3m4")


def test_ptxas_takes_the_cvt_forms_at_ptx_8_0():
    """The instruction names of FP8_CVT_NARROW/FP8_CVT_WIDEN assemble for sm_90a at .version 8.0."""
    from tessera import toolchain

    if not toolchain.find_all_ptxas():
        pytest.skip("no ptxas")
    body = "\n".join([
        f"  {F.FP8_CVT_NARROW['e4m3']} %h0, %f0, %f1;", f"  {F.FP8_CVT_NARROW['e5m2']} %h1, %f1, %f0;",
        f"  {F.FP8_CVT_WIDEN['e4m3']} %r0, %h0;", f"  {F.FP8_CVT_WIDEN['e5m2']} %r1, %h1;"])
    ptx = f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{{
  .reg .f32 %f<2>; .reg .b16 %h<2>; .reg .b32 %r<3>; .reg .b64 %rd<1>;
  ld.param.u64 %rd0, [p];
  ld.global.v2.f32 {{%f0, %f1}}, [%rd0];
{body}
  add.u32 %r2, %r0, %r1;
  st.global.u32 [%rd0], %r2;
  ret;
}}
"""
    for ptxas in toolchain.find_all_ptxas():  # 12.x and 13.x where installed
        assert not toolchain.compile_ptx(ptx, ptxas=ptxas.path).log.diagnostics, ptxas.release


# endregion
# region The FP8 A fragment and P from the accumulator


def _figure_88_a(lane, i):
    """mma.m16n8k32 A for .e4m3/.e5m2 (Figure 88): row = groupID for 0 <= i < 4 || 8 <= i < 12, groupID + 8
    otherwise; col = threadID_in_group * 4 + (i & 0x3), + 16 for i >= 8."""
    group, tig = lane >> 2, lane % 4
    row = group if (0 <= i < 4 or 8 <= i < 12) else group + 8
    col = tig * 4 + (i & 3) + (16 if i >= 8 else 0)
    return row, col


def _figure_149_d(thread, v):
    """The wgmma accumulator (Figure 149, as tests/test_sm90_facts.py reads it): row 16w + g (+8 for elements
    2, 3 of each 4), column 8 (v / 4) + 2c + (v & 1)."""
    w, lane = divmod(thread, 32)
    return 16 * w + lane // 4 + 8 * ((v >> 1) & 1), 8 * (v >> 2) + 2 * (lane % 4) + (v & 1)


def test_a8_fragment_is_figure_88_per_warp():
    """Figure 152 (wgmma .m64nNk32 A) is Figure 88's m16n8k32 fragment for each warp's 16 rows."""
    for thread in range(128):
        for i in range(16):
            row, col = _figure_88_a(thread % 32, i)
            assert tuple(map(int, F.a8_fragment_coords(i, thread))) == (16 * (thread // 32) + row, col)
    with pytest.raises(ValueError):
        F.a8_fragment_coords(16, 0)


@pytest.mark.parametrize("k_slice", [0, 3])
def test_p8_repacking_keeps_rows_in_thread_and_permutes_keys_by_the_key_order(k_slice):
    """Packing A register j of K-slice s from `p8_register_sources(s)[j]` (low byte first) puts, for every thread
    and byte, an accumulator element of the same row at the A position whose k reads that element's key
    through P8_KEY_ORDER: the product P V is unchanged when V^T's row k holds key P8_KEY_ORDER[k]."""
    for thread in range(128):
        for j, sources in enumerate(F.p8_register_sources(k_slice)):
            for byte, v in enumerate(sources):
                a_row, a_k = _figure_88_a(thread % 32, 4 * j + byte)
                d_row, d_col = _figure_149_d(thread, v)
                assert 16 * (thread // 32) + a_row == d_row
                assert d_col - 32 * k_slice == F.P8_KEY_ORDER[a_k]
    assert sorted(F.P8_KEY_ORDER) == list(range(32))


# endregion
# region Tile IR types and tile.cast

CAST_KERNEL = """
func.func @cast(%X: !tile.tile<?x32xSRC, global> {tile.dims = #tile.dims<M, 32>},
                %Y: !tile.tile<?x32xDST, global> {tile.dims = #tile.dims<M, 32>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %b = tile.program_id x : index
  %m0 = arith.muli %b, %c64 : index
  %xw = tile.view %X[%m0, %c0] : !tile.tile<?x32xSRC, global> -> !tile.tile<64x32xSRC, global>
  %x = tile.load %xw : !tile.tile<64x32xSRC, global> -> !tile.tile<64x32xSRC, register>
  %y = tile.cast %x : !tile.tile<64x32xSRC, register> -> !tile.tile<64x32xDST, register>
  %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x32xDST, global> -> !tile.tile<64x32xDST, global>
  tile.store_global %y, %yw : !tile.tile<64x32xDST, register>, !tile.tile<64x32xDST, global>
  func.return
}
"""


def _cast_module(src: str, dst: str):
    return parse_module(filled(CAST_KERNEL, SRC=src, DST=dst))


def _boundary_values(fmt: str) -> np.ndarray:
    """Every finite code's value, every midpoint and its f32 neighbours, the overflow cases, NaN: 64 x 32."""
    finite = sorted({decode(c, fmt) for c in range(256) if np.isfinite(decode(c, fmt))})
    mids = [(a + b) / 2 for a, b in zip(finite, finite[1:])]
    near = [np.nextafter(np.float32(m), np.float32(d)) for m in mids for d in (-1e9, 1e9)]
    big = F.FP8_MAX_FINITE[fmt]
    special = [big * 1.1, -big * 1.1, 1e38, -1e38, np.inf, -np.inf, np.nan]
    values = np.array(finite + mids + near + special, np.float32)
    return np.resize(values, 64 * 32).reshape(64, 32)


@pytest.mark.parametrize("src", ["f32", "bf16"])
@pytest.mark.parametrize("dst, fmt", [("f8E4M3FN", "e4m3"), ("f8E5M2", "e5m2")])
def test_tile_cast_to_fp8_is_cvt_rn_satfinite(src, dst, fmt):
    """tile.cast f32/bf16 -> f8 in the Tile interpreter is bit-exact cvt.rn.satfinite (bf16 inputs: the bf16
    values, exactly widened to f32 first, as sm_90a narrows bf16 through f32)."""
    x = _boundary_values(fmt)
    if src == "bf16":
        x = x.astype(ml_dtypes.bfloat16)
    y = tessera.interpret(_cast_module(src, dst), x)
    assert y.dtype == F.fp8_dtype(fmt)
    want = F.satfinite_f32(x.astype(np.float32), fmt)
    got_bits, want_bits = y.view(np.uint8), want.view(np.uint8)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(y.astype(np.float32)), nan)
    np.testing.assert_array_equal(got_bits[~nan], want_bits[~nan])
    # independently of the module: each finite code value maps to itself
    finite = np.array([decode(c, fmt) for c in range(128) if np.isfinite(decode(c, fmt))], np.float32)
    codes = [c for c in range(128) if np.isfinite(decode(c, fmt))]
    assert list(tessera.interpret(_cast_module("f32", dst), np.resize(finite, (64, 32)).astype(np.float32))
                .view(np.uint8).ravel()[:len(codes)]) == codes


@pytest.mark.parametrize("src, fmt", [("f8E4M3FN", "e4m3"), ("f8E5M2", "e5m2")])
@pytest.mark.parametrize("dst", ["f32", "bf16"])
def test_tile_cast_from_fp8_is_exact(src, fmt, dst):
    """tile.cast f8 -> f32/bf16 over all 256 codes gives the decoded value exactly (every 8-bit float is a bf16)."""
    codes = np.resize(np.arange(256, dtype=np.uint8), (64, 32))
    x = codes.view(F.fp8_dtype(fmt))
    y = tessera.interpret(_cast_module(src, dst), x).astype(np.float64)
    want = np.vectorize(lambda c: decode(int(c), fmt))(codes)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(y[~np.isnan(want)], want[~np.isnan(want)])


def test_fp8_tiles_parse_print_and_round_trip():
    module = _cast_module("f32", "f8E4M3FN")
    text = tessera.print_module(module)
    assert "!tile.tile<64x32xf8E4M3FN, register>" in text
    assert tessera.print_module(parse_module(text)) == text


@pytest.mark.parametrize("src, dst, message", [
    ("f8E4M3FN", "i32", "an 8-bit float converts only to and from f32, bf16 or f16, got f8E4M3FN -> i32"),
    ("f8E4M3FN", "f8E5M2", "an 8-bit float converts only to and from f32, bf16 or f16, got f8E4M3FN -> f8E5M2"),
])
def test_fp8_casts_the_hardware_lacks_are_refused(src, dst, message):
    from xdsl.utils.exceptions import DiagnosticException, VerifyException

    with pytest.raises((VerifyException, DiagnosticException), match=message):
        _cast_module(src, dst)

# endregion


def test_p8_repacking_runs_in_the_ptx_executor():
    """The packing of `p8_register_sources` emitted as PTX (cvt.rn.satfinite.e4m3x2.f32 pairs, mov.b32) feeds an
    RS `wgmma ... m64n8k32.f32.e4m3.e4m3` whose K-major B holds V's keys in P8_KEY_ORDER: the PTX executor,
    which implements Figures 149/152 on its own, computes e4m3(P) V for the accumulator tile P."""
    from tessera.interpreters.ptx import launch
    from tessera.sm90 import facts

    rng = np.random.default_rng(4)
    p = (rng.random((64, 32)) * 500).astype(np.float32)  # some beyond 448: saturated
    v = rng.standard_normal((32, 8)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    t, u = np.arange(128)[:, None], np.arange(16)[None, :]
    rows, cols = np.vectorize(_figure_149_d)(t, u)
    accumulator = np.ascontiguousarray(p[rows, cols])  # [128, 16]: thread t's d[0..15] of the m64n32 tile
    b = v[list(F.P8_KEY_ORDER), :].T  # [8, 32]: B row n, k-position k = V[key order[k], n]
    image = np.zeros(256, np.uint8)
    r, kb = np.meshgrid(np.arange(8), np.arange(32), indexing="ij")
    image[(kb // 16) * 128 + r * 16 + kb % 16] = np.ascontiguousarray(b).view(np.uint8)
    pack = []
    for j, (e0, e1, e2, e3) in enumerate(F.p8_register_sources(0)):
        pack += [f"{F.FP8_CVT_NARROW['e4m3']} %h0, %f{e1}, %f{e0};", f"{F.FP8_CVT_NARROW['e4m3']} %h1, %f{e3}, %f{e2};",
                 f"mov.b32 %r{10 + j}, {{%h0, %h1}};"]
    loads = "\n".join(f"ld.global.v4.f32 {{%f{4 * i}, %f{4 * i + 1}, %f{4 * i + 2}, %f{4 * i + 3}}}, [%rd4+{16 * i}];"
                      for i in range(4))
    body = f"""
    .reg .b32 %r<16>; .reg .b64 %rd<8>; .reg .f32 %f<16>; .reg .pred %p<2>; .reg .b16 %h<2>;
    mov.u32 %r0, %tid.x;
    shl.b32 %r2, %r0, 4;
    cvt.u64.u32 %rd2, %r2;
    ld.param.u64 %rd1, [bsrc];
    add.s64 %rd3, %rd1, %rd2;
    setp.lt.u32 %p1, %r0, 16;
    mov.u32 %r1, smem;
    add.u32 %r7, %r1, %r2;
    @%p1 ld.global.v4.b32 {{%r3, %r4, %r5, %r6}}, [%rd3];
    @%p1 st.shared.v4.b32 [%r7], {{%r3, %r4, %r5, %r6}};
    ld.param.u64 %rd4, [acc];
    mul.wide.u32 %rd5, %r0, 64;
    add.s64 %rd4, %rd4, %rd5;
    {loads}
    {chr(10).join(pack)}
    bar.sync 0;
    fence.proxy.async.shared::cta;
    ld.param.u64 %rd6, [bdesc];
    mov.b32 %r3, 0;
    mov.b32 %r4, 0;
    mov.b32 %r5, 0;
    mov.b32 %r6, 0;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {{%r3, %r4, %r5, %r6}}, {{%r10, %r11, %r12, %r13}}, %rd6, 1, 1, 1;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ld.param.u64 %rd1, [out];
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.b32 [%rd3], {{%r3, %r4, %r5, %r6}};"""
    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.shared .align 128 .b8 smem[256];\n"
           ".visible .entry k(.param .u64 out, .param .u64 bsrc, .param .u64 acc, .param .u64 bdesc)\n"
           f"{{{body}\n}}\n")
    desc = facts.encode_descriptor(0, 128, 256, 0)
    out, *_ = launch(ptx, "k", 1, 128, [np.zeros((128, 4), np.uint32), image, accumulator, desc])
    d = np.zeros((64, 8), np.float32)
    tt, vv = np.arange(128)[:, None], np.arange(4)[None, :]
    d[16 * (tt // 32) + (tt % 32) // 4 + 8 * ((vv >> 1) & 1), 2 * (tt % 4) + (vv & 1)] = out.view(np.float32)
    p8 = np.clip(p, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_allclose(d, p8 @ v.astype(np.float64), rtol=2**-22)


@pytest.mark.parametrize("a, b, selector, d", [
    (0x33221100, 0x77665544, 0x5140, 0x55114400),  # bytes 0, 4, 1, 5: interleave the low halves
    (0x33221100, 0x77665544, 0x7632, 0x77663322),  # the high halves of a and b
    (0x33221100, 0x77665544, 0x3210, 0x33221100),  # identity: a
    (0x000080FF, 0x00000000, 0x0009, 0xFFFFFFFF),  # field 9: byte 1 (0x80), sign replicated; others byte 0
    (0x00007F00, 0x00000000, 0x9999, 0x00000000),  # byte 1 = 0x7F: sign 0 replicated
])
def test_prmt_picks_bytes_of_b_a(a, b, selector, d):
    """prmt generic form: "{b, a} = {{b7, b6, b5, b4}, {b3, b2, b1, b0}}"; "The 3 lsbs of the selection value
    specify which of the 8 source bytes"; "msb=1 means replicate the sign"; d.b0 takes c[3:0]."""
    from tessera.sm90 import facts

    assert int(facts.prmt_b32(np.uint32(a), np.uint32(b), selector)) == d


def test_float_inputs_to_an_8_bit_argument_are_rounded_as_the_hardware_would():
    """An interpreter launch converts f32 inputs for an f8E4M3FN argument with cvt.rn.satfinite's rule (500 and
    inf to 448, NaN stays NaN), not NumPy's cast (which gives NaN beyond the range)."""
    x = np.resize(np.array([500.0, -np.inf, np.nan, 0.3], np.float32), (64, 32))
    y = tessera.interpret(_cast_module("f8E4M3FN", "f32"), x)
    assert list(y[0, :2]) == [448.0, -448.0] and np.isnan(y[0, 2]) and y[0, 3] == np.float32(0.3125)
