"""Integer, logic, comparison and data-movement instructions: mov, add/sub/mul/mad/div/rem, min/max/abs/neg,
carry chains (add.cc/addc/sub.cc/subc, mad.cc/madc), and/or/xor/not/cnot, shl/shr/shf,
popc/clz/brev/bfe/bfi/prmt/lop3, dp4a/dp2a, the SIMD video vabsdiff4/vadd4/vsub4/vmin4/vmax4,
setp, set, selp.

Semantics [PTX ISA 9.1, integer-arithmetic-instructions, logic-and-shift-instructions, comparison-and-
selection-instructions, data-movement-and-conversion-instructions-mov]:
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
- shift amounts are unsigned 32-bit and clamp: shifting by the width or more gives 0 (`shr.s`: the sign);
  `shf.l/.r` shift the 64-bit {b, a} (b high) by min(c, 32) (`.clamp`) or c & 31 (`.wrap`) and keep the high
  (`.l`) or low (`.r`) word;
- `bfe`, `bfi`, `prmt` (the default mode and the modes .f4e .b4e .rc8 .ecl .ecr .rc16, whose byte choices are
  the ISA's table) and `lop3` follow the ISA's pseudo-code;
- float operands of add/sub/mul/mad/fma/min/max/abs/neg/div go to `floats`;
- setp compares (signed/unsigned/float, ordered and unordered) and combines with `.and/.or/.xor` and an
  optional third predicate: p = (a cmp b) op c, q = !(a cmp b) op c;
- mov packs `{a, b, ...}` with the first element in the low bits and unpacks the same way; mov of a symbol
  gives its address in its own state space.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx import floats
from tessera.interpreters.ptx.decode import Operands, elements, opcode
from tessera.interpreters.ptx.syntax import Imm, Reg, Vector
from tessera.interpreters.ptx.types import PtxType, half_pair, pack_pair, ptx_type


def _float_last(inst) -> bool:
    t = ptx_type(inst.modifiers[-1]) if inst.modifiers else None
    return t is not None and t.kind in ("f", "x2")


def _sources(ops: Operands, inst, t: PtxType, count: int, first: int = 1):
    if len(inst.operands) != first + count:
        raise ops.refuse(inst, f"expected {first + count} operands, got {len(inst.operands)}")
    return [ops.read(inst, o, t) for o in inst.operands[first:first + count]]


def _lanes(ops: Operands, sel) -> int:
    return ops.m.lanes if isinstance(sel, slice) else len(sel)


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
    a, b = _sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    subtract = inst.opcode == "sub"
    if sat:
        def run_sat(sel):
            wide = a(sel).astype(np.int64)
            wide = wide - b(sel) if subtract else wide + b(sel)
            write(sel, np.clip(wide, -2**31, 2**31 - 1).astype(np.int32))
        return run_sat
    if subtract:
        return lambda sel: write(sel, a(sel) - b(sel))
    return lambda sel: write(sel, a(sel) + b(sel))


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
        a, b = _sources(ops, inst, t, 2)
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
    a, b = _sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    m, index = ops.m, 1 if inst.opcode == "rem" else 0

    def run(sel):
        x, y = np.broadcast_arrays(a(sel), b(sel))
        zero = y == 0
        if zero.any():
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
    a, b = _sources(ops, inst, t, 2)
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
    (a,) = _sources(ops, inst, t, 1)
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
        a, b, c = _sources(ops, inst, t, 3)
        product = _product(mode, t)
    else:
        a, b = _sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    m = ops.m

    def run(sel):
        n = _lanes(ops, sel)
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
# region logic and shifts
@opcode("and", "or", "xor")
def decode_logic(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("b", "pred"):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    a, b = _sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[inst.opcode]
    return lambda sel: write(sel, f(a(sel), b(sel)))


@opcode("not", "cnot")
def decode_not(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("b", "pred") or (inst.opcode == "cnot" and t.kind == "pred"):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    (a,) = _sources(ops, inst, t, 1)
    write = ops.write(inst, inst.operands[0], t)
    if inst.opcode == "not":
        return lambda sel: write(sel, ~a(sel))
    return lambda sel: write(sel, (a(sel) == 0).astype(t.dtype))


@opcode("shl", "shr")
def decode_shift(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("b", "u", "s") or (inst.opcode == "shl" and t.kind != "b"):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    if len(inst.operands) != 3:
        raise ops.refuse(inst, "shift needs 3 operands")
    a = ops.read(inst, inst.operands[1], t)
    b = ops.read(inst, inst.operands[2], ptx_type("u32"))
    write = ops.write(inst, inst.operands[0], t)
    bits, dtype = t.bits, t.dtype
    zero = dtype.type(0)

    def run(sel):
        x, s = a(sel), b(sel)
        amount = np.minimum(s, bits - 1).astype(dtype)
        if inst.opcode == "shl":
            write(sel, np.where(s >= bits, zero, x << amount))
        elif t.kind == "s":
            write(sel, x >> amount)
        else:
            write(sel, np.where(s >= bits, zero, x >> amount))

    return run


@opcode("shf")
def decode_shf(ops: Operands, inst, mods):
    """Funnel shift: the 64-bit {b, a} (b bits 63:32) shifted left (keep bits 63:32) or right (keep 31:0) by
    n = min(c, 32) (.clamp) or c & 31 (.wrap)."""
    direction, mode = mods.take("l", "r"), mods.take("wrap", "clamp")
    if direction is None or mode is None:
        raise ops.refuse(inst, "shf needs .l or .r and .wrap or .clamp")
    t = mods.type()
    if t.name != "b32" or len(inst.operands) != 4:
        raise ops.refuse(inst, "shf needs .b32 and 4 operands")
    a, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    c = ops.read(inst, inst.operands[3], ptx_type("u32"))
    write = ops.write(inst, inst.operands[0], t)
    limit = np.uint64(32 if mode == "clamp" else 31)

    def run(sel):
        wide = (np.asarray(b(sel), np.uint64) << np.uint64(32)) | np.asarray(a(sel), np.uint64)
        amount = np.asarray(c(sel), np.uint64)
        n = np.minimum(amount, limit) if mode == "clamp" else amount & limit
        shifted = (wide << n) >> np.uint64(32) if direction == "l" else wide >> n
        write(sel, (shifted & np.uint64(0xFFFFFFFF)).astype(np.uint32))

    return run


def _clz(x: np.ndarray, bits: int) -> np.ndarray:
    """Leading zeros of `bits`-wide values: binary search on the highest set bit."""
    y = np.asarray(x).astype(np.uint64)
    count = np.full(y.shape, bits, np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        if shift >= bits:
            continue
        big = y >= (np.uint64(1) << np.uint64(shift))
        y = np.where(big, y >> np.uint64(shift), y)
        count = np.where(big, count - shift, count)
    return np.where(y > 0, count - 1, count).astype(np.uint32)


_BYTE_REVERSE = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


@opcode("popc", "clz", "brev")
def decode_bits(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind != "b" or t.bits not in (32, 64):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    (a,) = _sources(ops, inst, t, 1)
    if inst.opcode == "brev":
        write = ops.write(inst, inst.operands[0], t)

        def run_brev(sel):
            x = np.ascontiguousarray(np.broadcast_to(a(sel), (_lanes(ops, sel),)))
            as_bytes = _BYTE_REVERSE[x.view(np.uint8).reshape(-1, t.bits // 8)][:, ::-1]
            write(sel, np.ascontiguousarray(as_bytes).view(t.dtype).reshape(-1))
        return run_brev
    write = ops.write(inst, inst.operands[0], ptx_type("u32"))
    if inst.opcode == "popc":
        return lambda sel: write(sel, np.bitwise_count(a(sel)).astype(np.uint32))
    return lambda sel: write(sel, _clz(a(sel), t.bits))


@opcode("bfind")
def decode_bfind(ops: Operands, inst, mods):
    """`bfind{.shiftamt}.{u32,u64,s32,s64} d, a`: the bit position of the most significant non-sign bit of a
    (the highest 1, or for a negative signed value the highest 0), 0xffffffff when there is none; with
    .shiftamt, the left shift that brings it to the top (bits - 1 - position)."""
    shiftamt = bool(mods.take("shiftamt"))
    t = mods.type()
    if t.kind not in ("u", "s") or t.bits not in (32, 64):
        raise ops.refuse(inst, f"bfind on .{t.name}")
    (a,) = _sources(ops, inst, t, 1)
    write = ops.write(inst, inst.operands[0], ptx_type("u32"))
    unsigned = np.dtype(f"uint{t.bits}")

    def run(sel):
        x = np.asarray(a(sel))
        bits = x.view(unsigned) if x.dtype != unsigned else x
        if t.kind == "s":
            bits = np.where(x < 0, ~bits, bits)
        zeros = _clz(bits, t.bits).astype(np.int64)
        position = t.bits - 1 - zeros
        result = np.where(zeros == t.bits, 0xFFFFFFFF, zeros if shiftamt else position)
        write(sel, result.astype(np.uint32))

    return run


@opcode("sad")
def decode_sad(ops: Operands, inst, mods):
    """`sad.{u,s}{16,32,64} d, a, b, c`: d = c + |a - b| (the difference exact, the sum wrapping)."""
    t = mods.type()
    if t.kind not in ("u", "s"):
        raise ops.refuse(inst, f"sad on .{t.name}")
    a, b, c = _sources(ops, inst, t, 3)
    write = ops.write(inst, inst.operands[0], t)
    unsigned = np.dtype(f"uint{t.bits}")

    def run(sel):
        x, y = np.asarray(a(sel)), np.asarray(b(sel))
        difference = np.where(x >= y, x.astype(t.dtype) - y, y.astype(t.dtype) - x)  # wraps to |a - b| unsigned
        write(sel, (np.asarray(difference, t.dtype).view(unsigned) + np.asarray(c(sel), t.dtype).view(unsigned))
              .view(t.dtype))

    return run


@opcode("dp4a", "dp2a")
def decode_dot_product(ops: Operands, inst, mods):
    """`dp4a.atype.btype d, a, b, c`: d = c + the sum of the products of a's four bytes with b's (each byte
    sign-extended for .s32, zero-extended for .u32); `dp2a.{lo,hi}.atype.btype d, a, b, c`: d = c + the products
    of a's two 16-bit halves with bytes 0-1 (.lo) or 2-3 (.hi) of b. d is .s32 unless both types are .u32; the
    sum wraps at 32 bits [P#integer-arithmetic-instructions-dp4a, -dp2a]."""
    half = mods.take("lo", "hi") if inst.opcode == "dp2a" else None
    if inst.opcode == "dp2a" and half is None:
        raise ops.refuse(inst, "dp2a needs .lo or .hi")
    kinds = [mods.take("u32", "s32"), mods.take("u32", "s32")]
    if None in kinds:
        raise ops.refuse(inst, f"{inst.opcode} needs two types among .u32 and .s32")
    u32 = ptx_type("u32")
    a, b, c = _sources(ops, inst, u32, 3)
    write = ops.write(inst, inst.operands[0], u32)
    widths = (16, 8) if inst.opcode == "dp2a" else (8, 8)
    first_byte = 2 if half == "hi" else 0

    def parts(x, bits: int, count: int, start: int, signed: bool) -> np.ndarray:
        x = np.asarray(x).astype(np.int64)
        out = np.stack([(x >> (bits * (start + i))) & ((1 << bits) - 1) for i in range(count)])
        return np.where(out >= 1 << (bits - 1), out - (1 << bits), out) if signed else out

    def run(sel):
        count = 32 // widths[0]
        pa = parts(a(sel), widths[0], count, 0, kinds[0] == "s32")
        pb = parts(b(sel), widths[1], count, first_byte, kinds[1] == "s32")
        total = np.asarray(c(sel)).astype(np.int64) + (pa * pb).sum(axis=0)
        write(sel, (total & 0xFFFFFFFF).astype(np.uint32))

    return run


_SIMD4 = {"vabsdiff4": lambda x, y: np.abs(x - y), "vadd4": np.add, "vsub4": np.subtract, "vmin4": np.minimum,
          "vmax4": np.maximum}


@opcode(*_SIMD4)
def decode_simd4(ops: Operands, inst, mods):
    """`vop4.dtype.atype.btype{.add} d, a, b, c` (vabsdiff4, vadd4, vsub4, vmin4, vmax4) with the default byte
    selectors and mask: per byte, a's and b's bytes (signed for .s32, unsigned for .u32) combined; without .add
    d's bytes are the results' low bytes, with .add d = c + the sum of the four results
    [P#simd-video-instructions-vadd4-vsub4-vavrg4-vabsdiff4-vmin4-vmax4]. Saturation, byte selectors and masks
    are refused by name."""
    kinds = [mods.take("u32", "s32") for _ in range(3)]
    accumulate = mods.take("add") is not None
    if None in kinds:
        raise ops.refuse(inst, f"{inst.opcode} needs three types among .u32 and .s32")
    if len(inst.operands) != 4 or not all(isinstance(o, Reg) or isinstance(o, Imm) for o in inst.operands[1:]):
        raise ops.refuse(inst, f"{inst.opcode} with byte selectors or a mask (only the default form)")
    u32 = ptx_type("u32")
    a, b, c = _sources(ops, inst, u32, 3)
    write = ops.write(inst, inst.operands[0], u32)
    combine = _SIMD4[inst.opcode]

    def run(sel):
        def byte_lanes(x, signed):
            x = np.asarray(x).astype(np.int64)
            out = np.stack([(x >> (8 * i)) & 0xFF for i in range(4)])
            return np.where(out >= 128, out - 256, out) if signed else out

        r = combine(byte_lanes(a(sel), kinds[1] == "s32"), byte_lanes(b(sel), kinds[2] == "s32"))
        if accumulate:
            total = np.asarray(c(sel)).astype(np.int64) + r.sum(axis=0)
        else:
            total = sum((r[i] & 0xFF) << (8 * i) for i in range(4))
        write(sel, (np.asarray(total) & 0xFFFFFFFF).astype(np.uint32))

    return run


def _low_mask(n, dtype, bits):
    """(1 << n) - 1 in dtype for n in [0, bits]."""
    n = np.asarray(n, np.int64)
    ones = np.iinfo(dtype).max
    return np.where(n >= bits, dtype.type(ones), (dtype.type(1) << np.minimum(n, bits - 1).astype(dtype)) - dtype.type(1))


@opcode("bfe")
def decode_bfe(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("u", "s") or t.bits not in (32, 64):
        raise ops.refuse(inst, f"bfe on .{t.name}")
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "bfe needs 4 operands")
    a = ops.read(inst, inst.operands[1], t)
    u32 = ptx_type("u32")
    pos, length = (ops.read(inst, o, u32) for o in inst.operands[2:4])
    write = ops.write(inst, inst.operands[0], t)
    bits, u = t.bits, np.dtype(f"uint{t.bits}")

    def run(sel):
        x = np.asarray(a(sel)).view(u)
        p = (np.asarray(pos(sel)) & 0xFF).astype(np.int64)
        n = (np.asarray(length(sel)) & 0xFF).astype(np.int64)
        shifted = np.where(p >= bits, u.type(0), x >> np.minimum(p, bits - 1).astype(u))
        valid = _low_mask(np.minimum(n, np.maximum(bits - p, 0)), u, bits)
        field = shifted & valid
        if t.kind == "s":
            top = np.minimum(p + n - 1, bits - 1)
            sign = ((x >> np.maximum(top, 0).astype(u)) & u.type(1)).astype(bool) & (n > 0)
            field = np.where(sign, field | ~valid, field)
        write(sel, np.asarray(field, u).view(t.dtype))

    return run


@opcode("bfi")
def decode_bfi(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind != "b" or t.bits not in (32, 64):
        raise ops.refuse(inst, f"bfi on .{t.name}")
    f, b = (ops.read(inst, o, t) for o in inst.operands[1:3])
    u32 = ptx_type("u32")
    pos, length = (ops.read(inst, o, u32) for o in inst.operands[3:5])
    write = ops.write(inst, inst.operands[0], t)
    bits, u = t.bits, t.dtype

    def run(sel):
        p = (np.asarray(pos(sel)) & 0xFF).astype(np.int64)
        n = (np.asarray(length(sel)) & 0xFF).astype(np.int64)
        base = b(sel)
        keep = (n == 0) | (p >= bits)
        ps = np.minimum(p, bits - 1).astype(u)
        mask = _low_mask(np.minimum(n, np.maximum(bits - p, 0)), u, bits) << ps
        write(sel, np.where(keep, base, (base & ~mask) | ((f(sel) << ps) & mask)))

    return run


_PRMT_MODES = {  # the source byte (0..7 of {b, a}) of byte k of d, for ctl = c & 3
    "f4e": lambda ctl, k: ctl + k,  # forward 4 extract
    "b4e": lambda ctl, k: (ctl - k) % 8,  # backward 4 extract
    "rc8": lambda ctl, k: ctl,  # replicate 8
    "ecl": lambda ctl, k: max(ctl, k),  # edge clamp left
    "ecr": lambda ctl, k: min(ctl, k),  # edge clamp right
    "rc16": lambda ctl, k: 2 * (ctl & 1) + k % 2,  # replicate 16
}


@opcode("prmt")
def decode_prmt(ops: Operands, inst, mods):
    """Bytes of d from the 8 bytes of {b, a}: by the 4-bit selectors of c (default: 3 bits pick the byte, the
    msb replicates its sign), or by a mode's table indexed by c & 3."""
    mode = mods.take(*_PRMT_MODES)
    t = mods.type()
    if t.name != "b32":
        raise ops.refuse(inst, "prmt needs .b32")
    a, b, c = _sources(ops, inst, t, 3)
    write = ops.write(inst, inst.operands[0], t)
    table = None if mode is None else \
        np.array([[_PRMT_MODES[mode](ctl, k) for k in range(4)] for ctl in range(4)], np.uint64)

    def run(sel):
        n = _lanes(ops, sel)
        x = np.broadcast_to(np.asarray(a(sel), np.uint64) | (np.asarray(b(sel), np.uint64) << np.uint64(32)), (n,))
        selector = np.broadcast_to(np.asarray(c(sel), np.uint32), (n,))
        out = np.zeros(n, np.uint32)
        for k in range(4):
            if table is None:
                nibble = (selector >> np.uint32(4 * k)) & np.uint32(0xF)
                source, replicate = (nibble & 7).astype(np.uint64), (nibble & 8) != 0
            else:
                source, replicate = table[selector & 3, k], False
            byte = ((x >> (source * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)
            byte = np.where(replicate & (byte >= 0x80), np.uint32(0xFF), np.where(replicate, np.uint32(0), byte))
            out |= byte << np.uint32(8 * k)
        write(sel, out)

    return run


@opcode("lop3")
def decode_lop3(ops: Operands, inst, mods):
    t = mods.type()
    if t.name != "b32" or len(inst.operands) != 5:
        raise ops.refuse(inst, "lop3 needs .b32 and 5 operands")
    a, b, c = (ops.read(inst, o, t) for o in inst.operands[1:4])
    lut = ops.static(inst, inst.operands[4]) & 0xFF
    write = ops.write(inst, inst.operands[0], t)

    def run(sel):
        x, y, z = a(sel), b(sel), c(sel)
        out = np.zeros(np.broadcast(x, y, z).shape, np.uint32)
        for k in range(8):
            if lut >> k & 1:
                out |= (x if k & 4 else ~x) & (y if k & 2 else ~y) & (z if k & 1 else ~z)
        write(sel, out)

    return run


# endregion
# region setp, selp, mov
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
        result = np.broadcast_to(compare(a(sel), b(sel)), (_lanes(ops, sel),))
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
        write(sel, np.broadcast_to(out, (_lanes(ops, sel),)).view(write_dtype))

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
