"""Logic, shift and bit-field instructions: and/or/xor/not/cnot, shl/shr/shf, popc/clz/brev/bfind,
bfe/bfi/prmt/lop3.

Semantics [PTX ISA 9.1, logic-and-shift-instructions, integer-arithmetic-instructions]:
- shift amounts are unsigned 32-bit and clamp: shifting by the width or more gives 0 (`shr.s`: the sign);
  `shf.l/.r` shift the 64-bit {b, a} (b high) by min(c, 32) (`.clamp`) or c & 31 (`.wrap`) and keep the high
  (`.l`) or low (`.r`) word;
- `bfe`, `bfi`, `prmt` (the default mode and the modes .f4e .b4e .rc8 .ecl .ecr .rc16, whose byte choices are
  the ISA's table) and `lop3` follow the ISA's pseudo-code.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import Operands, lane_count, opcode, sources
from tessera.interpreters.ptx.syntax import Imm
from tessera.interpreters.ptx.types import ptx_type


@opcode("and", "or", "xor")
def decode_logic(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("b", "pred"):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    a, b = sources(ops, inst, t, 2)
    write = ops.write(inst, inst.operands[0], t)
    f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[inst.opcode]
    return lambda sel: write(sel, f(a(sel), b(sel)))


@opcode("not", "cnot")
def decode_not(ops: Operands, inst, mods):
    t = mods.type()
    if t.kind not in ("b", "pred") or (inst.opcode == "cnot" and t.kind == "pred"):
        raise ops.refuse(inst, f"{inst.opcode} on .{t.name}")
    (a,) = sources(ops, inst, t, 1)
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
    if isinstance(inst.operands[2], Imm):  # a constant amount (an index's scaling): its clamp decided once
        count = int(ops.constant(inst, inst.operands[2], ptx_type("u32")))
        amount = dtype.type(min(count, bits - 1))
        if count >= bits and (inst.opcode == "shl" or t.kind != "s"):
            return lambda sel: write(sel, np.zeros_like(a(sel)))
        if inst.opcode == "shl":
            return lambda sel: write(sel, a(sel) << amount)
        return lambda sel: write(sel, a(sel) >> amount)

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
    (a,) = sources(ops, inst, t, 1)
    if inst.opcode == "brev":
        write = ops.write(inst, inst.operands[0], t)

        def run_brev(sel):
            x = np.ascontiguousarray(np.broadcast_to(a(sel), (lane_count(ops, sel),)))
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
    (a,) = sources(ops, inst, t, 1)
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
    a, b, c = sources(ops, inst, t, 3)
    write = ops.write(inst, inst.operands[0], t)
    table = None if mode is None else \
        np.array([[_PRMT_MODES[mode](ctl, k) for k in range(4)] for ctl in range(4)], np.uint64)

    def run(sel):
        n = lane_count(ops, sel)
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
