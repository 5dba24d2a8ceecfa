"""Packed integer instructions: the dot products dp4a/dp2a and the SIMD video vabsdiff4/vadd4/vsub4/vmin4/vmax4,
which work on the four bytes (two halves) of 32-bit registers.

Semantics [PTX ISA 9.1, integer-arithmetic-instructions-dp4a/dp2a, simd-video-instructions]: the bytes (halves)
are signed or unsigned as the types say, the products or lane results are added (or written per lane) as the
ISA's pseudo-code does.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import Operands, opcode, sources
from tessera.interpreters.ptx.syntax import Imm, Reg
from tessera.interpreters.ptx.types import ptx_type


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
    a, b, c = sources(ops, inst, u32, 3)
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
    a, b, c = sources(ops, inst, u32, 3)
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
