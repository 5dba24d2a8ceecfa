"""Warp-level `mma.sync` (the sm_80 tensor-core instruction; Triton emits it on sm_90a for dots of fewer than
64 rows per warpgroup): `mma.sync.aligned.m16n8k16.row.col.dtype.atype.btype.ctype d, a, b, c`.

Each warp computes D = A * B + C for a 16 x 16 A, a 16 x 8 B and 16 x 8 C, D spread over its 32 threads as the
PTX ISA's fragments say (`tessera.sm90.mma`). The products of .f16/.bf16 elements are exact in float64; they
and C are summed in float64 and rounded once to .dtype, to nearest even, as the wgmma model does (`tensor`):
the ISA leaves the order and rounding of the accumulation unspecified. Other shapes
(m8n8k4, m16n8k8, integer, fp8, tf32, f64 and sparse `mma.sp`) are refused by name before the run.
"""

from __future__ import annotations

from functools import lru_cache

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.memory import lanes_of
from tessera.sm90 import facts

_HALVES = {"f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}


@lru_cache(maxsize=None)
def _fragments() -> tuple[np.ndarray, ...]:
    """Per lane (rows) and element (columns, low half first): (A row, A col) [32, 8], (B k, B n) [32, 4],
    (C/D row, col) [32, 4]; A and C/D are warp 0 of the wgmma fragments, which the ISA's mma ones equal."""
    lane = np.arange(facts.WARP_SIZE)[:, None]
    element = np.arange(8)[None, :]
    a_row, a_col = facts.a_fragment_coords(element // 2, element % 2, lane)
    b_k, b_n = facts.mma_b_fragment_coords(element[:, :4] // 2, element[:, :4] % 2, lane)
    c_row, c_col = facts.accumulator_coords(element[:, :4], lane)
    return a_row, a_col, b_k, b_n, c_row, c_col


def _halves(words: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """[lanes, registers] 32-bit words -> [lanes, 2 * registers] float64 values, low half first."""
    pairs = np.stack([words & 0xFFFF, words >> 16], axis=2).astype(np.uint16)
    return pairs.view(dtype).reshape(len(words), -1).astype(np.float64)


@opcode("mma")
def decode_mma(ops: Operands, inst, mods):
    m = ops.m
    mods.drop("sync", "aligned")
    shape = next((x for x in mods.left if x.startswith("m") and "n" in x and "k" in x), None)
    if shape != "m{}n{}k{}".format(*facts.MMA_SYNC_SHAPE) or "sp" in mods.left:
        raise ops.refuse(inst, f"mma .{shape or 'without a shape'} (supported: floating-point .m16n8k16)")
    mods.left.remove(shape)
    layout = tuple(x for x in mods.left if x in ("row", "col"))
    if layout != facts.MMA_SYNC_LAYOUT:
        raise ops.refuse(inst, "mma .m16n8k16 needs .row.col")
    for x in layout:
        mods.left.remove(x)
    if len(mods.left) != 4:
        raise ops.refuse(inst, "mma needs .dtype.atype.btype.ctype")
    dtype, atype, btype, ctype = mods.left
    mods.left = []
    if atype != btype or dtype != ctype or (dtype, atype) not in facts.MMA_SYNC_TYPES:
        supported = ", ".join(f".{d}.{a}.{a}.{d}" for d, a in sorted(facts.MMA_SYNC_TYPES))
        raise ops.refuse(inst, f"mma .m16n8k16.{dtype}.{atype}.{btype}.{ctype} (supported: {supported})")
    if len(inst.operands) != 4:
        raise ops.refuse(inst, "mma needs d, a, b, c")
    counts = (2 if dtype == "f16" else 4, 4, 2, 2 if ctype == "f16" else 4)
    registers = []
    for operand, count, what in zip(inst.operands, counts, "dabc"):
        regs = [ops.register(inst, r)[0] for r in elements(operand)]
        if len(regs) != count:
            raise ops.refuse(inst, f"mma .m16n8k16.{dtype}.{atype}: {what} takes {count} registers")
        registers.append(regs)
    d_regs, a_regs, b_regs, c_regs = registers
    half = _HALVES[atype]
    a_row, a_col, b_k, b_n, c_row, c_col = _fragments()
    rows, cols, k = facts.MMA_SYNC_SHAPE[0], facts.MMA_SYNC_SHAPE[1], facts.MMA_SYNC_SHAPE[2]

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

        a = np.zeros((warps, rows, k))
        a[warp, a_row[lane], a_col[lane]] = _halves(words(a_regs), half)
        b = np.zeros((warps, k, cols))
        b[warp, b_k[lane], b_n[lane]] = _halves(words(b_regs), half)
        c_words = words(c_regs)
        c_values = _halves(c_words, _HALVES["f16"]) if ctype == "f16" else c_words.view(np.float32).astype(np.float64)
        d = np.matmul(a, b)[warp, c_row[lane], c_col[lane]] + c_values  # [lanes, 4]
        if dtype == "f16":
            bits = d.astype(np.float16).view(np.uint16).astype(np.uint32)
            out = bits[:, 0::2] | (bits[:, 1::2] << 16)
        else:
            out = d.astype(np.float32).view(np.uint32)
        for v, r in enumerate(d_regs):
            r[lanes] = out[:, v]

    return Step(inst, run, unit=facts.WARP_SIZE)
