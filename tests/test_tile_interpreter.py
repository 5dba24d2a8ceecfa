"""The Tile IR interpreter's checks: seeded asynchrony bugs are reported, not computed; bad launches are
refused with messages that say what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf

import tessera
import tessera.kernels
from tessera.dialects import tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.reference_attention import attention_operands

from conftest import build_kernel
from text_edits import filled


def _fresh_flash():
    return build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16").clone()


def _loop_ops(module, op_type):
    loop = next(op for op in module.walk() if isinstance(op, scf.ForOp))
    return [op for op in loop.body.walk() if isinstance(op, op_type)]


def _erase(op):
    op.detach()
    op.erase()


def test_unseeded_kernel_runs(rng):
    tessera.interpret(_fresh_flash(), *attention_operands(rng, 150, 150, 64, heads=2))


def test_a_block_of_more_row_groups_than_an_int64_mask_has_runs(rng):
    """Regression: flash attention with block_m = 4096 (64 row groups of 64 rows; a multiple of 16, which the
    builder takes and the passes refuse) was "OverflowError: Python int too large to convert to C long" in
    tile.mma, whose race checks kept one bit per row group."""
    from tessera.reference import check_attention

    q, k, v = attention_operands(rng, 40, 40, 64, heads=1)
    module = tessera.kernels.flash_attention(head_dim=64, block_m=4096)
    o = tessera.interpret(module, q, k, v)
    assert check_attention(o, q, k, v, o.dtype).ok


def test_missing_wait_is_reported(rng):
    module = _fresh_flash()
    _erase(_loop_ops(module, tile.CpWaitGroupOp)[0])
    with pytest.raises(KernelHazardError, match=r"tile.mma .* still in flight .* in block \(0, 0, 0\)"):
        tessera.interpret(module, *attention_operands(rng, 150, 150, 64, heads=2))


def test_missing_commit_is_reported(rng):
    module = _fresh_flash()
    _erase(_loop_ops(module, tile.CpCommitGroupOp)[0])
    with pytest.raises(KernelHazardError, match="still in flight"):
        tessera.interpret(module, *attention_operands(rng, 150, 150, 64, heads=2))


def test_missing_barrier_after_wait_is_reported(rng):
    module = _fresh_flash()
    _erase(_loop_ops(module, tile.BarrierOp)[0])
    with pytest.raises(KernelHazardError, match="missing tile.barrier after cp_wait_group"):
        tessera.interpret(module, *attention_operands(rng, 150, 150, 64, heads=2))


def test_write_after_read_race_is_reported(rng):
    """Without the barrier that ends the loop body, the next trip's copy overwrites K while it is read."""
    module = _fresh_flash()
    _erase(_loop_ops(module, tile.BarrierOp)[-1])
    with pytest.raises(KernelHazardError, match="write-after-read race"):
        tessera.interpret(module, *attention_operands(rng, 150, 150, 64, heads=2))


RING = """
func.func @ring(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>},
                %C: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %s = arith.constant STAGE : index
  %ring = tile.alloc_shared : !tile.tile<2x16x64xbf16, shared, swizzle 128>
  %b0 = tile.stage %ring[%c0] : !tile.tile<2x16x64xbf16, shared, swizzle 128> -> !tile.tile<16x64xbf16, shared, swizzle 128>
  %b1 = tile.stage %ring[%s] : !tile.tile<2x16x64xbf16, shared, swizzle 128> -> !tile.tile<16x64xbf16, shared, swizzle 128>
  %w0 = tile.view %A[%c0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<16x64xbf16, global>
  %w1 = tile.view %A[%c16, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<16x64xbf16, global>
  tile.cp_async %w0, %b0 : !tile.tile<16x64xbf16, global>, !tile.tile<16x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_async %w1, %b1 : !tile.tile<16x64xbf16, global>, !tile.tile<16x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group PENDING
  tile.barrier
  %r = tile.load READ : !tile.tile<16x64xbf16, shared, swizzle 128> -> !tile.tile<16x64xbf16, register>
  %f = tile.cast %r : !tile.tile<16x64xbf16, register> -> !tile.tile<16x64xf32, register>
  %o = tile.view %C[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  tile.store_global %f, %o : !tile.tile<16x64xf32, register>, !tile.tile<16x64xf32, global>
  func.return
}
"""


def _ring(stage=1, pending=0, read="%b1"):
    text = filled(RING, STAGE=str(stage), PENDING=str(pending), READ=read)
    return tessera.parse_module(text)


def test_wait_group_leaves_the_newest_groups_in_flight(rng):
    a = rng.standard_normal((40, 64)).astype(np.float32)
    out = tessera.interpret(_ring(pending=1, read="%b0"), a)  # the older group has landed
    np.testing.assert_array_equal(out[:16], a[:16].astype(tessera.numerics.BF16).astype(np.float32))
    with pytest.raises(KernelHazardError, match="still in flight"):
        tessera.interpret(_ring(pending=1, read="%b1"), a)
    out = tessera.interpret(_ring(pending=0, read="%b1"), a)
    np.testing.assert_array_equal(out[:16], a[16:32].astype(tessera.numerics.BF16).astype(np.float32))


def test_stage_out_of_range_is_reported(rng):
    with pytest.raises(KernelHazardError, match=r"stage index out of range \[0, 2\)"):
        tessera.interpret(_ring(stage=2), rng.standard_normal((40, 64)))


def test_copy_past_the_end_reads_zeros(rng):
    a = rng.standard_normal((20, 64)).astype(np.float32)
    out = tessera.interpret(_ring(pending=0, read="%b1"), a)  # rows 16..31 of a 20-row tensor
    np.testing.assert_array_equal(out[:4], a[16:20].astype(tessera.numerics.BF16).astype(np.float32))
    assert np.all(out[4:16] == 0)


def test_launch_errors_name_the_problem(rng):
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    q = rng.standard_normal((1, 2, 10, 64))
    with pytest.raises(ValueError, match="takes 3 inputs"):
        tessera.interpret(module, q, q)
    with pytest.raises(ValueError, match="compiled for 64, got 128"):
        tessera.interpret(module, q, q, rng.standard_normal((1, 2, 10, 128)))
    with pytest.raises(ValueError, match="'heads' is 2 elsewhere, got 3"):
        tessera.interpret(module, q, rng.standard_normal((1, 3, 10, 64)), q)
    with pytest.raises(ValueError, match="size seq_q=11 contradicts"):
        tessera.interpret(module, q, q, q, seq_q=11)
    with pytest.raises(ValueError, match="unknown interpreter level 'sass'"):
        tessera.interpret(module, q, q, q, level="sass")
    with pytest.raises(ValueError, match="no kernel named 'nope'"):
        tessera.interpret(module, q, q, q, kernel="nope")
