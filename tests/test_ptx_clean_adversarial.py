"""No false report: correct PTX of Triton, CUTLASS and FlashAttention-3 (tests/clean_runs.py) runs with races on
under the adversarial schedule (producers as far ahead as the synchronisation allows, the rest in an order drawn
from the seed), under the delayed one (the seed's CTA run only when no other can) and with one warp or warpgroup of
every CTA delayed (the seed's), each with three seeds, clean and right. The default run takes Triton's TMA matmul
adversarial (about 2 s), its layer norm backward, whose CTAs take locks in turn, with CTA 1 delayed (under 1 s), and
the TMA matmul with warp 1 delayed (under 1 s); `-m slow` every sample and every built library
configuration; `python bench/races.py --clean` the same list as a table."""

from __future__ import annotations

import pytest

from clean_runs import external_runs, library_runs

SEEDS = (0, 1, 2)
SCHEDULES = ("adversarial", "delayed", "delayed-warp", "delayed-warpgroup")
FAST = [("TMA matmul", "adversarial", seed) for seed in SEEDS] + [("layer norm backward (locks)", "delayed", 1),
                                                                  ("TMA matmul", "delayed-warp", 1)]
EXTERNAL = dict(external_runs())
LIBRARY = dict(library_runs())


@pytest.mark.parametrize("name,schedule,seed", FAST)
def test_triton_runs_clean_under_the_adversarial_and_delayed_schedules(name, schedule, seed):
    EXTERNAL[name](races=True, schedule=schedule, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("name,schedule,seed", [(name, schedule, seed) for name in sorted(EXTERNAL)
                                                for schedule in SCHEDULES for seed in SEEDS
                                                if (name, schedule, seed) not in FAST])
def test_every_triton_sample_runs_clean_under_each_schedule(name, schedule, seed):
    EXTERNAL[name](races=True, schedule=schedule, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", sorted(LIBRARY) or [pytest.param("none", marks=pytest.mark.skip(
    "no CUTLASS or FA3 configuration is built here (tests/ptx_library/build.py)"))])
def test_every_built_library_kernel_runs_clean_under_each_schedule(name, schedule, seed):
    LIBRARY[name](races=True, schedule=schedule, seed=seed)
