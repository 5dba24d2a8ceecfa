"""Straight runs of the PTX executor's scheduler (`schedule.Scheduler._straight`): the lanes a pick chose run on
through plain steps, collectives and control steps without another pick. The schedule must be the one a pick per
step gives: the same steps for the same lanes in the same order, under the min-pc schedule and the delayed ones
(whose picks depend on which lanes may run), on the warp-specialized flash kernel (wgmma chains, shuffles,
mbarrier waits, branches)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import schedule
from tessera.interpreters.ptx.launcher import launch_described
from tessera.reference_attention import attention_operands

from test_ptx_hazards import _attention


def _trace(monkeypatch, straight: bool, **launch_options) -> tuple[list[tuple[int, bytes]], np.ndarray]:
    """(the (pc, lanes) of every step the launch ran, in order; the output) with straight runs on or off."""
    log: list[tuple[int, bytes]] = []
    init = schedule.Scheduler.__init__

    def logged_init(self, machine, steps, *args, **kwargs):
        def logged(step, pc):
            def run(*a):
                sel = a[1] if step.control else a[0]
                lanes = machine.lane_ids if isinstance(sel, slice) else np.asarray(sel)
                log.append((pc, lanes.tobytes()))
                return step.run(*a)
            return schedule.Step(step.inst, run, step.control, step.unit, step.mask, step.member_mask, step.watched)

        init(self, machine, [logged(s, pc) for pc, s in enumerate(steps)], *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(schedule.Scheduler, "__init__", logged_init)
        if not straight:
            patch.setattr(schedule.Scheduler, "_straight", lambda self, *a: None)
        sig, host, text = _attention(True)
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(3), 64, 200, 64))
        launch_described(text, host, arrays, sizes, fuse=False, **launch_options)
    return log, arrays[3]


@pytest.mark.parametrize("options", [{}, {"schedule": "delayed-warp", "seed": 4}])
def test_straight_runs_take_the_steps_a_pick_per_step_takes(monkeypatch, options):
    with_runs, out = _trace(monkeypatch, True, **options)
    without, out_without = _trace(monkeypatch, False, **options)
    assert with_runs == without and len(with_runs) > 100
    assert np.array_equal(out.view(np.uint16), out_without.view(np.uint16))
