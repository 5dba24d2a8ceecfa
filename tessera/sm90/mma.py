"""Warp-level `mma.sync` facts (the sm_80 tensor-core instruction, also on sm_90: Triton emits it on sm_90a for
dots below a warpgroup's 64 rows): the shapes and types the PTX executor runs and their register fragments.

Source: PTX ISA 9.1, section "Matrix Fragments for mma.m16n8k16 with floating point type",
https://docs.nvidia.com/cuda/parallel-thread-execution/#warp-level-matrix-fragment-mma-16816-float, with
groupID = %laneid >> 2 and threadID_in_group = %laneid % 4:

- A (16 x 16, .f16/.bf16): four .f16x2 registers, elements a0..a7 low to high; row = groupID for a_i with
  0 <= i < 2 or 4 <= i < 6, else groupID + 8; col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4. This is
  warp 0 of the wgmma m64nNk16 A fragment (`wgmma.a_fragment_coords`, tested equal in test_sm90_facts).
- B (16 x 8): two .f16x2 registers, b0..b3; row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2;
  col = groupID (`mma_b_fragment_coords`).
- C and D (16 x 8): four .f32 registers c0..c3, or two .f16x2 registers holding them low to high;
  row = groupID for i < 2, else groupID + 8; col = threadID_in_group * 2 + (i & 1): warp 0 of the wgmma
  accumulator (`wgmma.accumulator_coords` with v < 4).
"""

from __future__ import annotations

import numpy as np

from tessera.sm90.warp import WARP_SIZE

MMA_SYNC_SHAPE = (16, 8, 16)
"""(M, N, K) of `mma.sync.aligned.m16n8k16`: the floating-point shape the executor runs."""

MMA_SYNC_TYPES = {("f32", "f16"), ("f16", "f16"), ("f32", "bf16")}
"""(.dtype = .ctype, .atype = .btype) of m16n8k16 floating-point mma: .bf16 accumulates in .f32 only
[P#warp-level-matrix-instructions-mma, its table of shapes and types]."""

MMA_SYNC_LAYOUT = ("row", "col")
"""m16n8k16 takes A row-major and B column-major only (.alayout .row, .blayout .col)."""


def mma_b_fragment_coords(i, half, lane):
    """(k, n) in the 16 x 8 B of the 16-bit element in register b[i] (i < 2), `half` 0 = bits 15:0 (b_{2i}),
    1 = bits 31:16 (b_{2i+1}), of `lane`, vectorised: k = 2 * (lane % 4) + 8i + half, n = lane / 4."""
    i, half, lane = (np.asarray(x, dtype=np.int64) for x in (i, half, lane))
    if np.any((i < 0) | (i > 1)) or np.any((half < 0) | (half > 1)) or np.any((lane < 0) | (lane >= WARP_SIZE)):
        raise ValueError("B register must be 0 or 1, half 0 or 1 and lane in [0, 32)")
    return 2 * (lane % 4) + 8 * i + half, lane // 4
