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
from tessera.interpreters.truth import any_set
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


def fragment_values(words: np.ndarray, name: str) -> np.ndarray:
    """[lanes, registers] 32-bit words -> [lanes, elements] exact float64 values, low bits first."""
    raw = np.ascontiguousarray(words, np.uint32).view(MULTIPLICANDS[name]).reshape(len(words), -1)
    return multiplicand_values(raw, name)


def operand_registers(ops: Operands, inst, counts: tuple[int, ...], name: str) -> list[list[np.ndarray]]:
    """The register stores of the operands d, a, b, c of a warp matrix instruction (`name` in refusals), each
    vector of the count `counts` gives."""
    registers = []
    for operand, count, what in zip(inst.operands, counts, "dabc"):
        regs = [ops.register(inst, r)[0] for r in elements(operand)]
        if len(regs) != count:
            raise ops.refuse(inst, f"{name}: {what} takes {count} registers")
        registers.append(regs)
    return registers


def warp_products(m, lanes: np.ndarray, a: np.ndarray, a_at, b: np.ndarray, b_at, c_at, shape: tuple[int, int, int]):
    """[lanes, accumulators] float64: per warp of `lanes` (whole warps), the product A B (M x K times K x N of
    `shape`) at each lane's accumulator coordinates `c_at`, A and B scattered from the lanes' fragment values
    `a` and `b` ([lanes, elements]) at their coordinates `a_at` and `b_at` ((rows, cols), [32, elements])."""
    rows, depth, cols = shape
    warps = len(lanes) // facts.WARP_SIZE
    warp = np.repeat(np.arange(warps), facts.WARP_SIZE)[:, None]
    lane = m.laneid[lanes]
    left = np.zeros((warps, rows, depth))
    left[warp, a_at[0][lane], a_at[1][lane]] = a
    right = np.zeros((warps, depth, cols))
    right[warp, b_at[0][lane], b_at[1][lane]] = b
    return np.matmul(left, right)[warp, c_at[0][lane], c_at[1][lane]]


def accumulator_words(d: np.ndarray, dtype: str) -> np.ndarray:
    """[lanes, elements] float64 accumulators rounded once to .f32 or .f16 (two to a register, low first), as
    the 32-bit register words [lanes, registers]."""
    if dtype == "f16":
        bits = d.astype(np.float16).view(np.uint16).astype(np.uint32)
        return bits[:, 0::2] | (bits[:, 1::2] << 16)
    return d.astype(np.float32).view(np.uint32)


def whole_warps(m, inst, lanes: np.ndarray, name: str) -> None:
    """Stop the run unless `lanes` are whole warps (a .sync.aligned warp matrix instruction)."""
    units = m.unit_of[facts.WARP_SIZE][lanes]
    if len(lanes) % facts.WARP_SIZE or any_set(units.reshape(-1, facts.WARP_SIZE) != units[::facts.WARP_SIZE, None]):
        raise m.error(inst, f"{name} needs all 32 threads of the warp", int(lanes[0]))


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
    d_regs, a_regs, b_regs, c_regs = operand_registers(ops, inst, counts, f"mma .{shape}.{dtype}.{atype}")
    k = int(shape[shape.index("k") + 1:])
    a_row, a_col, b_k, b_n, c_row, c_col = _fragments(k)

    def run(sel):
        lanes = lanes_of(m, sel)
        whole_warps(m, inst, lanes, "mma.sync")

        def words(regs):
            return np.stack([np.asarray(r[lanes], np.uint32) for r in regs], axis=1)

        c_words = words(c_regs)
        if ctype == "f16":
            c_values = fragment_values(c_words, "f16")
        elif integer:
            c_values = c_words.view(np.int32).astype(np.float64)
        else:
            c_values = c_words.view(np.float32).astype(np.float64)
        d = warp_products(m, lanes, fragment_values(words(a_regs), atype), (a_row, a_col),
                          fragment_values(words(b_regs), btype), (b_k, b_n), (c_row, c_col),
                          (facts.MMA_SYNC_M, k, facts.MMA_SYNC_N)) + c_values  # [lanes, 4]
        if integer:  # exact: |sum| < 2^53
            total = d.astype(np.int64)
            out = (np.clip(total, -(1 << 31), (1 << 31) - 1) if satfinite else total).astype(np.uint32)
        else:
            out = accumulator_words(d, dtype)
        for v, r in enumerate(d_regs):
            r[lanes] = out[:, v]

    return Step(inst, run, unit=facts.WARP_SIZE)
