"""Warp-level `mma.sync` facts (the sm_80 tensor-core instruction, also on sm_90: Triton emits it on sm_90a for
dots below a warpgroup's 64 rows, m16n8k8 for tf32, m16n8k16 for f16/bf16, m16n8k32 for int8): the shapes and
types the PTX executor runs and their register fragments.

Sources: PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x = warp-level-matrix-
fragment-mma-1688 (.tf32), -mma-16816-float (.f16/.bf16), -mma-16832 (.s8/.u8), and warp-level-matrix-
instructions-mma (the table of shapes and types). With g = groupID = %laneid >> 2, t = threadID_in_group =
%laneid % 4 and e = 32 / (element bits) elements per 32-bit register (1, 2 or 4), element i (low to high,
register i / e) of

- A (16 x K) sits at row g + 8 * ((i / e) & 1), column e * t + (i % e) + (K / 2) * (i / 2e): the ISA's three
  printed formulas (for .tf32 "row = groupID for a0 and a2, groupID + 8 for a1 and a3; col = threadID_in_group
  for a0 and a1, + 4 for a2 and a3"; for .f16 and .s8 as quoted in `mma_a_fragment_coords`);
- B (K x 8) at row e * t + (i % e) + (K / 2) * (i / e), column g;
- C and D (16 x 8, four .f32/.s32 registers or two .f16x2 holding c0..c3 low to high) at row g + 8 * (i / 2),
  column 2t + (i & 1), for every shape: warp 0 of the wgmma accumulator (`wgmma.accumulator_coords`, v < 4).
"""

from __future__ import annotations

import numpy as np

from tessera.sm90.warp import WARP_SIZE

MMA_SYNC_M, MMA_SYNC_N = 16, 8
"""Every shape the executor runs is m16n8kK: 16 rows of A, C, D and 8 columns of B, C, D per warp."""

MMA_SYNC_TYPES = {
    ("m16n8k8", "f32", "tf32"), ("m16n8k16", "f32", "f16"), ("m16n8k16", "f16", "f16"), ("m16n8k16", "f32", "bf16"),
    ("m16n8k32", "s32", "s8"), ("m16n8k32", "s32", "u8"),
}
"""(shape, .dtype = .ctype, .atype) of the dense mma.sync forms with .row.col the executor runs; .s8 and .u8
multiplicands mix (.atype and .btype may differ), the floating ones do not."""

MMA_SYNC_ELEMENT_BITS = {"tf32": 32, "f16": 16, "bf16": 16, "s8": 8, "u8": 8}
"""Bits of one multiplicand element: K = 8 * 32 / bits (k8 tf32, k16 f16/bf16, k32 int8)."""

MMA_SYNC_LAYOUT = ("row", "col")
"""These shapes take A row-major and B column-major only (.alayout .row, .blayout .col)."""


def _parts(i, lane, k: int):
    i, lane = np.asarray(i, dtype=np.int64), np.asarray(lane, dtype=np.int64)
    per_register = k // 8
    if k not in (8, 16, 32) or np.any((lane < 0) | (lane >= WARP_SIZE)) or np.any(i < 0):
        raise ValueError("K must be 8, 16 or 32, lane in [0, 32) and the element index >= 0")
    return i, lane // 4, lane % 4, per_register


def mma_a_fragment_coords(i, lane, k: int):
    """(row, k) in the 16 x K A of element a_i of `lane`, vectorised. For m16n8k16 .f16/.bf16 the ISA prints
    "row = groupID for ai where 0 <= i < 2 || 4 <= i < 6, groupID + 8 otherwise; col = (threadID_in_group * 2) +
    (i & 0x1) for i < 4, + 8 for i >= 4"; for m16n8k32 .s8/.u8 the same with 4 and 16."""
    i, g, t, e = _parts(i, lane, k)
    return g + 8 * ((i // e) & 1), e * t + i % e + (k // 2) * (i // (2 * e))


def mma_b_fragment_coords(i, lane, k: int):
    """(k, n) in the K x 8 B of element b_i of `lane`, vectorised: for m16n8k16 "row = (threadID_in_group * 2) +
    (i & 0x1) for bi where i < 2, + 8 for i >= 2; col = groupID"."""
    i, g, t, e = _parts(i, lane, k)
    return e * t + i % e + (k // 2) * (i // e), g + 0 * i
