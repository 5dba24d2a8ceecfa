"""Floating-point instructions: add/sub/mul/div/fma/mad/min/max/abs/neg on f16, bf16, f32, f64 and the packed
f16x2/bf16x2; ex2/lg2/rcp/sqrt/rsqrt/sin/cos/tanh (ex2 and tanh on the 16-bit types too); testp, copysign.
`cvt` between all integer and float types is `conversions`.

Semantics [PTX ISA 9.1, floating-point-instructions-*, half-precision-floating-point-instructions-*],
with the rounding of `numerics` (one correct rounding from the exact value in the instruction's mode; .rn when
none is given):
- `.ftz` (f32 only) flushes subnormal inputs and results to signed zero; `.sat` clamps the result to [0, 1]
  (NaN -> 0); 16-bit and packed types compute each element exactly in float64 and round once;
- `min/max`: a NaN operand yields the other (both NaN: NaN), `+0 > -0`; `.NaN` propagates NaN;
- a NaN result of f32 arithmetic (add/sub/mul/div/fma/min/max) and of 16-bit min/max is the canonical NaN
  (`tessera.sm90.nan`), not a NaN with an input's payload;
- `div.rn`, `div.full` and `div.approx` all return the correctly rounded quotient (the approximate forms are
  within their documented error of it); `rcp.rn/sqrt.rn` are IEEE; `.approx` functions see `numerics`;
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import numerics
from tessera.interpreters.ptx.decode import Operands, opcode
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.types import PtxType, half_pair, pack_pair, ptx_type
from tessera.interpreters.truth import any_set
from tessera.sm90.nan import with_canonical_nans

_HALF = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


def _canonical(f, dtype: np.dtype):
    """f with a NaN result given as `dtype`'s canonical NaN (f32, f16, bf16: `tessera.sm90.nan`)."""

    def canonical(*values):
        return with_canonical_nans(np.asarray(f(*values), dtype))

    return canonical


def _canonical_into(into):
    """`into(out, *values)` (f's values written into the destination `out`) with a NaN result given as the canonical
    NaN, as `_canonical` gives it."""

    def canonical(out, *values):
        into(out, *values)
        fixed = with_canonical_nans(out)
        if fixed is not out:
            out[...] = fixed

    return canonical


def _rounding(ops, inst, mods, default: str = "rn") -> str:
    mode = mods.take(*numerics.MODES)
    return mode or default


def _signed_zero_order(result, a, b, larger: bool):
    """max/min of +0 and -0: +0 is the larger."""
    zeros = a == 0
    if not any_set(zeros):  # the common case, in half the work
        return result
    zeros = zeros & (b == 0)
    if not any_set(zeros):
        return result
    pick = (np.signbit(a) & np.signbit(b)) if larger else (np.signbit(a) | np.signbit(b))
    return np.where(zeros, np.where(pick, -0.0, 0.0).astype(result.dtype), result)


