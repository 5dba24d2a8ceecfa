"""cvt to .tf32 [P#data-movement-and-conversion-instructions-cvt]: `cvt.rna{.satfinite}.tf32.f32 d, a` (sm_80)
and `cvt.{rn,rz}{.relu}.tf32.f32 d, a` (sm_90); d is a .b32 register.

The PTX ISA calls the .tf32 layout implementation-defined ("8 exponent bits, >= 10 mantissa bits") and does not
say what a cvt leaves in the bits below the tenth mantissa bit. What ptxas emits for sm_90a does (ptxas 13.0,
disassembled with nvdisasm; tests/test_tf32_cvt.py holds the instructions it printed):

  .rna            FSETP.GEU P0, |a|, +INF ; @!P0 IADD a, a, 0x1000 ; LOP3 d = a & 0xffffe000
  .rna.satfinite  the same, then FSETP.GEU P0, |d|, +INF ; @P0 IADD d, d, -0x2000
  .rn / .rz       F2FP.TF32.F32.PACK_B{.RZ} d, a      (.relu: F2FP.RELU.TF32...)

So .rna on a finite value adds half an ulp of tf32 to the bit pattern and clears the 13 low bits: round to
nearest, ties away from zero, carrying into the exponent (the largest finite f32s become +-inf); an infinity
keeps its bits; a NaN only loses its 13 low bits (a NaN whose payload lies only there becomes an infinity).
.satfinite then moves an infinity (or a NaN) down by 0x2000: +-inf to +-MAX_NORM (0x7f7fe000), a NaN stays a
NaN. ptxas refuses .satfinite with .rn/.rz below sm_100 and .relu with .rna.

.rn and .rz are a hardware conversion (F2FP) whose NaN bits no document gives: here .rn rounds to nearest even
and .rz toward zero to 10 mantissa bits, low 13 bits zero, IEEE overflow (.rn to +-inf, .rz to +-MAX_NORM);
.relu makes negative values +0; a NaN becomes 0x7fffe000 (a NaN, as every consumer of a tf32 reads it: the
tensor core reads the sign, the exponent and the top 10 mantissa bits).
"""

from __future__ import annotations

import numpy as np

TF32_LOW_BITS = 0x1FFF
"""The 13 mantissa bits of an f32 below a tf32's 10."""
TF32_MAX_NORM_BITS = 0x7F7FE000
"""The largest finite tf32: (2 - 2^-10) * 2^127."""
TF32_NAN_BITS = 0x7FFFE000
"""The NaN .rn/.rz write here (the hardware's is undocumented)."""
TF32_CVT_FORMS = {("rna", False, False), ("rna", True, False), ("rn", False, False), ("rz", False, False),
         ("rn", False, True), ("rz", False, True)}
"""(rounding, satfinite, relu) of the cvt.*.tf32.f32 forms ptxas takes for sm_90a."""


def cvt_tf32(a: np.ndarray, rounding: str, satfinite: bool = False, relu: bool = False) -> np.ndarray:
    """The .b32 result of `cvt.<rounding>{.satfinite}{.relu}.tf32.f32` on the f32 values `a` (as uint32).
    ValueError for a form sm_90a does not have (`TF32_CVT_FORMS`)."""
    if (rounding, satfinite, relu) not in TF32_CVT_FORMS:
        raise ValueError(f"cvt.{rounding}{'.satfinite' if satfinite else ''}{'.relu' if relu else ''}.tf32.f32 "
                         "is not an sm_90a instruction")
    x = np.ascontiguousarray(a, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x)
    if rounding == "rna":
        out = (np.where(finite, bits + 0x1000, bits) & 0xFFFFE000).astype(np.uint32)
        if satfinite:
            special = ~np.isfinite(out.view(np.float32))
            out = np.where(special, out - np.uint32(0x2000), out).astype(np.uint32)
        return out
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    kept, rest = magnitude & ~np.uint64(TF32_LOW_BITS), magnitude & TF32_LOW_BITS
    if rounding == "rn":
        up = (rest > 0x1000) | ((rest == 0x1000) & ((kept >> 13) & 1).astype(bool))
        rounded = kept + np.where(up, np.uint64(0x2000), np.uint64(0))  # a carry into the exponent is right; past it, +-inf
    else:
        rounded = kept  # toward zero: a finite value stays at most MAX_NORM
    out = np.where(finite, sign | rounded, bits).astype(np.uint32)  # +-inf keep their bits
    if relu:
        out = np.where(sign.astype(bool) & ~np.isnan(x), np.uint32(0), out).astype(np.uint32)
    return np.where(np.isnan(x), np.uint32(TF32_NAN_BITS), out).astype(np.uint32)
