"""The Tile interpreter's semantics of the backward's ops (dialects/tile_backward.py): reducing stores add every
block's contribution and drop what falls outside the tensor, shared stores are published by a barrier,
semaphores order blocks whatever order they run in, and seeded bugs in the backward's main kernel (a missing
barrier, a missing signal) are reported rather than computed."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf

import tessera
from tessera.dialects import tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments, run_grid
from text_edits import checked

ORDERED_ADD = """
func.func @ordered_add(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                       %ACC: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"},
                       %SEM: !tile.tile<1xi32, global> {tile.dims = #tile.dims<1>, tile.role = "scratch"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<8>} {
  %c0 = arith.constant 0 : index
  %b = tile.program_id x : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  %x = tile.load %w : !tile.tile<16x64xf32, global> -> !tile.tile<16x64xf32, register>
  %xs = tile.scale %x by 0.1 : !tile.tile<16x64xf32, register>
  %sem = tile.view %SEM[%c0] : !tile.tile<1xi32, global> -> !tile.tile<1xi32, global>
  tile.sem_wait %sem, %b : !tile.tile<1xi32, global>
  %a = tile.view %ACC[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  tile.atomic_add %xs, %a : !tile.tile<16x64xf32, register>, !tile.tile<16x64xf32, global>
  tile.sem_signal %sem : !tile.tile<1xi32, global>
  func.return
}
"""


def _run(text: str, x: np.ndarray, order=None):
    module = tessera.parse_module(text)
    sig = tessera.find_kernel(module)
    arguments, sizes = prepare_arguments(sig, [x])
    run_grid(sig, module, arguments, sizes, order=order)
    return arguments


def test_atomic_add_sums_every_block_and_drops_rows_outside_the_tensor(rng):
    unordered = "\n".join(line for line in ORDERED_ADD.splitlines() if "tile.sem_" not in line)
    x = rng.standard_normal((11, 64)).astype(np.float32)  # a 16-row window over 11 rows: 5 fall outside
    _, acc, _ = _run(unordered, x, order=rng.permutation(8))
    assert acc.shape == (11, 64)
    np.testing.assert_allclose(acc, 8 * (x * np.float32(0.1)), rtol=1e-6)


def test_semaphores_order_the_additions_bitwise(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    results = [_run(ORDERED_ADD, x, order=rng.permutation(8)) for _ in range(3)]
    for _, acc, sem in results:
        assert np.array_equal(acc, results[0][1]) and sem[0] == 8  # every block signalled once
    expected = np.zeros_like(x)
    for _ in range(8):  # block 0's contribution first, then block 1's, ...
        expected += x * np.float32(0.1)
    assert np.array_equal(results[0][1], expected)


def test_a_wait_no_block_can_satisfy_is_a_deadlock(rng):
    no_signal = checked(ORDERED_ADD).replace("  tile.sem_signal %sem : !tile.tile<1xi32, global>\n", "")
    with pytest.raises(KernelHazardError, match=r"tile.sem_wait .* to reach \d, but it is 0 and every other "
                                                r"block is waiting or finished \(deadlock\)"):
        _run(no_signal, np.ones((16, 64)))


def test_order_must_be_a_permutation():
    with pytest.raises(ValueError, match="order must be a permutation of the 8 block ids"):
        _run(ORDERED_ADD, np.ones((16, 64)), order=[0] * 8)


ROWS = """
func.func @rows(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                %R: !tile.tile<?xf32, global> {tile.dims = #tile.dims<n>},
                %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"},
                %Z: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %xw = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  %x = tile.load %xw : !tile.tile<16x64xf32, global> -> !tile.tile<16x64xf32, register>
  %rw = tile.view %R[%c0] : !tile.tile<?xf32, global> -> !tile.tile<16xf32, global>
  %r = tile.load %rw : !tile.tile<16xf32, global> -> !tile.tile<16xf32, register>
  %y = tile.exp2_subtract %x, %r : !tile.tile<16x64xf32, register>, !tile.tile<16xf32, register>
  %z = tile.sub_rows %x, %r : !tile.tile<16x64xf32, register>, !tile.tile<16xf32, register>
  %yw = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  tile.store_global %y, %yw : !tile.tile<16x64xf32, register>, !tile.tile<16x64xf32, global>
  %zw = tile.view %Z[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  tile.store_global %z, %zw : !tile.tile<16x64xf32, register>, !tile.tile<16x64xf32, global>
  func.return
}
"""


def test_exp2_subtract_and_sub_rows(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    r = rng.standard_normal(16).astype(np.float32)
    x[3], r[3] = -np.inf, -np.inf  # a row that sees no key: -inf scores, LSE -inf
    y, z = tessera.interpret(tessera.parse_module(ROWS), x, r)
    difference = np.delete(x, 3, 0) - np.delete(r, 3)[:, None]
    np.testing.assert_allclose(np.delete(y, 3, 0), np.exp2(difference), rtol=1e-6)
    assert np.array_equal(y[3], np.zeros(64, np.float32))  # 2^(-inf - 0), not NaN
    np.testing.assert_array_equal(np.delete(z, 3, 0), difference)
    assert np.isnan(z[3]).all()  # sub_rows has no safe rule: -inf - -inf is NaN


# Seeded bugs in the backward's main kernel.


def _main(deterministic: bool = False):
    return tessera.kernels.attention_backward(64, causal=True, deterministic=deterministic).main.clone()


def _loop_ops(module, op_type):
    inner = [op for op in module.walk() if isinstance(op, scf.ForOp)][-1]  # the loop over query blocks
    return [op for op in inner.body.walk() if isinstance(op, op_type)]


def _erase(op):
    op.detach()
    op.erase()


def _main_inputs(rng, seq_q=150, seq_k=200):
    q, do = (rng.standard_normal((1, 2, seq_q, 64)) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, seq_k, 64)) for _ in range(2))
    padded = 128 * -(-seq_q // 128)  # LSE2 and dPsum have whole query blocks of rows (FA3's seqlen_q_rounded)
    rows = [np.zeros((1, 2, padded), np.float32) for _ in range(2)]
    return [q, k, v, do, *rows]


def test_the_unseeded_main_kernel_runs(rng):
    tessera.interpret(_main(), *_main_inputs(rng))


def test_missing_barrier_after_shared_stores_is_reported(rng):
    module = _main()
    barrier = next(op for op in _loop_ops(module, tile.BarrierOp)
                   if isinstance(op.prev_op, tile.StoreSharedOp))
    _erase(barrier)
    with pytest.raises(KernelHazardError, match=r"tile.mma .* stored by tile.store_shared but not yet published "
                                                r"to the block \(missing tile.barrier after the store\)"):
        tessera.interpret(module, *_main_inputs(rng))


def test_overwriting_p_before_every_warp_read_it_is_reported(rng):
    module = _main()
    _erase(_loop_ops(module, tile.BarrierOp)[-1])  # the barrier ending a trip: the next trip's P store races
    with pytest.raises(KernelHazardError, match="read since the last tile.barrier"):
        tessera.interpret(module, *_main_inputs(rng, seq_q=300))


def test_a_missing_signal_deadlocks_the_deterministic_kernel(rng):
    module = _main(deterministic=True)
    _erase(_loop_ops(module, tile.SemSignalOp)[0])
    with pytest.raises(KernelHazardError, match=r"tile.sem_wait .* \(deadlock\)"):
        tessera.interpret(module, *_main_inputs(rng))
