"""`cvt`: conversions between all integer and float types, the packed 16-bit pairs, fp8 pairs and tf32.

Semantics [PTX ISA 9.1, data-movement-and-conversion-instructions-cvt], with the rounding of `numerics` (one
correct rounding from the exact value in the instruction's mode):
- cvt: int->int truncates or extends (`.sat` clamps to the destination range); float->int needs an integer
  rounding (.rni/.rzi/.rmi/.rpi), saturates and maps NaN to 0; float->float narrows with .rn/.rz/.rm/.rp
  (optional `.satfinite`: clamp to the largest finite value, `.relu`: negative -> 0) and widens exactly;
  same-type float cvt with an integer rounding rounds to an integral value;
  `cvt.rn.{f16x2,bf16x2}.f32 d, a, b` puts a in the upper half and b in the lower half (facts.packing);
  `cvt.rna{.satfinite}.tf32.f32` and `cvt.{rn,rz}{.relu}.tf32.f32` write the bits `tessera.sm90.tf32` gives.

The 16-bit float dtypes by name (`_HALF`) are `floats`'.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import numerics
from tessera.interpreters.ptx.decode import Operands, opcode
from tessera.interpreters.ptx.floats import _HALF
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.types import half_pair, pack_pair, ptx_type
from tessera.sm90 import tf32
from tessera.sm90.fp8 import satfinite_f32


def _satfinite(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    big = dtype.type(ml_dtypes.finfo(dtype).max) if dtype == _HALF["bf16"] else dtype.type(np.finfo(dtype).max)
    return np.where(np.isinf(x), np.copysign(big, x.astype(np.float32)).astype(dtype), x).astype(dtype)


def _narrow(x: np.ndarray, dtype: np.dtype, mode: str, relu: bool, satfinite: bool) -> np.ndarray:
    """f32/f64 values to a float dtype in `mode`."""
    if relu:
        x = np.where(np.isnan(x), x, np.maximum(x, 0)).astype(x.dtype)
    out = numerics.round_f64(x, dtype, mode) if x.dtype == np.float64 else numerics.round_f32(x, dtype, mode)
    return _satfinite(out, dtype) if satfinite else out


_HIGH_HALF, _HALF_BITS = np.uint32(0xFFFF0000), np.uint32(16)

_FP8 = {"e4m3x2": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2x2": np.dtype(ml_dtypes.float8_e5m2)}


def _decode_cvt_fp8(ops: Operands, inst, mods, dst: str, src: str):
    """`cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, a, b` (d.hi = a, d.lo = b, a 16-bit d),
    `cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f16x2 d, a`, and `cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a`.
    Rounding to nearest even; .satfinite clamps out-of-range values and infinities to the largest finite
    value (NaN stays NaN): `tessera.sm90.fp8.satfinite_f32`, the facts' one statement of it."""
    del mods.left[-2:]
    mode = mods.take("rn")
    satfinite, relu = bool(mods.take("satfinite")), bool(mods.take("relu"))
    if mode is None:
        raise ops.refuse(inst, f"cvt.{dst}.{src} needs .rn")
    m_bits = ptx_type("b16")
    if dst == "f16x2":
        if src not in _FP8 or len(inst.operands) != 2:
            raise ops.refuse(inst, f"cvt.{dst}.{src}")
        read, write = ops.read(inst, inst.operands[1], m_bits), ops.write(inst, inst.operands[0], ptx_type("b32"))
        fp8 = _FP8[src]

        def run_widen(sel):
            pair = np.ascontiguousarray(np.asarray(read(sel), np.uint16).reshape(-1)).view(np.uint8).view(fp8)
            wide = pair.astype(np.float32)
            if relu:
                wide = np.where(np.isnan(wide), wide, np.maximum(wide, 0))
            halves = wide.astype(np.float16).view(np.uint16).reshape(-1, 2)
            write(sel, pack_pair(halves[:, 0], halves[:, 1]))
        return run_widen
    if not satfinite or src not in ("f32", "f16x2"):
        raise ops.refuse(inst, f"cvt.{dst}.{src} (only .satfinite from .f32 or .f16x2)")
    fmt = dst.removesuffix("x2")
    if src == "f32":
        if len(inst.operands) != 3:
            raise ops.refuse(inst, f"cvt.{dst}.f32 needs two sources")
        high, low = (ops.read(inst, o, ptx_type("f32")) for o in inst.operands[1:])

        def sources(sel):
            return np.asarray(low(sel), np.float32), np.asarray(high(sel), np.float32)
    else:
        if len(inst.operands) != 2:
            raise ops.refuse(inst, f"cvt.{dst}.f16x2 needs one source")
        pair = ops.read(inst, inst.operands[1], ptx_type("b32"))

        def sources(sel):
            lo, hi = half_pair(np.asarray(pair(sel), np.uint32), "f16")
            return lo.astype(np.float32), hi.astype(np.float32)
    write = ops.write(inst, inst.operands[0], m_bits)

    def narrow(x):
        if relu:
            x = np.where(np.isnan(x), x, np.maximum(x, 0))
        return satfinite_f32(x, fmt).view(np.uint8).astype(np.uint16)

    def run_narrow(sel):
        lo, hi = sources(sel)
        write(sel, narrow(np.atleast_1d(lo)) | (narrow(np.atleast_1d(hi)) << np.uint16(8)))
    return run_narrow


