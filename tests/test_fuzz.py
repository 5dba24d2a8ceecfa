"""A bounded, seeded slice of the fuzzing campaign (tests/fuzz/, `python bench/fuzz.py` for the whole one):
mutated examples, lit inputs and PTX kernels, odd sizes and flags, wrong API arguments. Every outcome must be
a clean diagnostic or an acceptance: no traceback, internal error, empty message, diagnostic without a
location, silent acceptance of a wrong input, timeout or miscompile."""

from __future__ import annotations

import pytest

from fuzz.cases import generate
from fuzz.harness import FINDINGS, run_cases

SLICE_SEED, SLICE_CASES = 20261125, 400


def test_the_generator_is_reproducible():
    first, second = generate(7, 30), generate(7, 30)
    assert first == second
    assert {c.kind for c in generate(0, 200)} == {"mlir", "flags", "ptx", "api"}


@pytest.mark.parametrize("kinds", [("mlir",), ("flags", "ptx", "api")], ids=["mlir", "flags-ptx-api"])
def test_a_seeded_slice_finds_nothing(kinds):
    cases = generate(SLICE_SEED, SLICE_CASES // 2, kinds)
    summary = run_cases(cases, workers=1, timeout=40.0)
    findings = summary.findings
    assert not findings, f"{len(findings)} findings ({', '.join(FINDINGS)}):\n" + "\n".join(map(str, findings))
    # The slice exercises both sides: refusals and acceptances.
    counts = summary.counts()
    assert counts["diagnostic"] > 0
