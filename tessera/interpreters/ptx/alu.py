"""Integer arithmetic and data movement: mov, add/sub/mul/mad/div/rem, min/max/abs/neg, sad, carry chains
(add.cc/addc/sub.cc/subc, mad.cc/madc). Logic, shifts and bit fields are in `logic`, dp4a/dp2a and the SIMD
video instructions in `simd`, setp/set/selp in `compare`.

Semantics [PTX ISA 9.1, integer-arithmetic-instructions, data-movement-and-conversion-instructions-mov]:
- integer results wrap at the type's width (NumPy arithmetic on the type's dtype); `add/sub.sat.s32` clamp;
- `mul.lo` keeps the low half, `mul.hi` the high half of the 2n-bit product, `mul.wide` (16/32-bit types)
  the whole product in the 2n-bit type; `mad` adds c to the same product (wrapping);
- `div` truncates toward zero (`MIN / -1` wraps to MIN), `rem` has the sign of the dividend. PTX leaves
  division by zero unspecified: the executor stops with an error naming the instruction and the thread;
- carry chains [extended-precision-integer-arithmetic-instructions]: a thread's condition code is one bit,
  CC.CF (`Machine.carry`). `add.cc` writes the carry out of a + b, `sub.cc` the borrow out of a - b;
  `addc{.cc}` computes a + b + CF, `subc{.cc}` a - (b + CF) and `madc{.lo,.hi}{.cc}` (a * b).half + c + CF,
  writing the new carry (borrow) only with `.cc`; `mad{.lo,.hi}.cc` is mad writing the carry of its addition.
  All on the unsigned bits of .u32/.s32/.u64/.s64;
- float operands of add/sub/mul/mad/fma/min/max/abs/neg/div go to `floats`;
- mov packs `{a, b, ...}` with the first element in the low bits and unpacks the same way; mov of a symbol
  gives its address in its own state space.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx import floats
from tessera.interpreters.ptx.decode import Operands, lane_count, opcode, sources
from tessera.interpreters.ptx.syntax import Vector
from tessera.interpreters.ptx.types import PtxType, ptx_type
from tessera.interpreters.truth import any_set


def _float_last(inst) -> bool:
    t = ptx_type(inst.modifiers[-1]) if inst.modifiers else None
    return t is not None and t.kind in ("f", "x2")


# region add, sub, mul, mad, div, rem, min, max, abs, neg
@opcode("add", "sub")
def decode_add(ops: Operands, inst, mods):
    if _float_last(inst):
        return floats.decode_binary(ops, inst, mods)
    if "cc" in inst.modifiers:
        return _decode_carry(ops, inst, mods, subtract=inst.opcode == "sub", carry_in=False)
    sat = mods.take("sat")
    t = mods.type()
    if sat and t.name != "s32":
        raise ops.refuse(inst, ".sat needs .s32")
    a, b = sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    subtract = inst.opcode == "sub"
    if sat:
        def run_sat(sel):
            wide = a(sel).astype(np.int64)
            wide = wide - b(sel) if subtract else wide + b(sel)
            write(sel, np.clip(wide, -2**31, 2**31 - 1).astype(np.int32))
        return run_sat
    ufunc = np.subtract if subtract else np.add
    target = getattr(write, "target", None)  # (`Operands.write`: the destination to compute into)

    def run(sel):
        out = target(sel) if target is not None else None
        if out is None:
            write(sel, ufunc(a(sel), b(sel)))
        else:
            ufunc(a(sel), b(sel), out=out)
    return run


def _wide_type(t: PtxType) -> PtxType:
    return ptx_type(f"{t.kind}{t.bits * 2}")


def _mul_hi64(a: np.ndarray, b: np.ndarray, signed: bool) -> np.ndarray:
    """High 64 bits of the 128-bit product, from 32-bit halves."""
    ua, ub = np.asarray(a).view(np.uint64) if signed else np.asarray(a), np.asarray(b).view(np.uint64) if signed \
        else np.asarray(b)
    ua, ub = np.asarray(ua, np.uint64), np.asarray(ub, np.uint64)
    mask = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = ua & mask, ua >> s32, ub & mask, ub >> s32
    lo_lo = a_lo * b_lo
    mid1 = a_hi * b_lo + (lo_lo >> s32)
    mid2 = a_lo * b_hi + (mid1 & mask)
    hi = a_hi * b_hi + (mid1 >> s32) + (mid2 >> s32)
    if signed:
        hi = hi - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
        return hi.view(np.int64)
    return hi


def _product(mode: str, t: PtxType):
    """The product function of mul.lo/hi/wide on type t."""
    if mode == "lo":
        return lambda a, b: a * b
    if mode == "wide":
        wide = _wide_type(t).dtype
        return lambda a, b: a.astype(wide) * b.astype(wide)
    if t.bits == 64:
        return lambda a, b: _mul_hi64(a, b, t.kind == "s")
    wide = _wide_type(t).dtype
    return lambda a, b: ((a.astype(wide) * b.astype(wide)) >> t.bits).astype(t.dtype)


@opcode("mul", "mad")
def decode_mul(ops: Operands, inst, mods):
    if _float_last(inst):
        return floats.decode_fma(ops, inst, mods) if inst.opcode == "mad" else floats.decode_binary(ops, inst, mods)
    if inst.opcode == "mad" and "cc" in inst.modifiers:
        return _decode_carry(ops, inst, mods, subtract=False, carry_in=False, multiply=True)
    mode = mods.take("lo", "hi", "wide")
    if mode is None:
        raise ops.refuse(inst, "integer mul/mad needs .lo, .hi or .wide")
    if mods.take("sat", "cc"):
        raise ops.refuse(inst, ".sat/.cc on integer mul/mad")
    t = mods.type()
    if t.kind == "b":
        raise ops.refuse(inst, f"integer mul/mad on .{t.name} (use .u/.s)")
    if mode == "wide" and t.bits not in (16, 32):
        raise ops.refuse(inst, ".wide needs a 16- or 32-bit type")
    result_type = _wide_type(t) if mode == "wide" else t
    product = _product(mode, t)
    write = ops.write(inst, inst.operands[0], result_type)
    if inst.opcode == "mul":
        a, b = sources(ops, inst, t, 2)
        return lambda sel: write(sel, product(a(sel), b(sel)))
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "mad needs 4 operands")
    a, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    c = ops.read(inst, inst.operands[3], result_type)
    return lambda sel: write(sel, product(a(sel), b(sel)) + c(sel))


def _integer_divide(a, b, signed: bool):
    """(quotient, remainder) truncating toward zero; b has no zeros."""
    q = a // b
    if signed:
        r = a - q * b
        adjust = (r != 0) & ((a < 0) != (b < 0))
        q = np.where(adjust, q + 1, q).astype(a.dtype)
    return q, (a - q * b).astype(a.dtype)


@opcode("div", "rem")
def decode_div(ops: Operands, inst, mods):
    if _float_last(inst):
        return floats.decode_binary(ops, inst, mods)
    t = mods.type()
    if t.kind == "b":
        raise ops.refuse(inst, f"div/rem on .{t.name}")
    a, b = sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    m, index = ops.m, 1 if inst.opcode == "rem" else 0

    def run(sel):
        x, y = np.broadcast_arrays(a(sel), b(sel))
        zero = y == 0
        if any_set(zero):
            lane = m.lane_ids[sel][np.argmax(zero)] if not np.isscalar(sel) else 0
            raise m.error(inst, "division by zero (PTX leaves the result unspecified; the executor refuses)", lane)
        write(sel, _integer_divide(x, y, t.kind == "s")[index])

    return run


@opcode("min", "max")
def decode_minmax(ops: Operands, inst, mods):
    if _float_last(inst):
        return floats.decode_binary(ops, inst, mods)
    if mods.take("relu"):
        raise ops.refuse(inst, ".relu on integer min/max")
    t = mods.type()
    a, b = sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    f = np.minimum if inst.opcode == "min" else np.maximum
    return lambda sel: write(sel, f(a(sel), b(sel)))


@opcode("abs", "neg")
def decode_abs(ops: Operands, inst, mods):
    if _float_last(inst):
        return floats.decode_unary(ops, inst, mods)
    t = mods.type()
    if t.kind != "s":
        raise ops.refuse(inst, f"integer abs/neg on .{t.name} (needs .s16/.s32/.s64)")
    (a,) = sources(ops, inst, t, 1)
    write = ops.write(inst, inst.operands[0], t)
    if inst.opcode == "abs":
        return lambda sel: write(sel, np.abs(a(sel)))
    return lambda sel: write(sel, -a(sel))


# endregion
# region carry chains
_CARRY_TYPES = ("u32", "s32", "u64", "s64")


def _add_with_carry(x: np.ndarray, y: np.ndarray, carry: np.ndarray, subtract: bool):
    """(x + y + carry, carry out) or (x - (y + carry), borrow out) on unsigned arrays of one width."""
    carry = carry.astype(x.dtype)
    if subtract:
        first = x - y
        return first - carry, (x < y) | (first < carry)
    first = x + y
    result = first + carry
    return result, (first < x) | (result < first)


@opcode("addc", "subc", "madc")
def decode_carry_in(ops: Operands, inst, mods):
    return _decode_carry(ops, inst, mods, subtract=inst.opcode == "subc", carry_in=True,
                         multiply=inst.opcode == "madc")


def _decode_carry(ops: Operands, inst, mods, subtract: bool, carry_in: bool, multiply: bool = False):
    """add.cc/sub.cc/mad.cc (carry_in False) and addc/subc/madc: d = x + y (+ CF) or d = x - (y + CF), with
    x, y = a, b or (a * b).lo/.hi, c; `.cc` writes the carry (borrow) out to CF."""
    mode = mods.take("lo", "hi") if multiply else None
    if multiply and mode is None:
        raise ops.refuse(inst, f"{inst.opcode} needs .lo or .hi")
    carry_out = bool(mods.take("cc"))
    t = mods.type()
    if t.name not in _CARRY_TYPES:
        raise ops.refuse(inst, f"{inst.opcode} with a carry on .{t.name} (needs .u32, .s32, .u64 or .s64)")
    unsigned = np.dtype(f"uint{t.bits}")
    if multiply:
        a, b, c = sources(ops, inst, t, 3)
        product = _product(mode, t)
    else:
        a, b = sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    m = ops.m

    def run(sel):
        n = lane_count(ops, sel)
        x, y = (np.broadcast_to(np.asarray(v, t.dtype), (n,)) for v in (a(sel), b(sel)))
        if multiply:
            x, y = np.asarray(product(x, y), t.dtype), np.broadcast_to(np.asarray(c(sel), t.dtype), (n,))
        flag = m.carry[sel] if carry_in else np.zeros(n, bool)
        result, out = _add_with_carry(x.view(unsigned), y.view(unsigned), flag, subtract)
        write(sel, result.view(t.dtype))
        if carry_out:
            m.carry[sel] = out

    return run


# endregion
# region sad, mov
@opcode("sad")
def decode_sad(ops: Operands, inst, mods):
    """`sad.{u,s}{16,32,64} d, a, b, c`: d = c + |a - b| (the difference exact, the sum wrapping)."""
    t = mods.type()
    if t.kind not in ("u", "s"):
        raise ops.refuse(inst, f"sad on .{t.name}")
    a, b, c = sources(ops, inst, t, 3)
    write = ops.write(inst, inst.operands[0], t)
    unsigned = np.dtype(f"uint{t.bits}")

    def run(sel):
        x, y = np.asarray(a(sel)), np.asarray(b(sel))
        difference = np.where(x >= y, x.astype(t.dtype) - y, y.astype(t.dtype) - x)  # wraps to |a - b| unsigned
        write(sel, (np.asarray(difference, t.dtype).view(unsigned) + np.asarray(c(sel), t.dtype).view(unsigned))
              .view(t.dtype))

    return run


@opcode("mov")
def decode_mov(ops: Operands, inst, mods):
    t = mods.type()
    if len(inst.operands) != 2:
        raise ops.refuse(inst, "mov needs 2 operands")
    dest, src = inst.operands
    if isinstance(src, Vector):  # pack: first element in the low bits
        parts = src.elements
        width = t.bits // len(parts)
        if width * len(parts) != t.bits or width not in (8, 16, 32):
            raise ops.refuse(inst, f"packing {len(parts)} elements into .{t.name}")
        part_type = ptx_type(f"b{width}")
        readers = [ops.read(inst, p, part_type) for p in parts]
        write = ops.write(inst, dest, t)
        u = np.dtype(f"uint{t.bits}")

        def run_pack(sel):
            out = u.type(0)
            for i, r in enumerate(readers):
                out = out | (np.asarray(r(sel)).astype(u) << u.type(i * width))
            write(sel, np.asarray(out, u).view(t.dtype))
        return run_pack
    if isinstance(dest, Vector):  # unpack
        parts = dest.elements
        width = t.bits // len(parts)
        if width * len(parts) != t.bits or width not in (8, 16, 32):
            raise ops.refuse(inst, f"unpacking .{t.name} into {len(parts)} elements")
        part_type = ptx_type(f"b{width}")
        read = ops.read(inst, src, ptx_type(f"b{t.bits}"))
        writers = [ops.write(inst, p, part_type) for p in parts]
        mask = (1 << width) - 1

        def run_unpack(sel):
            x = read(sel)
            for i, w in enumerate(writers):
                w(sel, ((x >> x.dtype.type(i * width)) & x.dtype.type(mask)).astype(part_type.dtype))
        return run_unpack
    read = ops.read(inst, src, t)
    write = ops.write(inst, dest, t)
    return lambda sel: write(sel, read(sel))


# endregion
