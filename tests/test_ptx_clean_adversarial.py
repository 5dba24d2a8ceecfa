"""No false report: correct PTX of Triton, CUTLASS and FlashAttention-3 (tests/clean_runs.py) runs with races on
under the adversarial schedule (producers as far ahead as the synchronisation allows, the rest in an order drawn
from the seed) and under the delayed one (the seed's CTA run only when no other can), each with three seeds,
clean and right. The default run takes Triton's TMA matmul adversarial (about 2 s) and its layer norm backward,
whose CTAs take locks in turn, with CTA 1 delayed (under 1 s); `-m slow` every sample and every built library
configuration; `python bench/races.py --clean` the same list as a table."""

from __future__ import annotations

import pytest

from clean_runs import external_runs, library_runs

SEEDS = (0, 1, 2)
FAST = ("TMA matmul",)
EXTERNAL = dict(external_runs())
LIBRARY = dict(library_runs())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", FAST)
def test_triton_runs_clean_under_the_adversarial_schedule(name, seed):
    EXTERNAL[name](races=True, schedule="adversarial", seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(set(EXTERNAL) - set(FAST)))
def test_every_triton_sample_runs_clean_under_the_adversarial_schedule(name, seed):
    EXTERNAL[name](races=True, schedule="adversarial", seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(LIBRARY) or [pytest.param("none", marks=pytest.mark.skip(
    "no CUTLASS or FA3 configuration is built here (tests/ptx_library/build.py)"))])
def test_every_built_library_kernel_runs_clean_under_the_adversarial_schedule(name, seed):
    LIBRARY[name](races=True, schedule="adversarial", seed=seed)


@pytest.mark.parametrize("name", ["layer norm backward (locks)"])
def test_triton_runs_clean_with_a_cta_delayed(name):
    EXTERNAL[name](races=True, schedule="delayed", seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(EXTERNAL))
def test_every_triton_sample_runs_clean_with_each_cta_delayed(name, seed):
    EXTERNAL[name](races=True, schedule="delayed", seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(LIBRARY) or [pytest.param("none", marks=pytest.mark.skip(
    "no CUTLASS or FA3 configuration is built here (tests/ptx_library/build.py)"))])
def test_every_built_library_kernel_runs_clean_with_each_cta_delayed(name, seed):
    LIBRARY[name](races=True, schedule="delayed", seed=seed)
