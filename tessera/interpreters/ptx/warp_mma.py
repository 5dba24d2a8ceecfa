"""Warp-level `mma.sync` (the sm_80 tensor-core instruction; Triton emits it on sm_90a for dots of fewer than
64 rows per warpgroup): `mma.sync.aligned.shape.row.col{.satfinite}.dtype.atype.btype.ctype d, a, b, c` for
.m16n8k8 .tf32, .m16n8k16 .f16/.bf16 and .m16n8k32 .s8/.u8 (`tessera.sm90.mma`).

Each warp computes D = A * B + C for a 16 x K A, a K x 8 B and 16 x 8 C, D spread over its 32 threads as the
PTX ISA's fragments say. Floating point: the products of .tf32 (sign, exponent and 10 mantissa bits of the
f32 pattern, as wgmma reads them) and .f16/.bf16 elements are exact in float64; they and C are summed in
float64 and rounded once to .dtype, to nearest even, as the wgmma model does (`wgmma`): the ISA leaves the
order and rounding of the accumulation unspecified. Integers: the sum is exact; .s32 wraps modulo 2^32 and
.satfinite clamps to the .s32 range. Other shapes and types (m8n8k4, .f64, fp8, .b1, sparse `mma.sp`,
block-scaled forms) are refused by name before the run.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.memory import lanes_of
from tessera.interpreters.ptx.wgmma_operands import MULTIPLICANDS, multiplicand_values  # the wgmma element readers
from tessera.sm90 import facts

_SHAPES = sorted({shape for shape, _, _ in facts.MMA_SYNC_TYPES})


@lru_cache(maxsize=None)
def _fragments(k: int) -> tuple[np.ndarray, ...]:
    """Per lane (rows) and element (columns, low to high): (A row, A col), (B k, B n), (C/D row, col)."""
    lane = np.arange(facts.WARP_SIZE)[:, None]
    per_register = k // 8
    a_row, a_col = facts.mma_a_fragment_coords(np.arange(4 * per_register)[None, :], lane, k)
    b_k, b_n = facts.mma_b_fragment_coords(np.arange(2 * per_register)[None, :], lane, k)
    c_row, c_col = facts.accumulator_coords(np.arange(4)[None, :], lane)
    return a_row, a_col, b_k, b_n, c_row, c_col


def _elements(words: np.ndarray, name: str) -> np.ndarray:
    """[lanes, registers] 32-bit words -> [lanes, elements] exact float64 values, low bits first."""
    raw = np.ascontiguousarray(words, np.uint32).view(MULTIPLICANDS[name]).reshape(len(words), -1)
    return multiplicand_values(raw, name)


@opcode("mma")
def decode_mma(ops: Operands, inst, mods):
    m = ops.m
    mods.drop("sync", "aligned")
    shape = next((x for x in mods.left if x.startswith("m") and "n" in x and "k" in x), None)
    if shape not in _SHAPES or "sp" in mods.left:
        raise ops.refuse(inst, f"mma .{shape or 'without a shape'} (supported: .{', .'.join(_SHAPES)})")
    mods.left.remove(shape)
    layout = tuple(x for x in mods.left if x in ("row", "col"))
    if layout != facts.MMA_SYNC_LAYOUT:
        raise ops.refuse(inst, f"mma .{shape} needs .row.col")
    for x in layout:
        mods.left.remove(x)
    satfinite = mods.take("satfinite") is not None
    if len(mods.left) != 4:
        raise ops.refuse(inst, "mma needs .dtype.atype.btype.ctype")
    dtype, atype, btype, ctype = mods.left
    mods.left = []
    integer = dtype == "s32"
    mixed_ok = integer and {atype, btype} <= {"s8", "u8"}
    if (atype != btype and not mixed_ok) or dtype != ctype or (shape, dtype, atype) not in facts.MMA_SYNC_TYPES \
            or (shape, dtype, btype) not in facts.MMA_SYNC_TYPES or (satfinite and not integer):
        supported = ", ".join(f".{s}.{d}.{a}.{a}.{d}" for s, d, a in sorted(facts.MMA_SYNC_TYPES))
        raise ops.refuse(inst, f"mma .{shape}{'.satfinite' if satfinite else ''}.{dtype}.{atype}.{btype}.{ctype} "
                               f"(supported: {supported}; .satfinite with .s32 only)")
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "mma needs d, a, b, c")
    accumulators = 2 if dtype == "f16" else 4
    counts = (accumulators, 4, 2, accumulators)  # A: four 32-bit registers, B: two, for every shape here
    registers = []
    for operand, count, what in zip(inst.operands, counts, "dabc"):
        regs = [ops.register(inst, r)[0] for r in elements(operand)]
        if len(regs) != count:
            raise ops.refuse(inst, f"mma .{shape}.{dtype}.{atype}: {what} takes {count} registers")
        registers.append(regs)
    d_regs, a_regs, b_regs, c_regs = registers
    k = int(shape[shape.index("k") + 1:])
    a_row, a_col, b_k, b_n, c_row, c_col = _fragments(k)

    def run(sel):
        lanes = lanes_of(m, sel)
        units = m.unit_of[facts.WARP_SIZE][lanes]
        if len(lanes) % facts.WARP_SIZE or (units.reshape(-1, facts.WARP_SIZE) != units[::facts.WARP_SIZE, None]).any():
            raise m.error(inst, "mma.sync needs all 32 threads of the warp", int(lanes[0]))
        warps = len(lanes) // facts.WARP_SIZE
        warp = np.repeat(np.arange(warps), facts.WARP_SIZE)[:, None]
        lane = m.laneid[lanes]

        def words(regs):
            return np.stack([np.asarray(r[lanes], np.uint32) for r in regs], axis=1)

        a = np.zeros((warps, facts.MMA_SYNC_M, k))
        a[warp, a_row[lane], a_col[lane]] = _elements(words(a_regs), atype)
        b = np.zeros((warps, k, facts.MMA_SYNC_N))
        b[warp, b_k[lane], b_n[lane]] = _elements(words(b_regs), btype)
        c_words = words(c_regs)
        if ctype == "f16":
            c_values = _elements(c_words, "f16")
        elif integer:
            c_values = c_words.view(np.int32).astype(np.float64)
        else:
            c_values = c_words.view(np.float32).astype(np.float64)
        d = np.matmul(a, b)[warp, c_row[lane], c_col[lane]] + c_values  # [lanes, 4]
        if dtype == "f16":
            bits = d.astype(np.float16).view(np.uint16).astype(np.uint32)
            out = bits[:, 0::2] | (bits[:, 1::2] << 16)
        elif integer:  # exact: |sum| < 2^53
            total = d.astype(np.int64)
            out = (np.clip(total, -(1 << 31), (1 << 31) - 1) if satfinite else total).astype(np.uint32)
        else:
            out = d.astype(np.float32).view(np.uint32)
        for v, r in enumerate(d_regs):
            r[lanes] = out[:, v]

    return Step(inst, run, unit=facts.WARP_SIZE)
