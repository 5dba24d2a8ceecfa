"""Bugs seeded into the Target IR that convert-tile-to-sm90 produces for flash attention are reported by
the CTA simulator, naming the op and the thread: a missing wait on the K/V barrier, a wgmma result touched
before its wait_group, a wrong phase parity, a missing expect_tx (a wait that can never complete), and a
register of the P fragment given to a value computed while the P.V wgmma still reads it."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, scf

import tessera
from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import DeadlockError, run_target_kernel
from tessera.passes import TARGET_PIPELINE
from tessera.regalloc import allocate_registers

from conftest import build_kernel


def _lowered():
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    sig = tessera.find_kernel(module)
    return sig, tessera.lower_to_target(module, sig.name, TARGET_PIPELINE)  # single-stage: the simplest kernel


def _run(sig, kernel, rng, allocation=None):
    inputs = [rng.standard_normal((1, 1, 70, 64)) for _ in range(3)]
    arguments, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(kernel, arguments, sizes, allocation)


def _loop(kernel) -> scf.ForOp:
    return next(op for op in kernel.walk() if isinstance(op, scf.ForOp))


def _erase(op):
    op.detach()
    op.erase()


def test_the_unseeded_kernel_runs(rng):
    _run(*_lowered(), rng)


def test_missing_wait_on_the_kv_barrier_is_reported(rng):
    sig, kernel = _lowered()
    waits = [op for op in _loop(kernel).body.walk() if isinstance(op, scf.WhileOp)]
    _erase(waits[-1])  # the K/V group's try_wait loop
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .*before the TMA signalled.* in thread \d+"):
        _run(sig, kernel, rng)


def test_wgmma_result_used_before_wait_group_is_reported(rng):
    sig, kernel = _lowered()
    _erase(next(op for op in _loop(kernel).body.walk() if isinstance(op, sm90.WgmmaWaitGroupOp)))
    with pytest.raises(KernelHazardError, match=r"pending|before .*wait_group"):
        _run(sig, kernel, rng)


def test_wrong_parity_is_reported(rng):
    """Waiting on the flipped parity either passes before the copy signalled (phase 0 counts parity 1 as the
    completed previous phase) or, once the copy has landed and the phase flipped, waits forever: the
    simulator reports whichever its interleaving reaches (it lands copies when a thread waits)."""
    sig, kernel = _lowered()
    parity = next(op for op in _loop(kernel).body.walk() if isinstance(op, arith.AndIOp))
    flipped = arith.XOrIOp(parity.result, parity.rhs)
    parity.parent_block().insert_op_after(flipped, parity)
    for use in list(parity.result.uses):
        if use.operation is not flipped:
            use.operation.operands[use.index] = flipped.result
    with pytest.raises(KernelHazardError, match=r"before the TMA signalled|waiting for parity 1, but the barrier is in phase 1"):
        _run(sig, kernel, rng)


def test_missing_expect_tx_deadlocks(rng):
    sig, kernel = _lowered()
    _erase(next(op for op in _loop(kernel).body.walk() if isinstance(op, sm90.MBarrierArriveExpectTxOp)))
    with pytest.raises(DeadlockError, match=r"mbarrier_try_wait_parity .*deadlock"):
        _run(sig, kernel, rng)


def test_p_fragment_register_reused_while_pv_runs_is_reported(rng):
    """A value computed between the P.V commit and its wait: the allocator keeps it off the P fragment, which
    the tensor core still reads; given one of P's registers (a seeded allocation bug), its write is reported."""
    sig, kernel = _lowered()
    body = _loop(kernel).body.block
    commit = [op for op in body.ops if isinstance(op, sm90.WgmmaCommitGroupOp)][-1]
    pv = [op for op in body.ops if isinstance(op, sm90.WgmmaMmaAsyncOp) and op.a_in_registers][-1]
    probe = arith.AddiOp(body.args[0], body.args[0])
    probe.result.name_hint = "probe"
    body.insert_op_after(probe, commit)
    _run(sig, kernel, rng, allocate_registers(kernel))
    allocation = allocate_registers(kernel)
    allocation.names[probe.result] = allocation.names[pv.a][:1]
    with pytest.raises(KernelHazardError, match=r"%probe = arith.addi .*: writes register %r\d+ \(%probe\) while "
                                                r"`.* = sm90.wgmma_mma_async .*` of warpgroup \d still reads it as its "
                                                r"A fragment .* in thread \d+"):
        _run(sig, kernel, rng, allocation)
