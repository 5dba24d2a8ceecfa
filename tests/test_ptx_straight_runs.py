"""Straight runs of the PTX executor's scheduler (`schedule.Scheduler._straight`): the lanes a pick chose run on
through plain steps, collectives and control steps without another pick, from a pick of a control step too
(`_run_on`), and while a release prefers the lanes it woke (the producer's refill). The schedule must be the one a
pick per step gives: the same steps for the same lanes in the same order, under the min-pc schedule and the delayed
ones (whose picks depend on which lanes may run), on the warp-specialized flash kernel (wgmma chains, shuffles,
mbarrier waits, branches; 400 keys: more tiles than its stages, so the producer waits for a slot and the release
that empties it prefers the producer)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import schedule
from tessera.interpreters.ptx.launcher import launch_described
from tessera.reference_attention import attention_operands

from test_ptx_hazards import _attention


def _trace(monkeypatch, straight: bool, **launch_options) -> tuple[list[tuple[int, bytes]], np.ndarray, set]:
    """(the (pc, lanes) of every step the launch ran, in order; the output; what the straight runs started after:
    "control" and "preferred" where one started after a control step, or while a release preferred lanes) with
    straight runs on or off."""
    log: list[tuple[int, bytes]] = []
    started: set[str] = set()
    init = schedule.Scheduler.__init__
    straight_run = schedule.Scheduler._straight

    def noted(self, pc, lanes, candidates, limit, woken, picked, whole=0):
        if self.steps[picked].control:
            started.add("control")
        if self.m.preferred is not None:
            started.add("preferred")
        return straight_run(self, pc, lanes, candidates, limit, woken, picked, whole)

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
        patch.setattr(schedule.Scheduler, "_straight", noted if straight else lambda self, *a: None)
        sig, host, text = _attention(True)
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(3), 64, 400, 64))
        launch_described(text, host, arrays, sizes, fuse=False, **launch_options)
    return log, arrays[3], started


@pytest.mark.parametrize("options", [{}, {"schedule": "delayed-warp", "seed": 4}, {"schedule": "delayed", "seed": 1},
                                     {"schedule": "delayed-warpgroup", "seed": 0}])
def test_straight_runs_take_the_steps_a_pick_per_step_takes(monkeypatch, options):
    with_runs, out, started = _trace(monkeypatch, True, **options)
    without, out_without, _ = _trace(monkeypatch, False, **options)
    assert with_runs == without and len(with_runs) > 100
    assert started == {"control", "preferred"}
    assert np.array_equal(out.view(np.uint16), out_without.view(np.uint16))
