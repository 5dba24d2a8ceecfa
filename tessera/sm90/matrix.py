"""ldmatrix/stmatrix m8n8 fragments of 16-bit elements [P#warp-level-matrix-instructions-stmatrix,
-ldmatrix; the PTX ISA's figure "stmatrix fragment" and its .trans variant]:

- `.x1/.x2/.x4`: the warp moves 1, 2 or 4 matrices of 8 x 8 elements; lanes 8j .. 8j+7 give the 16-byte row
  addresses of rows 0..7 of matrix j (`stmatrix_row_lane`); register j of every lane belongs to matrix j.
- Lane l's register holds two elements, the first in bits 15:0: row l/4, columns 2(l%4) and 2(l%4)+1
  (`stmatrix_coords`); with `.trans` the element positions are transposed (row and column swapped).

A wgmma accumulator pair (d[v], d[v+1]) of a thread sits at row g (+8), columns 2c, 2c+1 of an 8 x 8 block
(`tessera.sm90.wgmma.accumulator_coords`), which is this layout: packed into registers, pairs 8s+2j, 8s+2j+1
(j = 0..3) of a warp are matrix j of `.x4`, whose rows are rows 8(j%2)..8(j%2)+7 of the warp's 16 rows at
columns 16s + 8(j/2) (`accumulator_stmatrix_block`).
"""

from __future__ import annotations

import numpy as np

STMATRIX_COUNTS = (1, 2, 4)
"""The matrices one stmatrix/ldmatrix moves (.x1, .x2, .x4)."""

MATRIX_ROWS = 8
MATRIX_ROW_BYTES = 16
"""An m8n8 .b16 matrix: 8 rows of 8 16-bit elements, each row 16 contiguous bytes, 16-byte aligned."""


def stmatrix_coords(lane, half, trans: bool = False):
    """(row, column) in its matrix of element `half` (0: bits 15:0, 1: bits 31:16) of lane `lane`'s register."""
    lane, half = np.asarray(lane), np.asarray(half)
    row, col = lane // 4, 2 * (lane % 4) + half
    return (col, row) if trans else (row, col)


def stmatrix_row_lane(matrix, row):
    """The lane whose address operand gives row `row` of matrix `matrix`."""
    return MATRIX_ROWS * np.asarray(matrix) + np.asarray(row)


def accumulator_stmatrix_block(j: int, s: int) -> tuple[int, int]:
    """(first row, first column) within a warp's 16 accumulator rows of matrix j of the .x4 stmatrix that stores
    the packed pairs 8s + 2j, 8s + 2j + 1 of each thread (untransposed)."""
    return MATRIX_ROWS * (j % 2), 16 * s + MATRIX_ROWS * (j // 2)
