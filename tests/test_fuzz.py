"""A bounded, seeded slice of the fuzzing campaign (tests/fuzz/, `python bench/fuzz.py` for the whole one):
mutated examples, lit inputs and PTX kernels, odd sizes and flags, wrong API arguments. Every outcome must be
a clean diagnostic or an acceptance: no traceback, internal error, empty message, diagnostic without a
location, silent acceptance of a wrong input, timeout or miscompile."""

from __future__ import annotations

import re

import pytest

from fuzz.cases import ROOT, Case, generate
from fuzz.harness import FINDINGS, run_case, run_cases
from text_edits import checked

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
    # The slice exercises both sides: refusals and acceptances (a regression that refuses everything is caught
    # by the tests below, which say which inputs must be accepted and which refused).
    counts = summary.counts()
    assert counts["diagnostic"] > 0 and counts["accepted"] > 0, counts
    refused = [o for o in summary.outcomes if o.case.must_refuse and o.outcome not in ("diagnostic", "warned")]
    assert not refused, "\n".join(map(str, refused))


GEMM = (ROOT / "examples" / "gemm.mlir").read_text()
GEMM_SIZES = ("--dim=M=7", "--dim=N=8", "--dim=K=8")
VALID_MUTANTS = {
    "a comment line": checked(GEMM).replace("builtin.module {", "builtin.module {\n  // a note\n", 1),
    "an SSA value renamed everywhere": re.sub(r"%acc_final\b", "%c_tile", GEMM),
    "an unused constant": checked(GEMM).replace("%c1 = arith.constant 1 : index", "%c1 = arith.constant 1 : index\n"
                                                "    %unused = arith.constant 7 : index", 1),
    "constants reordered": checked(GEMM).replace(
        "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index",
        "    %c1 = arith.constant 1 : index\n    %c0 = arith.constant 0 : index", 1),
}


@pytest.mark.parametrize("name", list(VALID_MUTANTS))
def test_valid_mutants_are_accepted(name, tmp_path):
    """Mutants that keep the kernel valid and its meaning: each tool accepts them and the result checks."""
    text = VALID_MUTANTS[name]
    assert text != GEMM
    for tool, argv in (("tessera-run", ("{input}", *GEMM_SIZES, "--check")),
                       ("tessera-opt", ("{input}", "-p", "assign-swizzle,convert-tile-to-sm90,canonicalize,cse"))):
        outcome = run_case(Case(0, "mlir", tool, argv, text), str(tmp_path))
        assert outcome.outcome == "accepted", str(outcome)


INVALID_MUTANTS = {
    "mma operands swapped": (checked(GEMM).replace("tile.mma %a_smem, %b_smem, %acc",
                                                   "tile.mma %b_smem, %a_smem, %acc"),
                             r"case0.mlir:\d+:\d+.*operand is used with type"),
    "the loop's yield dropped": (re.sub(r"\n\s*scf.yield[^\n]*", "", GEMM),
                                 r"op 'tile.barrier'.*terminates block .* not a terminator"),
    "a grid of an unknown size": (checked(GEMM).replace("ceildiv(M, 128), ceildiv(N, 128)",
                                                        "ceildiv(Q, 128), ceildiv(N, 128)"),
                                  r"kernel @gemm_bf16: 'tile.grid' uses sizes no input defines: \['Q'\]"),
    "an undefined value": (checked(GEMM).replace("%k0 = arith.muli %j, %c64", "%k0 = arith.muli %jj, %c64"),
                           r"use of undefined value %jj"),
    "a zero size": (GEMM, r"size 'M' must be positive"),
}


@pytest.mark.parametrize("name", list(INVALID_MUTANTS))
def test_specific_invalid_mutants_are_refused(name, tmp_path):
    """Inputs wrong by construction are refused, each with its own diagnostic (not just any refusal)."""
    text, message = INVALID_MUTANTS[name]
    sizes = ("--dim=M=0", "--dim=N=8", "--dim=K=8") if name == "a zero size" else GEMM_SIZES
    outcome = run_case(Case(0, "mlir", "tessera-run", ("{input}", *sizes, "--check"), text, must_refuse=True),
                       str(tmp_path))
    assert outcome.outcome == "diagnostic", str(outcome)
    assert re.search(message, outcome.message, re.S), outcome.message
