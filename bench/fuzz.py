"""The fuzzing campaign: seeded mutations of the examples, lit inputs and PTX test kernels, odd sizes and
flags, and wrong API arguments, each run by the tool a user would call and classified (tests/fuzz/).

    python bench/fuzz.py [--cases 2500] [--seed 0] [--workers 2] [--timeout 30] [--kinds mlir flags ptx api]
                         [--show 20] [--show-ptxas]

Prints a table of outcomes per kind (diagnostic, accepted, warned, and the findings: traceback, internal
error, empty message, no location, silent acceptance, timeout, miscompile), the count of PTX mutants the
executor accepted that ptxas refuses, and the first --show findings with their cases (rerun one with
--only INDEX). Exits 1 when there is a finding. The test suite runs a bounded slice (tests/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz.cases import KINDS, generate  # noqa: E402
from fuzz.harness import run_cases  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--show", type=int, default=20, help="findings to print")
    parser.add_argument("--only", type=int, nargs="+", help="run only these case indices")
    parser.add_argument("--verbose", action="store_true", help="print every outcome as it comes")
    parser.add_argument("--show-ptxas", action="store_true",
                        help="list the PTX mutants the executor accepted and ptxas refuses")
    args = parser.parse_args()
    cases = generate(args.seed, args.cases, tuple(args.kinds))
    if args.only:
        cases = [c for c in cases if c.index in set(args.only)]
    start = time.perf_counter()
    summary = run_cases(cases, workers=args.workers, timeout=args.timeout,
                        progress=(lambda o: print(o, flush=True)) if args.verbose else None)
    elapsed = time.perf_counter() - start
    print(f"{len(cases)} cases, seed {args.seed}, {args.workers} workers, {elapsed:.0f} s")
    print(summary.table())
    for outcome in summary.findings[:args.show]:
        print(outcome)
    if args.show_ptxas:
        for outcome in summary.outcomes:
            if outcome.ptxas_refuses:
                print(f"accepted, ptxas refuses: {outcome.case.label()} (rerun with --only {outcome.case.index})")
    return 1 if summary.findings else 0


if __name__ == "__main__":
    sys.exit(main())