def _binary_function(ops, inst, mods, name: str, dtype: np.dtype, f64: bool):
    """f(a, b) on float arrays of `dtype` (the element type), with one rounding."""
    if name in ("min", "max"):
        nan = mods.take("NaN")
        xorsign, absolute = mods.take("xorsign"), mods.take("abs")
        if bool(xorsign) != bool(absolute) or (xorsign and f64):
            raise ops.refuse(inst, "min/max .xorsign without .abs, or on .f64")
        larger = name == "max"
        pick = (np.maximum if larger else np.minimum) if nan else (np.fmax if larger else np.fmin)
        if not xorsign:
            f = lambda a, b: _signed_zero_order(pick(a, b), a, b, larger).astype(dtype, copy=False)  # noqa: E731
            if dtype == np.float32:
                def into(out, a, b):
                    """f's values into `out`; computed apart where `out` is an operand (read again for +-0)."""
                    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
                        out[...] = f(a, b)
                        return
                    pick(a, b, out=out)
                    ordered = _signed_zero_order(out, a, b, larger)
                    if ordered is not out:
                        out[...] = ordered
                f.into = into
            return f

        def xor_signed(a, b):
            """.xorsign.abs: min/max of |a| and |b| (NaN as without it), its sign that of a times b."""
            negative = np.signbit(a) ^ np.signbit(b)
            d = pick(np.abs(a), np.abs(b))
            return np.where(negative & ~np.isnan(d), -d, d).astype(dtype, copy=False)
        return xor_signed
    if name == "div":
        kind = mods.take("approx", "full")
        mode = "rn" if kind else mods.take(*numerics.MODES)
        if mode is None:
            raise ops.refuse(inst, "div on floats needs .approx, .full or a rounding mode")
        return lambda a, b: numerics.divide(a, b, dtype, mode)
    mode = _rounding(ops, inst, mods)
    if f64 and mode != "rn":
        raise ops.refuse(inst, "directed rounding of f64 arithmetic")
    if name == "add":
        f = lambda a, b: numerics.add(a, b, dtype, mode)  # noqa: E731
    elif name == "sub":
        return lambda a, b: numerics.add(a, -b, dtype, mode)
    elif name == "mul":
        f = lambda a, b: numerics.mul(a, b, dtype, mode)  # noqa: E731
    else:
        raise ops.refuse(inst, f"float {name}")
    if mode == "rn" and dtype == np.float32:  # (numerics.add and mul: f32 arithmetic, one rounding to nearest)
        ufunc = np.add if name == "add" else np.multiply
        f.into = lambda out, a, b: ufunc(a, b, out=out)
    return f


def _elementwise(ops, inst, t: PtxType, count: int, f, ftz: bool, sat: bool, into=None):
    """run(sel) computing f over `count` float sources of type t (packed x2 types per half); `into(out, *values)`,
    where given, computes f's values into the destination `out` (`Operands.write`'s target: a fused group's rows, a
    batch's every lane) without a copy of its own, where no .ftz or .sat applies."""
    if len(inst.operands) != count + 1:
        raise ops.refuse(inst, f"expected {count + 1} operands")
    readers = [ops.read(inst, o, t) for o in inst.operands[1:]]
    write = ops.write(inst, inst.operands[0], t)
    if t.kind == "x2":
        half = _HALF[t.half]

        def one(values):
            out = f(*[v.astype(half) for v in values])
            return numerics.saturate(out) if sat else out

        def run_x2(sel):
            pairs = [half_pair(r(sel), t.half) for r in readers]
            lo = one([p[0] for p in pairs]).astype(half).view(np.uint16)
            hi = one([p[1] for p in pairs]).astype(half).view(np.uint16)
            write(sel, pack_pair(lo, hi))
        return run_x2
    flush = ftz and t.name == "f32"
    target = getattr(write, "target", None) if into is not None and not (flush or sat) else None

    def run(sel):
        values = [r(sel) for r in readers]
        out = target(sel) if target is not None else None
        if out is not None:
            into(out, *values)
            return
        if flush:
            values = [flush_f32(v) for v in values]
        out = np.asarray(f(*values), t.dtype)
        if flush:
            out = flush_f32(out)
        write(sel, numerics.saturate(out) if sat else out)

    return run


def decode_binary(ops: Operands, inst, mods):
    """add/sub/mul/div/min/max on a float type."""
    t = mods.type()
    ftz, sat = mods.take("ftz"), mods.take("sat")
    dtype = _HALF[t.half] if t.kind == "x2" else t.dtype
    if inst.opcode == "mul" and mods.take("lo", "hi", "wide"):
        raise ops.refuse(inst, ".lo/.hi/.wide on a float mul")
    f = _binary_function(ops, inst, mods, inst.opcode, dtype, t.name == "f64")
    into = getattr(f, "into", None)
    if dtype == np.float32 or (dtype != np.float64 and inst.opcode in ("min", "max")):
        f = _canonical(f, dtype)
        into = into and _canonical_into(into)
    return _elementwise(ops, inst, t, 2, f, bool(ftz), bool(sat), into)


