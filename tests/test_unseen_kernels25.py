"""Kernels a user writes next, round 25 (`tests/user_kernels/*.mlir`, not earlier rounds'): a row argmax with
NumPy's first-index tie-break, a count of positive entries, a wrapping i32 row sum and a signed i32 row maximum,
over rows of any length in column blocks of 64 (`row_argmax_count.mlir`).

Bug found: `tile.row_max` and `tile.row_sum` refused i32 tiles (the verifier asked for a float), so an argmax's
"smallest column at the maximum" and a count of a row's flags needed a round trip through f32 (exact only below
2^24). They take i32 now at every level: the Tile interpreter's NumPy maximum and a sum wrapping modulo 2^32, the
lowering's `max.s32` / `add.s32` tree and butterfly shuffles (an i32 sum is never held as a per-thread partial
sum: `row_sums.partial_row_sums` takes float sums only).

The default run takes the kernel at PTX level on a shape no tile divides; `-m slow` runs every level on every
shape, every ptxas found (no warning, no spill) and `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.ir.diagnostics import LocatedVerifyException
from unseen_rounds import Case, round_tests


def _argmax_inputs(shape, rng):
    """Values in quarter steps (ties in most rows), i32 values over the whole range (sums that wrap)."""
    m, n = shape
    x = (np.round(rng.standard_normal((m, n)) * 4) / 4).astype(np.float32)
    k = rng.integers(-2**31, 2**31, size=(m, n), dtype=np.int64).astype(np.int32)
    return [x, k], {}


def _argmax_ref(x, k):
    total = k.astype(np.int64).sum(1).astype(np.uint32).view(np.int32)
    return tuple(np.asarray(a, np.float64) for a in (np.argmax(x, 1), (x > 0).sum(1), total, k.max(1)))


CASES = {
    # exact: compares, selects, integer maxima and wrapping sums
    "row_argmax_count": Case("row_argmax_count", _argmax_inputs, _argmax_ref, 0.0, 0.0,
                             ((100, 129), (1, 1), (17, 1000), (129, 64), (65, 3))),
}

FAST = {"row_argmax_count": ("ptx",)}

TOOL_SIZES = {"row_argmax_count": ["M=70", "N=100"]}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


ROW_REDUCTION = """
builtin.module {{
  func.func @f(%X: !tile.tile<64x64x{src}, global>, %Y: !tile.tile<64xf32, global> {{tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %v = tile.load %X : !tile.tile<64x64x{src}, global> -> !tile.tile<64x64x{src}, register>
    %x = {x}
    %r = tile.{op} %x : !tile.tile<64x64x{element}, register> -> !tile.tile<64x{element}, register>
    func.return
  }}
}}
"""


def test_integer_row_reduction_result_type():
    """An i32 row reduction gives an i32 row vector, not an f32 one."""
    text = ROW_REDUCTION.format(op="row_max", src="i32", x="tile.add %v, %v : !tile.tile<64x64xi32, register>",
                                element="i32").replace("-> !tile.tile<64xi32, register>", "-> !tile.tile<64xf32, register>")
    with pytest.raises(LocatedVerifyException, match="result element type must match the source's") as info:
        tessera.parse_module(text, "k.mlir")
    assert "k.mlir:7:" in str(info.value)


@pytest.mark.parametrize("op", ["row_max", "row_sum"])
def test_predicate_row_reduction_refused(op):
    """An i1 tile (a compare's) is refused at the reduction's line: select it into an i32 tile of 0 and 1."""
    text = ROW_REDUCTION.format(op=op, src="f32", x="tile.cmp gt %v, %v : !tile.tile<64x64xf32, register>",
                                element="i1")
    with pytest.raises(LocatedVerifyException, match="source must have a float or i32 element type, got i1 \\(select it into an i32 tile of 0 and 1 to count\\)") as info:
        tessera.parse_module(text, "k.mlir")
    assert "k.mlir:7:" in str(info.value)
