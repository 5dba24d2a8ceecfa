"""Every diagnostic on bad MLIR input says where (issue 21): the place in the file (`file:line:col`), or the kernel
and op it concerns. A seeded slice of the mutants of `tests/fuzz/diagnostic_locations.py` (one-line mutations of
the examples and the lit inputs, some run through pipelines to Target IR) runs through tessera-opt; a longer
campaign is `python tests/fuzz/diagnostic_locations.py --cases 2000`."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))

import diagnostic_locations as fuzz  # noqa: E402

CASES = fuzz.cases(40, seed=2027, max_lines=40)


def test_every_diagnostic_on_mutated_inputs_says_where(tmp_path):
    fuzz.warm_up()
    outcomes = Counter()
    bad = []
    for case in CASES:
        outcome, stderr = fuzz.run_case(case, tmp_path, timeout=60)
        outcomes[outcome] += 1
        if outcome in ("unlocated", "internal", "timeout"):
            bad.append(f"{case.name} -p '{case.pipeline}': {outcome}\n{case.text}\n{stderr}")
        elif outcome == "located" and not case.pipeline:
            # tessera-run reads files as tessera-opt does: the same diagnostic for the same bad input
            run_outcome, run_stderr = fuzz.run_case(case, tmp_path, timeout=60, tool="tessera-run")
            outcomes["same in tessera-run"] += run_stderr == stderr.replace("tessera-opt:", "tessera-run:")
            if run_stderr != stderr.replace("tessera-opt:", "tessera-run:"):
                bad.append(f"{case.name}: tessera-run says\n{run_stderr}\ntessera-opt says\n{stderr}")
    assert not bad, "\n\n".join(bad)
    assert outcomes["located"] >= len(CASES) // 2, outcomes  # the mutants are mostly refused: the test tests something
    assert outcomes["same in tessera-run"] >= 5, outcomes


def test_the_classification_needs_a_location_or_a_kernel_and_an_op():
    assert fuzz.classify(1, "k.mlir:3:5: 'tile.dim' op source must be a global tile") == "located"
    assert fuzz.classify(1, "convert-tile-to-sm90: kernel @k: op 'tile.fill': 32 rows") == "located"
    assert fuzz.classify(1, "convert-tile-to-sm90: register tiles have 32 rows; warpgroups take 64 rows each") \
        == "unlocated"
    assert fuzz.classify(1, "100 : i64 should be of base attribute string") == "unlocated"
    assert fuzz.classify(1, "tessera-opt: internal error: KeyError: 'x'") == "internal"
    assert fuzz.classify(None, "") == "timeout"
    assert fuzz.classify(0, "") == "accepted"