def decode_fma(ops: Operands, inst, mods):
    """fma/mad on a float type: one rounding (mad.f32 without a rounding is fma.rn, as on sm_20+). `.relu` (on
    .f16, .bf16 and their x2 forms: `__hfma2_relu`) clamps a negative result to 0 and gives the canonical NaN
    for a NaN; `.oob` is refused."""
    t = mods.type()
    ftz, sat = mods.take("ftz"), mods.take("sat")
    if mods.take("oob"):
        raise ops.refuse(inst, "fma .oob")
    relu = mods.take("relu") is not None
    if relu and (t.name not in ("f16", "bf16", "f16x2", "bf16x2") or sat):
        raise ops.refuse(inst, f"fma .relu on .{t.name}{' with .sat' if sat else ''} (only .f16/.bf16 and x2)")
    mode = _rounding(ops, inst, mods)
    if t.name == "f64" and mode != "rn":
        raise ops.refuse(inst, "directed rounding of f64 fma")
    dtype = _HALF[t.half] if t.kind == "x2" else t.dtype

    def fused(a, b, c):
        out = np.asarray(numerics.fma(a, b, c, dtype, mode), dtype)
        return np.where(out < 0, dtype.type(0), out) if relu else out

    canonical = relu or dtype == np.float32  # .relu: the PTX ISA's canonical NaN for a NaN result
    into = _canonical_into(lambda out, a, b, c: numerics.fma(a, b, c, dtype, mode, out)) \
        if dtype == np.float32 and not relu else None
    return _elementwise(ops, inst, t, 3, _canonical(fused, dtype) if canonical else fused, bool(ftz), bool(sat), into)


opcode("fma")(decode_fma)


def decode_unary(ops: Operands, inst, mods):
    """abs/neg on a float type (exact; .ftz flushes)."""
    t = mods.type()
    ftz = mods.take("ftz")
    f = np.abs if inst.opcode == "abs" else np.negative
    return _elementwise(ops, inst, t, 1, f, bool(ftz), False)


def _flush_f64(x: np.ndarray) -> np.ndarray:
    """Subnormal f64 values to zero of the same sign."""
    return np.where(np.abs(x) < np.finfo(np.float64).tiny, np.copysign(0.0, x), x)


def _approx_f64(name: str, x: np.ndarray, ftz: bool) -> np.ndarray:
    """`rcp.approx.ftz.f64` / `rsqrt.approx{.ftz}.f64`: approximations (nvcc uses them as seeds of Newton
    iterations for f64 division and square roots), modelled by the correctly rounded value, which is within
    any error bound of the approximation; .ftz flushes subnormal inputs and results to signed zero."""
    if ftz:
        x = _flush_f64(x)
    out = 1.0 / x if name == "rcp" else 1.0 / np.sqrt(x)
    return _flush_f64(out) if ftz else out


_HALF_APPROX = {("ex2", "f16"): False, ("ex2", "bf16"): True, ("tanh", "f16"): False, ("tanh", "bf16"): False}
"""The 16-bit .approx functions [P#half-precision-floating-point-instructions-ex2, -tanh]: `ex2.approx.{f16,f16x2}`,
`ex2.approx.ftz.{bf16,bf16x2}`, `tanh.approx.{f16,f16x2,bf16,bf16x2}` (CUTLASS's fast GELU on half2); per (function,
type), whether the form has .ftz (the bf16 ex2 must, the others must not)."""


