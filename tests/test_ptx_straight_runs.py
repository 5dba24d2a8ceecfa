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


def _trace(monkeypatch, straight: bool, branches: bool = False, **launch_options) -> tuple[list[tuple[int, bytes]],
                                                                                         np.ndarray, set, int]:
    """(the (pc, lanes) of every step the launch ran, in order, a `bra` as (-1 - pc, lanes); the output; what the
    straight runs started after: "control" and "preferred" where one started after a control step, or while a release
    preferred lanes; the steps counted) with straight runs on or off, and with `bra` steps that straight runs may move
    past without running them (`Step.branch`) or not."""
    log: list[tuple[int, bytes]] = []
    started: set[str] = set()
    schedulers = []
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
                log.append((pc if step.branch is None else -1 - pc, lanes.tobytes()))
                return step.run(*a)
            return schedule.Step(step.inst, run, step.control, step.unit, step.mask, step.member_mask, step.watched,
                                 step.branch if branches else None)

        init(self, machine, [logged(s, pc) for pc, s in enumerate(steps)], *args, **kwargs)
        schedulers.append(self)

    with monkeypatch.context() as patch:
        patch.setattr(schedule.Scheduler, "__init__", logged_init)
        patch.setattr(schedule.Scheduler, "_straight", noted if straight else lambda self, *a: None)
        sig, host, text = _attention(True)
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(3), 64, 400, 64))
        launch_described(text, host, arrays, sizes, fuse=False, **launch_options)
    return log, arrays[3], started, sum(s.executed for s in schedulers)


@pytest.mark.parametrize("options", [{}, {"schedule": "delayed-warp", "seed": 4}, {"schedule": "delayed", "seed": 1},
                                     {"schedule": "delayed-warpgroup", "seed": 0}])
def test_straight_runs_take_the_steps_a_pick_per_step_takes(monkeypatch, options):
    with_runs, out, started, executed = _trace(monkeypatch, True, **options)
    without, out_without, _, executed_without = _trace(monkeypatch, False, **options)
    assert with_runs == without and len(with_runs) > 100
    assert started == {"control", "preferred"}
    assert executed == executed_without
    assert np.array_equal(out.view(np.uint16), out_without.view(np.uint16))


@pytest.mark.parametrize("options", [{}, {"schedule": "delayed-warp", "seed": 4}, {"schedule": "delayed", "seed": 1}])
def test_branches_a_straight_run_moves_past_leave_the_other_steps_as_run(monkeypatch, options):
    """A `bra` every lane of a straight run takes, or none does, is not run (`Step.branch`): every other step runs for
    the same lanes in the same order as where each `bra` runs, and the step count and the output are the same; the
    divergent branches (a tile's masked columns, the loop's exit for some warps) still run."""
    moved, out, _, executed = _trace(monkeypatch, True, branches=True, **options)
    run, out_run, _, executed_run = _trace(monkeypatch, True, **options)
    bras = lambda log: [(pc, lanes) for pc, lanes in log if pc < 0]  # noqa: E731
    others = lambda log: [(pc, lanes) for pc, lanes in log if pc >= 0]  # noqa: E731
    assert executed == executed_run
    assert np.array_equal(out.view(np.uint16), out_run.view(np.uint16))
    assert others(moved) == others(run) and len(others(run)) > 100
    assert 0 < len(bras(moved)) < len(bras(run))
