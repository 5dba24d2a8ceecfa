"""ldmatrix and stmatrix [P#warp-level-matrix-instructions-ldmatrix, -stmatrix]: m8n8 .x1/.x2/.x4 (.trans)
.b16, collective over the warp: lanes 8j..8j+7 address the eight 16-byte rows of matrix j; lane l holds row l/4,
columns 2(l%4), 2(l%4)+1 of each matrix (.trans: the transposed elements), low half first (notes/ptx-sm90a.md
section 8).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.memory import access, lanes_of, take_space
from tessera.interpreters.ptx.types import ptx_type
from tessera.sm90 import facts


def _matrix_step(ops: Operands, inst, mods, store: bool):
    mods.drop("sync", "aligned")
    if not mods.take("m8n8"):
        raise ops.refuse(inst, "shapes other than .m8n8")
    count = mods.take("x1", "x2", "x4")
    transpose = bool(mods.take("trans"))
    space = take_space(mods, "generic")
    mods.take("b16")
    if count is None:
        raise ops.refuse(inst, "needs .x1, .x2 or .x4")
    matrices = int(count[1])
    m = ops.m
    address = ops.address(inst, inst.operands[0 if store else 1])
    regs = elements(inst.operands[1 if store else 0])
    if len(regs) != matrices:
        raise ops.refuse(inst, f"{matrices} registers expected")
    b32 = ptx_type("b32")
    readers = [ops.read(inst, r, b32) for r in regs] if store else None
    writers = None if store else [ops.write(inst, r, b32) for r in regs]
    lane = np.arange(facts.WARP_SIZE)
    row, col = lane // 4, 2 * (lane % 4)

    def run(sel):
        lanes = lanes_of(m, sel)
        warps = m.unit_of[facts.WARP_SIZE][lanes]
        addresses = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        outputs = [np.zeros(len(lanes), np.uint32) for _ in range(matrices)]
        for w in np.unique(warps):
            here = np.flatnonzero(warps == w)
            if len(here) != facts.WARP_SIZE:
                raise m.error(inst, "needs all 32 threads of the warp", int(lanes[here[0]]))
            warp_lanes = lanes[here]
            for j in range(matrices):
                row_lanes = warp_lanes[8 * j:8 * j + 8]
                row_addresses = addresses[here[8 * j:8 * j + 8]]
                if store:
                    words = np.stack([np.broadcast_to(r(warp_lanes), (32,)) for r in readers])[j]
                    halves = np.stack([words & 0xFFFF, words >> 16], axis=1).astype(np.uint16)
                    matrix = np.zeros((8, 8), np.uint16)
                    if transpose:
                        matrix[col, row], matrix[col + 1, row] = halves[:, 0], halves[:, 1]
                    else:
                        matrix[row, col], matrix[row, col + 1] = halves[:, 0], halves[:, 1]
                    access(m, inst, space, row_lanes, row_addresses, 16, matrix.view(np.uint8).reshape(8, 16))
                else:
                    matrix = access(m, inst, space, row_lanes, row_addresses, 16).view(np.uint16).reshape(8, 8)
                    lo, hi = (matrix[col, row], matrix[col + 1, row]) if transpose else \
                        (matrix[row, col], matrix[row, col + 1])
                    outputs[j][here] = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
        if not store:
            for j, write in enumerate(writers):
                write(sel, outputs[j])

    return Step(inst, run, unit=facts.WARP_SIZE)


@opcode("ldmatrix")
def decode_ldmatrix(ops: Operands, inst, mods):
    return _matrix_step(ops, inst, mods, store=False)


@opcode("stmatrix")
def decode_stmatrix(ops: Operands, inst, mods):
    return _matrix_step(ops, inst, mods, store=True)