def _approx_half(ops: Operands, inst, t, name: str, ftz: bool):
    """A 16-bit `.approx` function (`_HALF_APPROX`), modelled as for f32 by the correctly rounded value (within any
    bound of the approximation): the exact function of the input in float64 rounded once to the type; .ftz flushes
    subnormal inputs and results to zero of their sign; a NaN result is the type's canonical NaN."""
    half = t.half or t.name
    if _HALF_APPROX[(name, half)] != ftz:
        form = f"{name}.approx{'.ftz' * _HALF_APPROX[(name, half)]}.{half}"
        raise ops.refuse(inst, f"{name}.approx{'.ftz' * ftz}.{t.name} (the form is {form} or {form}x2)")
    dtype = _HALF[half]
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)

    def f(x):
        x = x.astype(np.float64)
        if ftz:
            x = np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)
        with np.errstate(all="ignore"):
            out = numerics.round_f64(numerics.APPROX[name](x), dtype)
        return np.where(np.abs(out) < tiny, np.copysign(0.0, out), out).astype(dtype) if ftz else out

    return _elementwise(ops, inst, t, 1, _canonical(f, dtype), False, False)


@opcode("ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh")
def decode_special_function(ops: Operands, inst, mods):
    t = mods.type()
    approx = mods.take("approx")
    ftz = bool(mods.take("ftz"))
    mode = mods.take(*numerics.MODES)
    if approx and mode:
        raise ops.refuse(inst, ".approx with a rounding mode")
    if len(inst.operands) != 2:
        raise ops.refuse(inst, "expected 2 operands")
    read = ops.read(inst, inst.operands[1], t)
    write = ops.write(inst, inst.operands[0], t)
    name = inst.opcode
    if approx and t.name == "f64" and (name, ftz) in (("rcp", True), ("rsqrt", False), ("rsqrt", True)):
        return lambda sel: write(sel, _approx_f64(name, np.asarray(read(sel), np.float64), ftz))
    if approx and (name, t.half or t.name) in _HALF_APPROX:
        return _approx_half(ops, inst, t, name, ftz)
    if approx:
        if t.name != "f32":
            raise ops.refuse(inst, f"{name}.approx on .{t.name}")
        target = getattr(write, "target", None)  # (`Operands.write`: the destination to compute into)

        def run_approx(sel):
            out = target(sel) if target is not None else None
            result = numerics.approx(name, read(sel), ftz, out)
            if out is None:
                write(sel, result)
        return run_approx
    if name not in ("rcp", "sqrt") or mode is None or t.name not in ("f32", "f64"):
        raise ops.refuse(inst, f"{name} without .approx (only rcp/sqrt with a rounding mode)")
    if t.name == "f64" and mode != "rn":
        raise ops.refuse(inst, "directed rounding of f64 rcp/sqrt")
    one = t.dtype.type(1)

    def run(sel):
        x = read(sel)
        if ftz:
            x = flush_f32(x)
        out = numerics.divide(one, x, t.dtype, mode) if name == "rcp" else numerics.sqrt(x, t.dtype, mode)
        write(sel, flush_f32(out) if ftz else out)

    return run


@opcode("testp")
def decode_testp(ops: Operands, inst, mods):
    t = mods.type()
    test = mods.take("finite", "infinite", "number", "notanumber", "normal", "subnormal")
    if test is None or t.kind != "f":
        raise ops.refuse(inst, "testp needs a test and a float type")
    read = ops.read(inst, inst.operands[1], t)
    write = ops.write(inst, inst.operands[0], ptx_type("pred"))
    tiny = np.finfo(t.dtype).tiny if t.name != "bf16" else ml_dtypes.finfo(ml_dtypes.bfloat16).tiny
    tests = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan,
             "normal": lambda x: np.isfinite(x) & (np.abs(x) >= tiny),
             "subnormal": lambda x: (x != 0) & (np.abs(x) < tiny)}
    f = tests[test]
    return lambda sel: write(sel, f(read(sel)))


@opcode("copysign")
def decode_copysign(ops: Operands, inst, mods):
    t = mods.type()
    a, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    write = ops.write(inst, inst.operands[0], t)
    return lambda sel: write(sel, np.copysign(b(sel), a(sel)).astype(t.dtype))
