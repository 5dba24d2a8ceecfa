"""One rule for when a tile.mma / wgmma has finished reading shared memory, at every level
(`memory_model.WGMMA_GROUP_PER_WARPGROUP`, quoted from wgmma.commit_group: one wgmma-group per warpgroup).

A user's GEMM loop that stores its next A and B tiles from registers right after its `tile.mma`, with no
`tile.barrier` between them: with 64 rows (one warpgroup) each thread's own `wgmma.wait_group` completed the reads
its store overwrites, so the kernel is correct and every level runs it clean and right; with 128 rows (two
warpgroups, both reading all of B) a store by one warpgroup overwrites B rows the other warpgroup's wgmma read, and
every level reports it, naming B. Before the rule the Tile interpreter and the CTA simulator reported the
one-warpgroup loop too (a write after the warpgroup's wait was taken as ordered only through a barrier), while the
PTX executor ran it clean.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxExecutionError

BF16 = ml_dtypes.bfloat16

# a GEMM of BM x 64 blocks, K in steps of BK; A^T stored when TA (the tile.mma reads it transposed)
GEMM = """
builtin.module {
  func.func @gemm_refill(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<ADIMS>},
      %B: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, BM), ceildiv(N, 64)>,
                  tile.divisible = {N = 8 : i64, ADIV = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %cbm = arith.constant BM : index
    %cbk = arith.constant BK : index
    %m0 = tile.program_id x : index
    %n_block = tile.program_id y : index
    %row0 = arith.muli %m0, %cbm : index
    %col0 = arith.muli %n_block, %c64 : index
    %k_size = tile.dim %B[0] : !tile.tile<?x?xbf16, global>
    %n_k = arith.ceildivui %k_size, %cbk : index
    %a_smem = tile.alloc_shared : !tile.tile<ASHAPExbf16, shared, swizzle 128>
    %b_smem = tile.alloc_shared : !tile.tile<BKx64xbf16, shared, swizzle 128>
    %acc0 = tile.fill 0.0 : !tile.tile<BMx64xf32, register>
    %acc = scf.for %j = %c0 to %n_k step %c1 iter_args(%acc_in = %acc0) -> (!tile.tile<BMx64xf32, register>) {
      %k0 = arith.muli %j, %cbk : index
      %aw = tile.view %A[AVIEW] : !tile.tile<?x?xbf16, global> -> !tile.tile<ASHAPExbf16, global>
      %a = tile.load %aw : !tile.tile<ASHAPExbf16, global> -> !tile.tile<ASHAPExbf16, register>
      tile.store_shared %a, %a_smem : !tile.tile<ASHAPExbf16, register>, !tile.tile<ASHAPExbf16, shared, swizzle 128>
      %bw = tile.view %B[%k0, %col0] : !tile.tile<?x?xbf16, global> -> !tile.tile<BKx64xbf16, global>
      %b = tile.load %bw : !tile.tile<BKx64xbf16, global> -> !tile.tile<BKx64xbf16, register>
      tile.store_shared %b, %b_smem : !tile.tile<BKx64xbf16, register>, !tile.tile<BKx64xbf16, shared, swizzle 128>
      tile.barrier
      %acc_new = tile.mma %a_smem, %b_smem, %acc_in TRANSPOSE: !tile.tile<ASHAPExbf16, shared, swizzle 128>, !tile.tile<BKx64xbf16, shared, swizzle 128>, !tile.tile<BMx64xf32, register>
      AFTER
      scf.yield %acc_new : !tile.tile<BMx64xf32, register>
    }
    %cw = tile.view %C[%row0, %col0] : !tile.tile<?x?xf32, global> -> !tile.tile<BMx64xf32, global>
    tile.store_global %acc, %cw : !tile.tile<BMx64xf32, register>, !tile.tile<BMx64xf32, global>
    func.return
  }
}
"""


def _module(rows: int, transpose_a: bool = False, barrier: bool = False):
    """Register tiles all have `rows` rows, so B's K block is `rows` too (the lowering's rule)."""
    shape, view = (f"{rows}x{rows}", "%k0, %row0") if transpose_a else (f"{rows}x{rows}", "%row0, %k0")
    dims, divisible = ("K, M", "M") if transpose_a else ("M, K", "K")
    text = (GEMM.replace("ADIMS", dims).replace("ADIV", divisible).replace("ASHAPE", shape).replace("AVIEW", view).replace("BM", str(rows)).replace("BK", str(rows))
            .replace("TRANSPOSE", "transpose_a " if transpose_a else "")
            .replace("AFTER", "tile.barrier" if barrier else ""))
    return tessera.parse_module(text, "gemm_refill.mlir")


def _run(level: str, rows: int, transpose_a: bool = False, barrier: bool = False):
    rng = np.random.default_rng(rows)
    m, n, k = (72 if transpose_a else 70), 40, rows + 8  # two trips, the last partial: every tile refilled
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(BF16)
    b = (rng.standard_normal((k, n)) / 8).astype(BF16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tessera.launch(_module(rows, transpose_a, barrier), a, b, level=level)
    a64 = a.astype(np.float64)
    expected = (a64.T if transpose_a else a64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_one_warpgroup_refills_after_its_own_wait(level):
    """64 rows: every thread that stores the next tiles took part in the wait that completed the reads."""
    _run(level, 64)


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_two_warpgroups_race_on_the_b_both_read(level):
    """128 rows: warpgroup 1 stores B rows that warpgroup 0's wgmma read (and the other way round), and no
    barrier orders warpgroup 0's wait before that store: reported at every level, naming B."""
    with pytest.raises((KernelHazardError, PtxExecutionError), match="b_smem|0xa"):
        _run(level, 128)


def test_tile_level_refuses_a_transposed_a_of_two_groups_and_accepts_the_barrier():
    """A^T: row group g reads columns [64 g, 64 g + 64) of every row, so a store of A's rows by one group overwrites
    what the other read; one group reads only its own; the barrier after the tile.mma orders every group."""
    with pytest.raises(KernelHazardError, match="a_smem.*row group 1"):
        _run("tile", 128, transpose_a=True)
    _run("tile", 64, transpose_a=True)
    _run("tile", 128, barrier=True)
