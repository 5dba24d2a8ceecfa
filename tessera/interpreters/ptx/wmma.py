"""The WMMA API's warp-level matrix instructions (CUDA's `nvcuda::wmma`): `wmma.load.{a,b,c}`, `wmma.mma` and
`wmma.store.d` [P#warp-level-matrix-instructions-wmma] for .m16n16k16 with .f16 or .bf16 multiplicands and .f32
or .f16 accumulators.

`wmma.load.{a,b,c}.sync.aligned.{row,col}.m16n16k16{.space}.type r, [p], stride` reads the 16 x 16 matrix whose
element (i, j) lies at p + (i * stride + j) * size (.row) or p + (j * stride + i) * size (.col) into the
fragment registers of the warp's 32 threads; `wmma.store.d` writes one back the same way;
`wmma.mma.sync.aligned.alayout.blayout.m16n16k16.dtype{.atype.btype}.ctype d, a, b, c` computes D = A B + C,
the products summed in float64 and rounded once to .dtype, as `warp_mma` does (the ISA leaves order and
rounding unspecified).

The ISA leaves the distribution of a fragment's elements over the threads unspecified ("target architecture
dependent"). The executor gives each thread the elements of the two m16n8k16 `mma.sync` fragments that make up
the tile (`tessera.sm90.mma`): A's 16 x 16 as elements 0-7, B's column halves 0-7 and 8-15 as elements 0-3 and
4-7, C and D as the 16 x 8 accumulators of columns 0-7 (elements 0-3) and 8-15 (4-7); a multiplicand fragment
holds 16 elements a thread, twice the tile, and its elements 8-15 repeat 0-7. Code that loads, multiplies,
stores and maps a fragment elementwise, the API's contract, sees what the hardware computes. Other shapes
(m32n8k16, m8n32k16), types (.tf32, integers, .f64, sub-byte), `.satfinite` and a load or store without its
stride are refused by name before the run.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.memory import access, lanes_of, take_space
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.ptx.warp_mma import (
    accumulator_words,
    fragment_values,
    operand_registers,
    warp_products,
    whole_warps,
)
from tessera.sm90 import facts

SHAPE, TILE = "m16n16k16", 16
U32 = ptx_type("u32")
REGISTERS = {("a", "f16"): 8, ("a", "bf16"): 4, ("b", "f16"): 8, ("b", "bf16"): 4, ("c", "f32"): 8, ("c", "f16"): 4}
"""Fragment registers a thread holds, as CUDA's mma.h declares them (bf16 multiplicands: 4, no repeat)."""


