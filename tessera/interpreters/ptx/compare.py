"""Comparison and selection instructions: setp, set, selp.

Semantics [PTX ISA 9.1, comparison-and-selection-instructions]: setp compares (signed/unsigned/float, ordered
and unordered) and combines with `.and/.or/.xor` and an optional third predicate: p = (a cmp b) op c,
q = !(a cmp b) op c; `set` writes all ones (an integer destination) or 1.0 (a float one) for true; `selp`
picks a or b by a predicate.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx import floats
from tessera.interpreters.ptx.decode import Operands, elements, lane_count, opcode, per_lane
from tessera.interpreters.ptx.types import PtxType, half_pair, pack_pair, ptx_type


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
            "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


def compare_function(ops: Operands, inst, cmp: str, t: PtxType):
    """The comparison of setp/set for type t (NaN-aware for floats)."""
    if t.kind == "f":
        if cmp in ("num", "nan"):
            return (lambda a, b: ~(np.isnan(a) | np.isnan(b))) if cmp == "num" else \
                (lambda a, b: np.isnan(a) | np.isnan(b))
        if cmp.endswith("u") and cmp[:-1] in ("eq", "ne", "lt", "le", "gt", "ge"):
            f = _COMPARE[cmp[:-1]]
            return lambda a, b: f(a, b) | np.isnan(a) | np.isnan(b)
        if cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
            f = _COMPARE[cmp]
            return lambda a, b: f(a, b) & ~(np.isnan(a) | np.isnan(b))
        raise ops.refuse(inst, f"comparison .{cmp} on .{t.name}")
    if cmp in ("lo", "ls", "hi", "hs") and t.kind == "s":
        raise ops.refuse(inst, f"unsigned comparison .{cmp} on .{t.name}")
    if cmp not in _COMPARE or (t.kind == "b" and cmp not in ("eq", "ne")):
        raise ops.refuse(inst, f"comparison .{cmp} on .{t.name}")
    return _COMPARE[cmp]


@opcode("setp")
def decode_setp(ops: Operands, inst, mods):
    t = mods.type()
    ftz = mods.take("ftz")
    combine = mods.take("and", "or", "xor")
    if len(mods.left) != 1:
        raise ops.refuse(inst, "setp needs exactly one comparison")
    cmp = mods.left.pop()
    compare = compare_function(ops, inst, cmp, t)
    n_src = 3 if combine else 2
    if len(inst.operands) != 1 + n_src:
        raise ops.refuse(inst, f"setp{'.' + combine if combine else ''} needs {1 + n_src} operands")
    a, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    if ftz and t.name == "f32":
        a0, b0 = a, b
        a, b = (lambda sel: floats.flush_f32(a0(sel))), (lambda sel: floats.flush_f32(b0(sel)))
    pred = ptx_type("pred")
    c = ops.read(inst, inst.operands[3], pred) if combine else None
    dests = elements(inst.operands[0])
    write_p = ops.write(inst, dests[0], pred)
    write_q = ops.write(inst, dests[1], pred) if len(dests) > 1 else None
    f = _BOOL[combine] if combine else None

    def run(sel):
        result = per_lane(compare(a(sel), b(sel)), (lane_count(ops, sel),))
        if f is None:
            write_p(sel, result)
            if write_q is not None:
                write_q(sel, ~result)
        else:
            third = c(sel)
            write_p(sel, f(result, third))
            if write_q is not None:
                write_q(sel, f(~result, third))

    return run


_ONE_BITS = {"f32": 0x3F800000, "f16": 0x3C00, "bf16": 0x3F80}
"""1.0 as .f32, .f16 and .bf16 bits: what `set` writes for true into a float destination."""


@opcode("set")
def decode_set(ops: Operands, inst, mods):
    """`set.CmpOp.dtype.stype d, a, b` [P#comparison-and-selection-instructions-set, P#half-precision-comparison-
    instructions-set]: d = true ? (1.0 for a float dtype, all ones for an integer one) : 0, per half for the
    packed .f16x2/.bf16x2 sources (cuda_fp16.h's comparisons and special-value tests: `set.nan.f16.f16`,
    `set.eq.f16x2.f16x2`). Flushing (.ftz on 16-bit sources) and a predicate operand (.and/.or/.xor) are
    refused by name."""
    names = [x for x in mods.left if ptx_type(x) is not None]
    if len(names) != 2:
        raise ops.refuse(inst, "set needs a destination type and a source type")
    for name in names:
        mods.left.remove(name)
    dst, src = (ptx_type(x) for x in names)
    ftz = mods.take("ftz")
    if mods.take("and", "or", "xor") or len(inst.operands) != 3:
        raise ops.refuse(inst, "set with a predicate operand (.and/.or/.xor)")
    if ftz and src.name != "f32":
        raise ops.refuse(inst, f"set.ftz on .{src.name}")
    packed = src.kind == "x2"  # per half: into a packed float pair, or .u32/.s32 halves of all ones
    if len(mods.left) != 1 or (dst.kind == "x2" and not packed) or (packed and dst.kind not in ("x2", "u", "s")):
        raise ops.refuse(inst, f"set.{'.'.join(mods.left)}.{dst.name}.{src.name}")
    cmp = mods.left.pop()
    compare = compare_function(ops, inst, cmp, ptx_type(src.half) if packed else src)
    a, b = (ops.read(inst, o, src) for o in inst.operands[1:3])
    write = ops.write(inst, inst.operands[0], ptx_type("b32") if packed else dst)
    bits = 16 if packed else dst.bits
    one = _ONE_BITS.get(dst.half if dst.kind == "x2" else dst.name, (1 << bits) - 1)
    unsigned = np.dtype(f"uint{bits}")

    def truth(x, y):
        if ftz:
            x, y = floats.flush_f32(x), floats.flush_f32(y)
        return np.where(compare(x, y), unsigned.type(one), unsigned.type(0))

    def run(sel):
        x, y = a(sel), b(sel)
        if packed:
            (x_lo, x_hi), (y_lo, y_hi) = half_pair(x, src.half), half_pair(y, src.half)
            out = pack_pair(truth(x_lo, y_lo), truth(x_hi, y_hi))
        else:
            out = truth(np.asarray(x), np.asarray(y))
        write(sel, np.broadcast_to(out, (lane_count(ops, sel),)).view(write_dtype))

    write_dtype = np.dtype(np.uint32) if packed else dst.dtype
    return run


@opcode("selp")
def decode_selp(ops: Operands, inst, mods):
    t = mods.type()
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "selp needs 4 operands")
    a, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    c = ops.read(inst, inst.operands[3], ptx_type("pred"))
    write = ops.write(inst, inst.operands[0], t)
    return lambda sel: write(sel, np.where(c(sel), a(sel), b(sel)).astype(t.dtype))
