"""`convert-tile-to-sm90{mma-order=first-read}`, the default (`passes/convert_tile_to_sm90/mma_order.py`): the
attention backward's wgmma groups issued in the order their results are first read, each before the first wait
for an earlier group it may precede (FlashAttention-3's `bwd_step`), against the builder's order
(`mma-order=program`):
- the consumers' trip waits as FA3's: S and dP committed together and P computed under dP (`wait_group 1`), dV
  in flight across the barrier (head_dim 128), dQ committed before dK and staged under it (`wait_group 1`), two
  drains (`wait_group 0`) a trip instead of four (three at head_dim 64), at head_dim 128 (64 x 128, keys on the
  rows) and 64 (128 x 128, queries on the rows);
- only the order changes: the kernel's outputs are bitwise those of the builder's order (the PTX executor; the CTA
  simulator and head_dim 64 under `-m slow`);
- a bad value is refused by name.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import scf

import tessera
from tessera import passes
from tessera.dialects import sm90
from tessera.kernels import attention_backward
from text_edits import checked

SLOW = pytest.mark.slow
BF16 = ml_dtypes.bfloat16


def _pipeline(order: str, base: str = passes.DEFAULT_PIPELINE) -> str:
    return checked(base).replace("convert-tile-to-sm90", f"convert-tile-to-sm90{{mma-order={order}}}")


def _trip_waits(main, order: str) -> list:
    """"c" for each wgmma commit and the wait_group count of each wait, in the consumers' innermost loop."""
    lowered = tessera.compile(main, target="target", pipeline=_pipeline(order, passes.SPECIALIZED_PIPELINE))
    loops = [op for op in lowered.walk() if isinstance(op, scf.ForOp)
             and any(isinstance(o, sm90.WgmmaCommitGroupOp) for o in op.body.block.ops)]
    (loop,) = loops
    return ["c" if isinstance(op, sm90.WgmmaCommitGroupOp) else op.pending.value.data
            for op in loop.body.block.ops if isinstance(op, sm90.WgmmaCommitGroupOp | sm90.WgmmaWaitGroupOp)]


@pytest.mark.parametrize("head_dim, block, program, first_read", [
    # S; dP; dV, dK, barrier; dQ  ->  S, dP; dV, barrier; dQ, dK
    (128, (64, 128), ["c", 0, "c", 0, "c", "c", 0, "c", 0], ["c", "c", 1, 0, "c", "c", "c", 1, 0]),
    # S; dP; barrier; dV, dK, dQ  ->  S, dP; barrier; dV, dQ, dK
    pytest.param(64, (128, 128), ["c", 0, "c", 0, "c", "c", "c", 0], ["c", "c", 1, 0, "c", "c", "c", 1, 0],
                 marks=SLOW),
])
def test_first_read_places_the_backward_waits_as_flash_attention_3(head_dim, block, program, first_read):
    main = attention_backward(head_dim=head_dim, block_m=block[0], block_n=block[1]).main
    assert _trip_waits(main, "program") == program
    assert _trip_waits(main, "first-read") == first_read


def _main_outputs(kernels, level: str, order: str, seq_q: int, seq_k: int, heads: int):
    rng = np.random.default_rng(0)
    d = kernels.config.attention.head_dim
    q, do = (rng.standard_normal((1, heads, seq_q, d)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, seq_k, d)).astype(BF16) for _ in range(2))
    rows = -(-seq_q // kernels.config.attention.block_m) * kernels.config.attention.block_m
    lse2 = rng.uniform(1.0, 4.0, (1, heads, rows)).astype(np.float32)
    dpsum = rng.standard_normal((1, heads, rows)).astype(np.float32)
    return tessera.interpret(kernels.main, q, k, v, do, lse2, dpsum, level=level, pipeline=_pipeline(order))


@pytest.mark.parametrize("head_dim, block, causal, level", [
    pytest.param(128, (64, 128), True, "target", marks=SLOW),
    (128, (64, 128), False, "ptx"),
    pytest.param(64, (128, 128), True, "target", marks=SLOW),
    pytest.param(64, (128, 128), False, "ptx", marks=SLOW),
])
def test_first_read_is_bitwise_the_program_order(head_dim, block, causal, level):
    """Two query blocks, GQA 2:1, ragged keys: the same ops on the same operands, in another issue order."""
    kernels = attention_backward(head_dim=head_dim, causal=causal, block_m=block[0], block_n=block[1])
    first = _main_outputs(kernels, level, "first-read", block[0] + 10, block[1] - 7, 2)
    program = _main_outputs(kernels, level, "program", block[0] + 10, block[1] - 7, 2)
    assert all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
               for a, b in zip(first, program))


def test_a_bad_order_is_refused_by_name():
    main = attention_backward(head_dim=128).main
    with pytest.raises(Exception, match="mma-order must be one of first-read, program"):
        tessera.compile(main, target="target", pipeline=_pipeline("sideways", passes.SPECIALIZED_PIPELINE))


REGISTER_A_READ_AGAIN = """
builtin.module {
  func.func @register_a_read_again(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %W: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bi = tile.program_id x : index
    %bj = tile.program_id y : index
    %m0 = arith.muli %bi, %c64 : index
    %n0 = arith.muli %bj, %c64 : index
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %ww = tile.view %W[%c0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %aw = tile.view %A[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    %a = tile.load %aw : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %p = tile.mma %a, %w_smem, %zero : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %af = tile.cast %a : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %af, %p : !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


def test_a_register_a_operand_read_again_waits_for_its_group():
    """C = A W + A with A in registers: the cast of A after the mma read A's registers while the wgmma group was
    in flight (undefined in the PTX ISA; the PTX executor's hazard), since only a group's result was waited for.
    Now its first read waits (`PendingMma.register_a`), and every level gives the exact numbers (the PTX
    executor raised PtxHazardError: "touches %r0, an A-fragment register of the wgmma.mma_async ...")."""
    rng = np.random.default_rng(0)
    a, w = rng.integers(-8, 9, (70, 64)).astype(BF16), rng.integers(-8, 9, (64, 64)).astype(BF16)
    expected = (a.astype(np.float64) @ w.astype(np.float64) + a).astype(np.float32)
    module = tessera.parse_module(REGISTER_A_READ_AGAIN, "k.mlir")
    for level in ("tile", "target", "ptx"):
        np.testing.assert_array_equal(tessera.launch(module, a, w, level=level), expected)
