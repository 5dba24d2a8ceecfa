"""A wgmma operand's async-proxy check verifies lines once per change of their tags (`WgmmaUnit._check_read`):
where one TMA copy landed every line of an operand's span whole, `SharedMemory.readable_lines` answers with the
whole run of lines holding its key, so a tile's later k-steps compare stamps only. Against the rule, along causal
and non-causal flash runs: each answer is the brute-force one for the operand's own lines (every byte LANDED by a
TMA copy, in a phase every reader observed), every line of the run it returns passes the same test, and the
outputs are those of verifying the operand's own lines only."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.shared_memory import SharedMemory
from tessera.interpreters.sm90.shared_tags import EPOCH_BYTES, LANDED
from tessera.kernel_abi import kernels, signature
from tessera.regalloc import allocate_registers


def _readable(smem: SharedMemory, lines: slice, readers: np.ndarray) -> bool:
    """The rule, byte by byte: every byte of `lines` LANDED by a TMA copy in a phase every reader observed."""
    span = slice(lines.start * EPOCH_BYTES, min(lines.stop * EPOCH_BYTES, smem.size))
    if not (smem.state[span] == LANDED).all() or (smem.writer[span] >= 0).any():
        return False
    observed = smem.cta.mbarriers.observed
    return bool((observed[smem.barrier[span][:, None], readers[None, :]] > smem.phase[span][:, None]).all())


def _run(causal: bool, own_lines_only: bool, monkeypatch) -> tuple[list[np.ndarray], int]:
    found = SharedMemory.readable_lines
    answers = [0]

    def checked(self, lines, readers):
        run = found(self, lines, readers)
        assert (run is not None) == _readable(self, lines, readers)
        if run is not None:
            assert run.start <= lines.start and lines.stop <= run.stop
            assert _readable(self, run, readers)
            answers[0] += run != lines
            return lines if own_lines_only else run
        return None

    monkeypatch.setattr(SharedMemory, "readable_lines", checked)
    module = tessera.kernels.flash_attention(head_dim=64, causal=causal)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, 1, 384, 64)) for _ in range(3)]
    arrays, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(target, arrays, sizes, allocate_registers(target))
    monkeypatch.undo()
    return [np.asarray(a).copy() for a in arrays], answers[0]


@pytest.mark.parametrize("causal", [False, True])
def test_readable_runs_are_readable_and_change_nothing(causal, monkeypatch):
    """Every run `readable_lines` returns is readable by the rule, it answers as the rule for the operand's own
    lines, wider runs are found (the k-steps after a tile's first), and the outputs are those of verifying the
    operand's own lines only."""
    wide, widened = _run(causal, False, monkeypatch)
    own, _ = _run(causal, True, monkeypatch)
    assert widened > 0
    for a, b in zip(wide, own):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