def _decode_cvt_tf32(ops: Operands, inst, mods):
    """`cvt.rna{.satfinite}.tf32.f32 d, a` and `cvt.{rn,rz}{.relu}.tf32.f32 d, a` into a .b32 d, with the
    bits `tessera.sm90.tf32.cvt_tf32` gives (what ptxas emits for sm_90a); other forms are refused by name."""
    del mods.left[-2:]
    rounding = mods.take("rna", "rn", "rz")
    satfinite, relu = bool(mods.take("satfinite")), bool(mods.take("relu"))
    if (rounding, satfinite, relu) not in tf32.TF32_CVT_FORMS or len(inst.operands) != 2:
        raise ops.refuse(inst, "cvt to .tf32 other than cvt.rna{.satfinite}.tf32.f32 or "
                               "cvt.{rn,rz}{.relu}.tf32.f32 d, a (sm_90a's forms)")
    read, write = ops.read(inst, inst.operands[1], ptx_type("f32")), ops.write(inst, inst.operands[0], ptx_type("b32"))
    return lambda sel: write(sel, tf32.cvt_tf32(np.atleast_1d(read(sel)), rounding, satfinite, relu))


@opcode("cvt")
def decode_cvt(ops: Operands, inst, mods):
    if len(mods.left) >= 2 and (mods.left[-1] in _FP8 or mods.left[-2] in _FP8):
        return _decode_cvt_fp8(ops, inst, mods, mods.left[-2], mods.left[-1])
    if mods.left[-2:] == ["tf32", "f32"]:
        return _decode_cvt_tf32(ops, inst, mods)
    dst, src = mods.types(2)
    ftz, sat = bool(mods.take("ftz")), bool(mods.take("sat"))
    relu, satfinite = bool(mods.take("relu")), bool(mods.take("satfinite"))
    irnd = mods.take(*numerics.INTEGER_MODES)
    frnd = mods.take(*numerics.MODES)
    write = ops.write(inst, inst.operands[0], dst)
    if dst.kind == "x2":
        if src.name != "f32" or len(inst.operands) != 3 or irnd:
            raise ops.refuse(inst, f"cvt to .{dst.name} needs two .f32 sources")
        hi, lo = (ops.read(inst, o, src) for o in inst.operands[1:3])
        half = _HALF[dst.half]
        mode = frnd or "rn"
        words = dst.half == "bf16" and mode == "rn" and not (relu or satfinite)  # (`numerics.bf16_rn_words`)

        target = getattr(write, "target", None)  # (`Operands.write`: the destination to compute into)

        def run_pack(sel):
            high, low = np.asarray(hi(sel), np.float32), np.asarray(lo(sel), np.float32)
            if words and not (numerics.has_nan_f32(high) or numerics.has_nan_f32(low)):
                high, low = numerics.bf16_rn_words(high) & _HIGH_HALF, numerics.bf16_rn_words(low) >> _HALF_BITS
                out = target(sel) if target is not None else None
                if out is None:
                    write(sel, high | low)
                else:
                    np.bitwise_or(high, low, out=out)
                return
            high = _narrow(high, half, mode, relu, satfinite).view(np.uint16)
            low = _narrow(low, half, mode, relu, satfinite).view(np.uint16)
            write(sel, pack_pair(low, high))
        return run_pack
    if len(inst.operands) != 2 or dst.kind not in ("b", "u", "s", "f") or src.kind not in ("b", "u", "s", "f"):
        raise ops.refuse(inst, f"cvt.{dst.name}.{src.name}")
    read = ops.read(inst, inst.operands[1], src)
    flush = ftz and src.name == "f32"

    def source(sel):
        x = read(sel)
        return flush_f32(x) if flush else x

    if dst.kind != "f" and src.kind != "f":  # integer <- integer
        if irnd or frnd:
            raise ops.refuse(inst, "rounding modifier on an integer conversion")
        info = np.iinfo(dst.dtype)

        def run_int(sel):
            x = np.asarray(source(sel))
            if sat:
                wide = x.astype(np.float64) if x.dtype.itemsize == 8 else x.astype(np.int64)
                x = np.where(wide < info.min, info.min, np.where(wide > info.max, info.max, x))
            write(sel, np.asarray(x).astype(dst.dtype))
        return run_int
    if dst.kind != "f":  # integer <- float
        if irnd is None:
            raise ops.refuse(inst, "float-to-integer cvt needs .rni/.rzi/.rmi/.rpi")
        rounding = numerics.INTEGER_MODES[irnd]
        return lambda sel: write(sel, numerics.float_to_int(source(sel), dst.dtype, rounding))
    if src.kind != "f":  # float <- integer
        if irnd:
            raise ops.refuse(inst, "integer rounding on an int-to-float cvt")
        mode = frnd or "rn"

        def run_from_int(sel):
            out = numerics.int_to_float(np.asarray(read(sel)), dst.dtype, mode)
            write(sel, numerics.saturate(out) if sat else out)
        return run_from_int
    # float <- float
    if irnd:
        if dst.name != src.name:
            raise ops.refuse(inst, "integer rounding between different float types")
        rounding = numerics.INTEGER_MODES[irnd]

        def run_integral(sel):
            out = rounding(source(sel)).astype(dst.dtype)
            write(sel, numerics.saturate(out) if sat else out)
        return run_integral
    narrowing = dst.bits < src.bits or (dst.bits == src.bits and dst.name != src.name)
    if dst.bits < src.bits and frnd is None:  # the ISA's list of conversions whose rounding is mandatory
        raise ops.refuse(inst, f"cvt.{dst.name}.{src.name} needs a rounding modifier")
    # .f16 <-> .bf16 may omit it (ptxas accepts cvt.bf16.f16, which Triton's fp8 -> bf16 path emits): the
    # default rounding of PTX floating-point instructions, to nearest even, as with .rn.
    mode = frnd or "rn"

    def run_float(sel):
        x = np.asarray(source(sel))
        if narrowing:
            wide = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
            out = _narrow(wide, dst.dtype, mode, relu, satfinite)
        else:
            out = x.astype(dst.dtype)
        if ftz and dst.name == "f32":
            out = flush_f32(out)
        write(sel, numerics.saturate(out) if sat else out)

    return run_float
