"""The attention rewriter on every positive fixture: `tessera-run FIXTURE -p SPEC --compare` for each
(tests/rewriter/*.mlir and unseen/*.mlir, named `unseen/NAME`; the seq-1000 ones take seconds each, so they run here rather than in the suite).

    .venv/bin/python bench/rewriter.py [--seed N] [--attention-level tile|ptx] [NAME ...]

Prints each fixture's comparison (replaced attentions, largest difference, errors against float64, tolerance)
and exits 1 if any disagrees.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "rewriter"
SPECS = {"composite_s256_d128": "rewrite-attention"}


def main() -> int:
    from tessera.tools import tessera_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", default="0")
    parser.add_argument("--attention-level", default="tile", choices=("tile", "ptx"))
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    names = args.names or sorted(str(p.relative_to(FIXTURES).with_suffix("")) for p in FIXTURES.glob("**/*.mlir")
                                 if not p.stem.startswith("neg_"))
    status = 0
    for name in names:
        spec = SPECS.get(name, "rewrite-attention{match=patterns}")
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = tessera_run.main([str(FIXTURES / f"{name}.mlir"), "-p", spec, "--compare", "--seed", args.seed,
                                     "--attention-level", args.attention_level])
        print(f"{name} ({time.perf_counter() - start:.1f} s, exit {code}):\n{out.getvalue().rstrip()}", flush=True)
        status |= code
    return status


if __name__ == "__main__":
    sys.exit(main())
