"""With a register allocation checked, the register file's fence rule (`register_check`) replaces the SSA form
(`WgmmaUnit._check_fenced` returns before reading `produced` and `chain_read`), so `launch._checkers` leaves out
`wgmma_checks.RegisterWrites`, the only writer of those records. Against the checkers with it: the same reports
(an A fragment and an accumulator written after the fence, scale-d 0 and 1, a clean kernel) and the same bits."""

from __future__ import annotations

import pytest

import tessera.interpreters.sm90.launch as launch
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90.wgmma_checks import PendingUseChecker, RegisterWrites
from tessera.regalloc import allocate_registers

from test_sm90_simulator import RS_GEMM, _FENCE_THEN_ACC, _run_rs, checked
from text_edits import planted

_PACK = '    %a_regs = sm90.cvt_pack %a_f32 type "bf16" : vector<8xf32> -> vector<4xi32>\n'
_NEGATE = "    %acc1 = arith.negf %acc0 : vector<32xf32>\n"

KERNELS = {
    "clean": RS_GEMM,
    "zero accumulator, scale-d 0": _FENCE_THEN_ACC,
    "A fragment after the fence": checked(planted(_FENCE_THEN_ACC, _PACK, "")).replace(
        "    sm90.wgmma_fence\n", "    sm90.wgmma_fence\n" + _PACK),
    "accumulator after the fence, scale-d 0": checked(_FENCE_THEN_ACC).replace(
        "    %false = arith.constant false\n", _NEGATE + "    %false = arith.constant false\n").replace(
        "sm90.wgmma_mma_async %acc0,", "sm90.wgmma_mma_async %acc1,"),
    "accumulator after the fence": checked(planted(RS_GEMM, "    sm90.wgmma_fence\n", "")).replace(
        "    %d = sm90.wgmma_mma_async %acc0,", "    sm90.wgmma_fence\n" + _NEGATE
        + "    %d = sm90.wgmma_mma_async %acc1,"),
}


def _with_register_writes(cta, allocation, listeners, options):
    """The checkers before: `RegisterWrites` whenever races are checked."""
    checkers = (PendingUseChecker(cta.wgmma), RegisterWrites(cta.wgmma, options.register_sources))
    if allocation is not None:
        checkers += (launch.RegisterFileChecker(cta, allocation),)
    return checkers


def _outcome(kernel: str, rng) -> tuple:
    try:
        c, _ = _run_rs(kernel, rng, allocate_registers)
    except KernelHazardError as error:
        return ("hazard", str(error))
    return ("ran", c.tobytes())


@pytest.mark.parametrize("name", list(KERNELS))
def test_reports_and_bits_are_those_with_register_writes(name, monkeypatch):
    import numpy as np

    kernel = KERNELS[name]
    without = _outcome(kernel, np.random.default_rng(5))
    monkeypatch.setattr(launch, "_checkers", _with_register_writes)
    assert _outcome(kernel, np.random.default_rng(5)) == without
