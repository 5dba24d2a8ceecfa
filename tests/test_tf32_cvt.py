"""`cvt` to .tf32 (`tessera.sm90.tf32`), checked against outside sources, not against itself:

- .rna and .rna.satfinite against the SASS ptxas 13.0 emits for sm_90a, transcribed below instruction by
  instruction from nvdisasm's listing (the PTX ISA leaves the low 13 bits of a .tf32 implementation-defined);
- .rn and .rz against the format's definition (8 exponent bits, 10 mantissa bits: a float64 quotient by the
  spacing of tf32 values, rounded by NumPy's rint/trunc);
- the forms ptxas accepts and refuses for sm_90a (when a ptxas is installed), and the PTX executor running each.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, launch
from tessera import toolchain
from tessera.sm90 import tf32

SASS_RNA = """\
HFMA2.MMA R5, -RZ, RZ, 0, 0.00048828125 ;      (R5 = 0x1000)
FSETP.GEU.AND P0, PT, |R0|, +INF , PT ;
@!P0 IMAD.IADD.U32 R0, R0, 0x1, R5 ;
LOP3.LUT R5, R0, 0xffffe000, RZ, 0xc0, !PT ;"""
SASS_RNA_SATFINITE_TAIL = """\
FSETP.GEU.AND P0, PT, |R5|, +INF , PT ;
@P0 VIADD R5, R5, 0xffffe000 ;"""


def sass_rna(bits: np.ndarray, satfinite: bool) -> np.ndarray:
    """SASS_RNA (and SASS_RNA_SATFINITE_TAIL) executed on 32-bit patterns: FSETP.GEU is true for |x| >= inf and
    for NaN (unordered)."""
    x = bits.view(np.float32)
    p0 = ~(np.abs(x) < np.inf)
    r0 = np.where(p0, bits, bits + np.uint32(0x1000)).astype(np.uint32)
    r5 = r0 & np.uint32(0xFFFFE000)
    if satfinite:
        p0 = ~(np.abs(r5.view(np.float32)) < np.inf)
        r5 = np.where(p0, r5 + np.uint32(0xFFFFE000), r5).astype(np.uint32)
    return r5


def patterns() -> np.ndarray:
    """Random patterns plus the edges: zeros, subnormals, ties, the largest finites, infinities, NaNs whose
    payload lies above and only below the 13 low bits, and both signs of each."""
    rng = np.random.default_rng(7)
    edges = [0, 1, 0x1000, 0x1FFF, 0x3000, 0x7FFFFF, 0x800000, 0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001,
             0x7F7FEFFF, 0x7F7FF000, 0x7F7FFFFF, 0x7F7FE000, 0x7F800000, 0x7F800001, 0x7F801000, 0x7FC00000,
             0x7FFFFFFF]
    edges = np.array(edges, np.uint32)
    return np.concatenate([edges, edges | np.uint32(0x80000000), rng.integers(0, 2**32, 20000, dtype=np.uint32)])


@pytest.mark.parametrize("satfinite", [False, True])
def test_rna_is_the_sass_ptxas_emits(satfinite):
    bits = patterns()
    np.testing.assert_array_equal(tf32.cvt_tf32(bits.view(np.float32), "rna", satfinite), sass_rna(bits, satfinite))


def test_rna_edges_spelled_out():
    f = lambda b, sat=False: int(tf32.cvt_tf32(np.array([b], np.uint32).view(np.float32), "rna", sat)[0])
    assert f(0x3F801000) == 0x3F802000        # a tie rounds away from zero (1 + 2^-11 -> 1 + 2^-10)
    assert f(0xBF801000) == 0xBF802000
    assert f(0x7F7FF000) == 0x7F800000        # past MAX_NORM: +inf
    assert f(0x7F7FF000, True) == tf32.TF32_MAX_NORM_BITS
    assert f(0xFF800000, True) == 0x80000000 | tf32.TF32_MAX_NORM_BITS
    assert f(0x7F800001) == 0x7F800000        # a NaN whose payload is all low bits: an infinity
    assert np.isnan(np.array([f(0x7FC00001, True)], np.uint32).view(np.float32)[0])


def tf32_by_definition(x: np.ndarray, mode: str) -> np.ndarray:
    """x rounded to 10 mantissa bits (8 exponent bits, subnormal spacing 2^-136) in float64, by the format's
    definition: the quotient by the spacing of tf32 values at |x|, rounded to an integer."""
    x = x.astype(np.float64)
    with np.errstate(divide="ignore"):
        exponent = np.maximum(np.floor(np.log2(np.abs(x))), -126)
    spacing = np.exp2(exponent - 10)
    quotient = x / spacing
    rounded = (np.rint(quotient) if mode == "rn" else np.trunc(quotient)) * spacing
    with np.errstate(over="ignore"):
        return rounded.astype(np.float32)  # exact: 11 significant bits; 2^128 becomes inf


@pytest.mark.parametrize("mode", ["rn", "rz"])
def test_rn_and_rz_round_to_ten_mantissa_bits(mode):
    bits = patterns()
    x = bits.view(np.float32)
    finite = np.isfinite(x)
    got = tf32.cvt_tf32(x, mode)
    np.testing.assert_array_equal(got[finite].view(np.float32), tf32_by_definition(x[finite], mode))
    assert not (got & np.uint32(tf32.TF32_LOW_BITS)).any()
    assert (got[np.isnan(x)] == tf32.TF32_NAN_BITS).all()
    infinite = np.isinf(x)
    np.testing.assert_array_equal(got[infinite], bits[infinite])
    relu = tf32.cvt_tf32(x, mode, relu=True).view(np.float32)
    expected = np.where(np.signbit(x), np.float32(0), got.view(np.float32))
    np.testing.assert_array_equal(relu[~np.isnan(x)].view(np.uint32), expected[~np.isnan(x)].view(np.uint32))


def test_forms_sm90a_lacks_are_value_errors():
    for rounding, satfinite, relu in [("rn", True, False), ("rz", True, True), ("rna", False, True), ("rm", False, False)]:
        with pytest.raises(ValueError, match="not an sm_90a instruction"):
            tf32.cvt_tf32(np.zeros(1, np.float32), rounding, satfinite, relu)


KERNEL = """.version 8.1
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 inp)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<2>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    ld.param.u64 %rd1, [inp];
    mul.wide.u32 %rd2, %r0, 4;
    add.s64 %rd3, %rd0, %rd2;
    add.s64 %rd4, %rd1, %rd2;
    ld.global.f32 %f0, [%rd4];
    cvt.FORM.tf32.f32 %r1, %f0;
    st.global.b32 [%rd3], %r1;
    ret;
}
"""
FORMS = {"rna": ("rna", False, False), "rna.satfinite": ("rna", True, False), "rn": ("rn", False, False),
         "rz": ("rz", False, False), "rn.relu": ("rn", False, True), "rz.relu": ("rz", False, True)}


@pytest.mark.parametrize("form", FORMS)
def test_the_executor_runs_each_form(form):
    x = patterns()[:64].view(np.float32)
    out = launch(KERNEL.replace("FORM", form), "k", 1, 64, [np.zeros(64, np.uint32), x])[0]
    np.testing.assert_array_equal(out, tf32.cvt_tf32(x, *FORMS[form]))


@pytest.mark.parametrize("form", ["rn.satfinite", "rz.satfinite", "rna.relu"])
def test_the_executor_refuses_what_sm90a_lacks_by_name(form):
    with pytest.raises(PtxExecutionError, match=rf"cvt.{form}.tf32.f32: not supported by the PTX executor"):
        launch(KERNEL.replace("FORM", form), "k", 1, 32, [np.zeros(32, np.uint32), np.zeros(32, np.float32)])


@pytest.mark.skipif(toolchain.find_ptxas() is None, reason="no ptxas")
@pytest.mark.parametrize("form", [*FORMS, "rn.satfinite", "rz.satfinite", "rna.relu"])
def test_ptxas_takes_exactly_these_forms(form, tmp_path):
    source = tmp_path / "k.ptx"
    source.write_text(KERNEL.replace("FORM", form))
    done = subprocess.run([toolchain.find_ptxas(), "-arch=sm_90a", str(source), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert (done.returncode == 0) == (form in FORMS), done.stderr
