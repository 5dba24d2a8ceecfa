"""Both race detectors on three more of Tessera's kernels (issue 31): one-edit bugs seeded into the split-KV flash
kernel, the flash kernel in clusters of two (multicast TMA, remote releases, cluster barriers) and the
warp-specialized GEMM (tests/tessera_seeds.py), the same edit in Target IR (CTA simulator) and in PTX (PTX
executor). Each seed has its expected outcome per level and shape; every clean one says why. One seed of each
kind runs here on the short shape; the whole matrix is `-m slow` (and `python bench/races_target.py --tessera`,
`python bench/races.py --tessera`).
"""

from __future__ import annotations

import re

import pytest

from race_templates import check_expectations, matches
from tessera_seeds import ALL, CATALOGUE, CELLS, one_per_kind, right, run, verdict


def _both_sides(level: str, text: str) -> bool:
    """The report names the other side (an op or line, a thread, a count, a peer) besides this side's thread."""
    if "deadlock" in text:
        return "wait" in text
    if level == "ptx":
        return re.search(r"line \d+|thread count is \d+|first wgmma|CTA exits|thread \(\d+, 0, 0\) of CTA|"
                         r"without a barrier.cluster.arrive|cluster", text) is not None
    return re.search(r"`[^`]+`|which thread \d+|which its thread \d+ read|expects \d+|first wgmma|kernel ends|"
                     r"fence_mbarrier_init|exceeds|"
                     r"mbarrier at shared address|without having arrived", text) is not None


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("kernel,index", one_per_kind(), ids=lambda x: x if isinstance(x, str) else None)
def test_one_seed_of_each_kind_is_reported_at_both_levels(kernel, index, level):
    kind, name, edit, expected, _ = CATALOGUE[kernel][index]
    got, text = verdict(level, kernel, edit, "short")
    assert got == "R", f"{kernel}: {kind}: {name}: {text}"
    assert _both_sides(level, text), text


def test_every_seed_has_an_expectation_and_every_clean_one_a_reason():
    check_expectations(CATALOGUE, "RCG", ALL, kinds=17)


@pytest.mark.slow
@pytest.mark.parametrize("level,shape", CELLS)
@pytest.mark.parametrize("kernel,index", [(k, i) for k, seeds in CATALOGUE.items() for i in range(len(seeds))],
                         ids=[f"{k}: {s[0]}: {s[1]}" for k, seeds in CATALOGUE.items() for s in seeds])
def test_every_seed_gives_its_expected_outcome(kernel, index, level, shape):
    """R: reported naming both sides; C: clean and bitwise the unseeded kernel's outputs; G: a known gap, clean and
    right."""
    kind, name, edit, expected, reason = CATALOGUE[kernel][index]
    got, text = verdict(level, kernel, edit, shape)
    assert matches(got, expected[CELLS.index((level, shape))]), f"{kind}: {name} [{shape}]: {text} ({reason})"
    if got == "R":
        assert _both_sides(level, text), text


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("shape", ["short", "long"])
@pytest.mark.parametrize("kernel", CATALOGUE)
def test_the_unseeded_kernels_run_clean_and_right_under_the_adversarial_schedule(kernel, shape, level):
    assert right(kernel, run(level, kernel, shape, schedule="adversarial", seed=3))
