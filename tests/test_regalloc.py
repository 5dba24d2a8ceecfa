"""Register allocation of Target IR: pressure under the budget for every configuration, a diagnostic naming
the values live at the peak when over budget, and allocation bugs caught by the simulator's register file."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernel_abi import is_target_kernel
from tessera.passes import PTX_PIPELINE, TARGET_PIPELINE, apply_pipeline
from tessera.regalloc import RegisterBudgetError, allocate_registers
from tessera.sm90 import facts

from conftest import build_kernel

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c, dtype=t)) for d in (64, 128) for c in (False, True)
           for t in ("bf16", "f16")] + [
    ("two_pass_attention", dict(head_dim=128)), ("three_pass_attention", dict(head_dim=128)), ("gemm", dict(dtype="bf16"))]


def _target(variant, config):
    module = build_kernel(variant, **config)
    sig = tessera.find_kernel(module)
    return sig, tessera.lower_to_target(module, sig.name)


@pytest.mark.parametrize("variant,config", CONFIGS)
def test_every_configuration_fits_the_budget(variant, config):
    _, kernel = _target(variant, config)
    allocation = allocate_registers(kernel)
    assert allocation.peak <= facts.MAX_REGISTERS_PER_THREAD
    # Linear scan on intervals is optimal: the f32 class declares no more registers than the peak needs
    # (accumulator blocks, class acc, are not reused across chains on purpose).
    assert allocation.counts.get("f32", 0) <= allocation.peak
    # Every value has one name per element; registers of one class share a prefix.
    for value, names in allocation.names.items():
        assert all(n.startswith(("%", "0f", "-")) or n.lstrip("-").isdigit() for n in names)


def test_flash_attention_head_dim_128_pressure_is_close_to_the_accumulators():
    """S/P (64 f32) and O (64 f32) accumulators plus P packed (32) and bookkeeping: under 200 registers."""
    _, kernel = _target("flash_attention", dict(head_dim=128))
    allocation = allocate_registers(kernel)
    assert 160 <= allocation.peak <= 200
    assert sum(n for _, n in allocation.live_at_peak) == allocation.peak
    assert allocation.live_at_peak[0][1] >= 64  # the accumulators lead


def test_over_budget_is_a_diagnostic_naming_the_live_values():
    _, kernel = _target("flash_attention", dict(head_dim=128))
    with pytest.raises(RegisterBudgetError, match=r"registers per thread are live at once, over the budget of 100; "
                                                  r"live at the peak: %\w+ \(\d+\)"):
        allocate_registers(kernel, budget=100)


def test_the_pass_annotates_the_kernel_and_refuses_over_budget():
    module = build_kernel("gemm", dtype="bf16").clone()
    apply_pipeline(module, PTX_PIPELINE)
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    summary = {k: v.value.data for k, v in kernel.attributes["sm90.registers"].data.items()}
    assert summary["peak"] <= 255 and summary["acc"] >= 64  # the accumulators: a block of their own
    module = build_kernel("gemm", dtype="bf16").clone()
    with pytest.raises(RegisterBudgetError):
        apply_pipeline(module, TARGET_PIPELINE + ",allocate-registers{budget=64}")


def test_a_seeded_allocation_bug_is_caught_by_the_register_file(rng):
    """Give the running max m the registers of the running sum l: both are live across the loop, so the
    simulator finds a register that no longer holds the value read from it."""
    sig, kernel = _target("flash_attention", dict(head_dim=64, causal=False, dtype="bf16"))
    allocation = allocate_registers(kernel)
    loop = next(op for op in kernel.walk() if isinstance(op, scf.ForOp))
    m_new = next(op.results[0] for op in loop.body.walk() if op.results and op.results[0].name_hint == "m_new")
    l_new = next(op.results[0] for op in loop.body.walk() if op.results and op.results[0].name_hint == "l_new")
    allocation.names[m_new] = list(allocation.names[l_new])
    inputs = [rng.standard_normal((1, 1, 200, 64)) for _ in range(3)]
    arguments, sizes = prepare_arguments(sig, inputs)
    with pytest.raises(KernelHazardError, match=r"register %f\d+ no longer holds %"):
        run_target_kernel(kernel, arguments, sizes, allocation)


def test_the_unseeded_allocation_passes_the_register_file_check(rng):
    sig, kernel = _target("flash_attention", dict(head_dim=64, causal=True, dtype="f16"))
    inputs = [rng.standard_normal((1, 1, 200, 64)) for _ in range(3)]
    arguments, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(kernel, arguments, sizes, allocate_registers(kernel))
    out = arguments[3].astype(np.float32)
    from tessera import reference

    ref = reference.attention(*[a.astype(np.float32) for a in arguments[:3]], causal=True)
    assert np.abs(out - ref).max() < 0.05