@lru_cache(maxsize=None)
def coordinates(matrix: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the 16 x 16 matrix of each of a thread's `count` fragment elements, per lane ([32, count]):
    A (row, k), B (k, n), C/D (row, col); see the module docstring."""
    lane = np.arange(facts.WARP_SIZE)[:, None]
    if matrix == "c":
        return facts.accumulator_coords(np.arange(8)[None, :], lane)
    if matrix == "a":
        row, col = facts.mma_a_fragment_coords(np.arange(8)[None, :], lane, TILE)
    else:
        i = np.arange(8)[None, :]
        row, col = facts.mma_b_fragment_coords(i % 4, lane, TILE)
        col = col + facts.MMA_SYNC_N * (i // 4)
    repeat = count // 8
    return np.tile(row, repeat), np.tile(col, repeat)


def _shape_and_layout(ops: Operands, inst, mods, layouts: int) -> tuple[str, ...]:
    if SHAPE not in mods.left:
        shape = next((x for x in mods.left if x.startswith("m") and "n" in x and "k" in x), "without a shape")
        raise ops.refuse(inst, f"wmma .{shape} (supported: .{SHAPE})")
    mods.left.remove(SHAPE)
    found = tuple(x for x in mods.left if x in ("row", "col"))
    if len(found) != layouts:
        raise ops.refuse(inst, f"wmma needs {layouts} layout(s) among .row and .col")
    for x in found:
        mods.left.remove(x)
    return found


def _words(regs, lanes: np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(r[lanes], np.uint32) for r in regs], axis=1)


def _element_type(t: str) -> tuple[np.dtype, int]:
    """(stored dtype, bytes) of one element in memory: .f32, or the bits of a 16-bit float."""
    return (np.dtype(np.float32), 4) if t == "f32" else (np.dtype(np.uint16), 2)


@opcode("wmma")
def decode_wmma(ops: Operands, inst, mods):
    action = mods.take("load", "store", "mma")
    mods.drop("sync", "aligned")
    if action is None:
        raise ops.refuse(inst, "wmma needs .load, .store or .mma")
    if action == "mma":
        return _decode_mma(ops, inst, mods)
    matrix = mods.take("a", "b", "c") if action == "load" else mods.take("d")
    if matrix is None:
        raise ops.refuse(inst, "wmma.load needs .a, .b or .c; wmma.store needs .d")
    matrix = "c" if matrix == "d" else matrix
    (layout,) = _shape_and_layout(ops, inst, mods, 1)
    space = take_space(mods, "generic")
    t = mods.left[-1] if mods.left else None
    if (matrix, t) not in REGISTERS:
        raise ops.refuse(inst, f"wmma.{action} of matrix {matrix} as .{t} (supported: .f16/.bf16 for a and b, "
                               ".f32/.f16 for c and d)")
    mods.left.pop()
    regs_at, address_at = (0, 1) if action == "load" else (1, 0)
    if len(inst.operands) != 3:
        raise ops.refuse(inst, f"wmma.{action} without its stride operand")
    regs = [ops.register(inst, r)[0] for r in elements(inst.operands[regs_at])]
    if len(regs) != REGISTERS[matrix, t]:
        raise ops.refuse(inst, f"wmma.{action}.{matrix}.{t} takes {REGISTERS[matrix, t]} registers")
    address = ops.address(inst, inst.operands[address_at])
    stride = ops.read(inst, inst.operands[2], U32)
    dtype, size = _element_type(t)
    count = len(regs) * 4 // size
    row, col = coordinates(matrix, count)
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        whole_warps(m, inst, lanes, "wmma")
        lane = m.laneid[lanes]
        base = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        pitch = np.broadcast_to(np.asarray(stride(sel), np.int64), lanes.shape)
        r, c = row[lane], col[lane]
        major, minor = (r, c) if layout == "row" else (c, r)
        where = (base[:, None] + (major * pitch[:, None] + minor) * size).reshape(-1)
        who = np.repeat(lanes, count)
        if action == "load":
            raw = access(m, inst, space, who, where, size).view(dtype).reshape(len(lanes), count)
            words = np.ascontiguousarray(raw).view(np.uint32)
            for v, reg in enumerate(regs):
                reg[lanes] = words[:, v]
            return
        data = np.ascontiguousarray(_words(regs, lanes)).view(dtype).reshape(-1, 1).view(np.uint8)
        access(m, inst, space, who, where, size, data=data)

    return Step(inst, run, unit=facts.WARP_SIZE)


def _decode_mma(ops: Operands, inst, mods):
    _shape_and_layout(ops, inst, mods, 2)
    if mods.take("satfinite"):
        raise ops.refuse(inst, "wmma.mma .satfinite")
    types = list(mods.left)
    mods.left = []
    if len(types) == 2 and types[0] in ("f32", "f16") and types[1] in ("f32", "f16"):
        dtype, atype, ctype = types[0], "f16", types[1]
    elif len(types) == 4 and types[1] == types[2] == "bf16" and types[0] == types[3] == "f32":
        dtype, atype, ctype = "f32", "bf16", "f32"
    else:
        raise ops.refuse(inst, f"wmma.mma .{'.'.join(types)} (supported: .dtype.ctype with .f16 multiplicands, "
                               ".f32.bf16.bf16.f32)")
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "wmma.mma needs d, a, b, c")
    counts = (REGISTERS["c", dtype], REGISTERS["a", atype], REGISTERS["b", atype], REGISTERS["c", ctype])
    d_regs, a_regs, b_regs, c_regs = operand_registers(ops, inst, counts, "wmma.mma")
    a_row, a_col = coordinates("a", 8)
    b_k, b_n = coordinates("b", 8)
    c_row, c_col = coordinates("c", 8)
    m = ops.m

    def values(regs, lanes, t):
        words = _words(regs, lanes)
        if t == "f32":
            return words.view(np.float32).astype(np.float64)
        return fragment_values(words, t)[:, :8]  # the first copy of a multiplicand

    def run(sel):
        lanes = lanes_of(m, sel)
        whole_warps(m, inst, lanes, "wmma")
        d = warp_products(m, lanes, values(a_regs, lanes, atype), (a_row, a_col), values(b_regs, lanes, atype),
                          (b_k, b_n), (c_row, c_col), (TILE, TILE, TILE)) + values(c_regs, lanes, ctype)
        out = accumulator_words(d, dtype)
        for v, r in enumerate(d_regs):
            r[lanes] = out[:, v]

    return Step(inst, run, unit=facts.WARP_SIZE)
