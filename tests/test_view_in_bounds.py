"""`tile.view ... in_bounds`, input dimensions given by expressions, and the attention backward's intermediates
padded to whole query blocks (FlashAttention-3's seqlen_q_rounded), which use both."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import passes
from tessera.interpreters.block_batch import KernelHazardError
from tessera.kernels import attention_backward
from text_edits import filled

# Each block copies its 64-row window of X (rows 64 m ...) into Y, through views promised in bounds: X has
# 64 ceildiv(n, 64) rows, Y n; a promise the Y view keeps only when n is a multiple of 64.
COPY = """
func.func @copy(%N: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>},
                %X: !tile.tile<?x16xf32, global> {tile.dims = #tile.dims<64 * ceildiv(n, 64), 16>},
                %Y: !tile.tile<?x16xf32, global> {tile.dims = #tile.dims<n, 16>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %m = tile.program_id x : index
  %r0 = arith.muli %m, %c64 : index
  %x = tile.view %X[%r0, %c0] in_bounds : !tile.tile<?x16xf32, global> -> !tile.tile<64x16xf32, global>
  %t = tile.load %x : !tile.tile<64x16xf32, global> -> !tile.tile<64x16xf32, register>
  %y = tile.view %Y[%r0, %c0] YPROMISE : !tile.tile<?x16xf32, global> -> !tile.tile<64x16xf32, global>
  tile.store_global %t, %y : !tile.tile<64x16xf32, register>, !tile.tile<64x16xf32, global>
  func.return
}
"""


def _copy(promise_y: bool):
    return tessera.parse_module(filled(COPY, YPROMISE="in_bounds" if promise_y else ""))


def test_promise_kept_computes_as_without_it(rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    for n, level in ((70, "tile"), (128, "tile"), (128, "ptx")):  # PTX: unpredicated ld/st
        out = tessera.interpret(_copy(promise_y=n % 64 == 0), np.zeros(n, np.float32), x, level=level)
        np.testing.assert_array_equal(out, x[:n])


def test_broken_promise_is_reported_with_the_window_and_the_block(rng):
    """Y has 70 rows: block 1's window [64, 128) leaves it. The Tile interpreter names the view, the window's
    start, the tensor and the block (a lowered kernel would write past the tensor)."""
    x = rng.standard_normal((128, 16)).astype(np.float32)
    with pytest.raises(KernelHazardError, match=r"tile.view.*is in_bounds, but its window \[64, 16\] at \[64, 0\] "
                                                r"leaves the tensor of shape \[70, 16\].*block \(1, 0, 0\)"):
        tessera.interpret(_copy(promise_y=True), np.zeros(70, np.float32), x)


def test_input_expression_dimension_is_checked_not_bound(rng):
    """X's rows are 64 ceildiv(n, 64): n comes from N alone, and X must agree with it."""
    with pytest.raises(ValueError, match=r"input X of @copy, dimension 0 \(64 \* ceildiv\(n, 64\)\): the other sizes "
                                         r"give 128, got 70"):
        tessera.interpret(_copy(False), np.zeros(70, np.float32), np.zeros((70, 16), np.float32))


def test_backward_intermediates_have_padded_rows_and_postprocess_takes_seq_q(rng):
    """The preprocess writes LSE2, dPsum and dq_accum for whole query blocks: dPsum and dq_accum zero on the padding
    rows (O and dO read as 0 past seq_q), LSE2 +inf there (P = exp2(s - LSE2) = 0 on those rows whatever a
    score_mod's bias makes s: docs/training.md); the postprocess needs seq_q, which dq_accum's rows do not give, as a launch size."""
    kernels = attention_backward(head_dim=64, block_m=64, block_n=64)
    o, do = (rng.standard_normal((1, 2, 70, 64)).astype(np.float32) for _ in range(2))
    lse = rng.standard_normal((1, 2, 70)).astype(np.float32)
    dpsum, lse2, dq_accum = tessera.interpret(kernels.preprocess, o, do, lse)
    assert dpsum.shape == lse2.shape == (1, 2, 128) and dq_accum.shape == (1, 2, 128, 64)
    assert not dpsum[..., 70:].any() and np.all(lse2[..., 70:] == np.inf) and not dq_accum.any()
    np.testing.assert_allclose(lse2[..., :70], lse * np.log2(np.e), rtol=1e-6)
    with pytest.raises(ValueError, match="needs the launch size seq_q"):
        tessera.interpret(kernels.postprocess, dq_accum)
    dq = tessera.interpret(kernels.postprocess, dq_accum + 1, seq_q=70)
    assert dq.shape == (1, 2, 70, 64) and np.all(dq == np.float32(kernels.config.attention.scale))


def test_backward_main_kernel_adds_without_bounds_masks():
    """The main kernels' dQ additions and LSE2/dPsum reads go through in_bounds views: their masks are
    constants, so the PTX's red.global.add and ld.global carry no predicate (the SASS has no branch around
    each RED: bench/backward_sass.py)."""
    main = attention_backward(head_dim=128, causal=True).main  # 64 x 128, keys on the rows: 32 reds a thread
    ptx = tessera.compile(main, target="ptx", pipeline=passes.PTX_PIPELINE)
    reds = [line.strip() for line in ptx.splitlines() if "red.global.add.f32" in line and "//" not in line]
    assert len(reds) == 32 and all(line.startswith("red.global.add.f32") for line in reds), reds[:2]
    assert "mov.pred" not in ptx
