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
from text_edits import filled

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
    text = (filled(GEMM, ADIMS=dims, ADIV=divisible, ASHAPE=shape, AVIEW=view, BM=str(rows), BK=str(rows),
                   TRANSPOSE="transpose_a " if transpose_a else "", AFTER="tile.barrier" if barrier else ""))
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


# The PTX executor when the warps of a warpgroup reach the wait at different times: warp 0 takes a detour, so
# warps 1-3 complete the group first; thread 0 then stores into the bytes the wgmma read, after its own wait
# (correct: the group is the warpgroup's, its wait returning means the reads are done) or, seeded, in the detour
# before it (a race: nothing orders the other warps' wait before the store).
LATE_WAIT = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry late_wait(.param .u64 out)
.reqntid 128, 1, 1
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<3>;
    .reg .b32 %r<4>;
    .reg .pred %p<3>;
    .shared .align 128 .b8 tile[4096];
    mov.u32 %r0, tile;
    cvt.u64.u32 %rd0, %r0;
    shr.u64 %rd0, %rd0, 4;
    and.b64 %rd0, %rd0, 0x3FFF;
    or.b64 %rd0, %rd0, 0x0000004000010000;
    setp.ne.b64 %p0, %rd0, %rd0;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, %rd0, %rd0, %p0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    setp.eq.u32 %p2, %r1, 0;
    mov.u32 %r2, 7;
    @%p1 bra DETOUR;
BACK:
    wgmma.wait_group.sync.aligned 0;
    AFTER
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.f32 [%rd1], %f0;
    ret;
DETOUR:
    BEFORE
    bra BACK;
}
"""
_STORE = "@%p2 st.shared.u32 [tile], %r2;"


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 1)])
def test_a_thread_whose_own_wait_comes_after_the_other_warps_may_overwrite(schedule, seed):
    from tessera.interpreters.ptx import launch

    launch(filled(LATE_WAIT, AFTER=_STORE, BEFORE=""), "late_wait", 1, 128,
           [np.zeros(128, np.float32)], shared_bytes=4096, schedule=schedule, seed=seed)


def test_a_store_before_the_threads_own_wait_races_the_wgmma_the_other_warps_waited_for():
    from tessera.interpreters.ptx import launch

    with pytest.raises(PtxExecutionError, match=r"st.shared.u32: the store overwrites shared address 0x0, which a "
                                                r"wgmma of warpgroup 0 read until its wgmma.wait_group"):
        launch(filled(LATE_WAIT, AFTER="", BEFORE=_STORE), "late_wait", 1, 128,
               [np.zeros(128, np.float32)], shared_bytes=4096)
