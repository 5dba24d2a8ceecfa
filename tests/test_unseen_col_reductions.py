"""Kernels a user writes next with the column reductions (`tile.col_sum`, `tile.col_max`, `tile.col_min`: [M, N] ->
[1, N]) and what they are combined with.

Found here: `tile.atomic_add ... transpose` of a value several threads hold (`_transposed_access` in
`passes/convert_tile_to_sm90/backward.py` took every thread's share as a full tile's): a [1, N] column vector
into an [N, 1] window stopped the CTA simulator with an IndexError and made the PTX executor add out of bounds,
and an [BM, 1] column into a [1, BM] window of a tensor of more rows added into rows 2, 4 and 6 of the tensor as
well. Both add each element once, from one of its holders, now.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_tile_col_reductions import _launch

# region transposed adds of values several threads hold


def _transposed_add(value: str, window: str, dims: str) -> str:
    """X's corner window [value] loaded and added transposed into the [window] window at TT's corner."""
    v = f"!tile.tile<{value}xf32, register>"
    return f"""
builtin.module {{
  func.func @tadd(%X: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<M, N>}},
      %TT: !tile.tile<?x?xf32, global> {{tile.dims = #tile.dims<{dims}>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %c0 = arith.constant 0 : index
    %xw = tile.view %X[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<{value}xf32, global>
    %x = tile.load %xw : !tile.tile<{value}xf32, global> -> {v}
    %tw = tile.view %TT[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<{window}xf32, global>
    tile.atomic_add %x, %tw transpose : {v}, !tile.tile<{window}xf32, global>
    func.return
  }}
}}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
@pytest.mark.parametrize("value, window, dims, shape", [
    ("1x64", "64x1", "N, 1", (1, 64)),    # a column vector into a column: was an IndexError / out of bounds
    ("1x32", "32x1", "N, 1", (1, 20)),    # ... whose window reaches past the tensor's end
    ("1x32", "32x1", "N, 4", (1, 32)),    # ... into column 0 of a wider tensor
    ("64x1", "1x64", "8, 64", (64, 1)),   # an [BM, 1] column into a row: added into rows 2, 4, 6 as well
])
def test_transposed_add_of_vectors_adds_each_element_once(value, window, dims, shape, level):
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    (out,) = (_launch(_transposed_add(value, window, dims), x, level=level),)
    expected = np.zeros_like(out)
    expected[:x.shape[1], :x.shape[0]] = x.T
    np.testing.assert_array_equal(out, expected)

# endregion
