"""`tile.load` of a shared tile into registers below Tile IR (convert_tile_to_sm90/shared_loads.py): a tile
copied (by TMA or by the threads) or stored (`tile.store_shared`) into shared memory, read back with each thread's
registers at their swizzled addresses, bitwise against the Tile interpreter and a NumPy reference at target and
PTX level, over element types (f32, i32, bf16, f16), swizzles (32, 64, 128 bytes), one and two warpgroups, ring
stages and one-row tiles; the read that lacks its barrier is a race at every level; the shapes it cannot take are
refused by name."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.passes.convert_tile_to_sm90.common import LoweringError
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxHazardError
from test_unseen_kernels24 import SHARED_READ_BACK

BF16 = tessera.numerics.BF16 if hasattr(tessera, "numerics") and hasattr(tessera.numerics, "BF16") else None
if BF16 is None:  # the suite's bf16 dtype
    from test_unseen_kernels24 import BF16
LEVELS = ("tile", "target", "ptx")
TYPES = {"f32": np.float32, "i32": np.int32, "bf16": BF16, "f16": np.float16}


def _values(shape, dtype, seed=0):
    """Small whole numbers (exact in every type, so every sum below is exact in f32)."""
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(dtype)


def copy_load(elt: str, bm: int, bn: int, swizzle: int, then: str = "") -> str:
    """Y = X through a [bm, bn] shared tile of `swizzle` bytes: cp_async (TMA: N promised a multiple of 16
    bytes), wait, barrier, tile.load; `then` (optional) replaces the store of the loaded tile %r."""
    tt = f"!tile.tile<{bm}x{bn}x{elt}"
    store = then or f"""    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?x{elt}, global> -> {tt}, global>
    tile.store_global %r, %yw : {tt}, register>, {tt}, global>"""
    return f"""
builtin.module {{
  func.func @copy_load(
      %X: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>}},
      %Y: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, {bm}), ceildiv(N, {bn})>,
                  tile.divisible = {{N = {16 // (2 if elt in ("bf16", "f16") else 4)} : i64}}}} {{
    %cm = arith.constant {bm} : index
    %cn = arith.constant {bn} : index
    %bi = tile.program_id x : index
    %bj = tile.program_id y : index
    %m0 = arith.muli %bi, %cm : index
    %n0 = arith.muli %bj, %cn : index
    %s = tile.alloc_shared : {tt}, shared, swizzle {swizzle}>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?x{elt}, global> -> {tt}, global>
    tile.cp_async %xw, %s : {tt}, global>, {tt}, shared, swizzle {swizzle}>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %r = tile.load %s : {tt}, shared, swizzle {swizzle}> -> {tt}, register>
{store}
    func.return
  }}
}}
"""


def run_levels(text: str, arrays, levels=LEVELS):
    module = tessera.parse_module(text, "k.mlir")
    return [tessera.launch(module, *arrays, level=level) for level in levels]


def assert_bitwise(results, expected):
    for result in results:
        assert result.dtype == expected.dtype
        np.testing.assert_array_equal(result.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))


# (element, block rows, block columns, swizzle): rows of one swizzle span and of several boxes, two warpgroups
GRID = [("f32", 64, 8, 32), ("f32", 64, 16, 64), ("f32", 64, 32, 128), ("f32", 64, 64, 128), ("f32", 128, 96, 128),
        ("i32", 64, 64, 128), ("bf16", 64, 16, 32), ("bf16", 64, 32, 64), ("bf16", 64, 128, 128),
        ("f16", 128, 64, 128), ("f16", 64, 256, 128)]


@pytest.mark.parametrize("elt,bm,bn,swizzle", GRID)
def test_a_copied_tile_reads_back_bitwise_at_target_level(elt, bm, bn, swizzle):
    """Sizes that leave partial blocks on both axes: TMA's zero fill outside the tensor, the stores masked."""
    m, n = bm + 9, 2 * bn + (8 if elt in ("f32", "i32") else 16) - (bn if bn >= 128 else 0)
    x = _values((m, n), TYPES[elt])
    assert_bitwise(run_levels(copy_load(elt, bm, bn, swizzle), [x], ("tile", "target")), x)


@pytest.mark.parametrize("elt,bm,bn,swizzle", [("f32", 64, 16, 64), ("bf16", 128, 64, 128), ("i32", 64, 8, 32)])
def test_a_copied_tile_reads_back_bitwise_in_the_ptx_executor(elt, bm, bn, swizzle):
    x = _values((bm + 3, bn + 8), TYPES[elt], seed=1)
    assert_bitwise(run_levels(copy_load(elt, bm, bn, swizzle), [x], ("target", "ptx")), x)


def test_a_tile_copied_by_the_threads_reads_back_at_every_level():
    """16-bit rows that start anywhere (K = 130): copied without TMA, by every thread, then read back: another
    thread's stores, ordered by the barrier."""
    module = tessera.parse_module(SHARED_READ_BACK, "k.mlir")
    a = _values((70, 130), BF16)
    for level in LEVELS:
        np.testing.assert_array_equal(tessera.launch(module, a, level=level), a.astype(np.float32))


@pytest.mark.parametrize("level,error", [("tile", KernelHazardError), ("target", KernelHazardError),
                                         ("ptx", PtxHazardError)])
def test_a_read_without_the_barrier_after_other_threads_stores_is_a_race(level, error):
    """The seeded bug: the barrier between the threads' copy and the read left out. Each thread reads elements
    other threads stored: every level reports it, none returns numbers."""
    module = tessera.parse_module(SHARED_READ_BACK.replace("    tile.barrier\n", ""), "k.mlir")
    with pytest.raises(error, match="tile.barrier|race"):
        tessera.launch(module, _values((70, 130), BF16), level=level)
