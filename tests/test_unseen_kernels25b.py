"""Round 25b's bug: a row reduction of an [M, 1] column ran at Tile level but was refused below it ("register tiles
need a column count that is a legal wgmma N"), though the column is a documented register shape; a float row sum
of one kept as a per-thread partial sum would have been added over the quad (four times the value). The column's
reduction is itself now (`AttentionLowering._reduce_rows`), never a partial sum (`row_sums.partial_row_sums`).
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from unseen_rounds import LEVELS


COLUMN_REDUCTIONS = """
builtin.module {
  func.func @column_rows(%X: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<M, 1>},
      %K: !tile.tile<?x1xi32, global> {tile.dims = #tile.dims<M, 1>},
      %SUM: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %MIN: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"},
      %KMAX: !tile.tile<?xi32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
    %x = tile.load %xw : !tile.tile<64x1xf32, global> -> !tile.tile<64x1xf32, register>
    %kw = tile.view %K[%m0, %c0] : !tile.tile<?x1xi32, global> -> !tile.tile<64x1xi32, global>
    %k = tile.load %kw : !tile.tile<64x1xi32, global> -> !tile.tile<64x1xi32, register>
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64xf32, register>
    %sum = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %zero) -> (!tile.tile<64xf32, register>) {
      %s = tile.row_sum %x : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
      %acc2 = tile.fma %one, %acc, %s : !tile.tile<64xf32, register>
      scf.yield %acc2 : !tile.tile<64xf32, register>
    }
    %mn = tile.row_min %x : !tile.tile<64x1xf32, register> -> !tile.tile<64xf32, register>
    %kmx = tile.row_max %k : !tile.tile<64x1xi32, register> -> !tile.tile<64xi32, register>
    %sw = tile.view %SUM[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %sum, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %mw = tile.view %MIN[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %mn, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %kmw = tile.view %KMAX[%m0] : !tile.tile<?xi32, global> -> !tile.tile<64xi32, global>
    tile.store_global %kmx, %kmw : !tile.tile<64xi32, register>, !tile.tile<64xi32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", LEVELS)
def test_row_reductions_of_a_column(level):
    """A row reduction of an [M, 1] column is the column at every level (it was refused below Tile IR), and a
    float row sum of one accumulated by tile.fma in a loop (a per-thread partial sum's pattern) is not added over
    the quad again (it would be four times the value)."""
    x = np.array([[1.0], [-0.0], [np.nan], [-np.inf]] * 17 + [[0.5]], np.float32)
    k = np.arange(-34, 35, dtype=np.int32)[:, None] * 31234567
    total, smallest, largest = tessera.launch(tessera.parse_module(COLUMN_REDUCTIONS, "column_rows.mlir"), x, k,
                                              level=level)
    np.testing.assert_array_equal(total, x[:, 0] * 3)
    np.testing.assert_array_equal(smallest.view(np.uint32), x[:, 0].view(np.uint32))
    np.testing.assert_array_equal(largest, k[:, 0])
