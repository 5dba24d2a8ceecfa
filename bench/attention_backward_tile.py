"""The attention backward's whole matrix at Tile level: each gradient's error against the float64 gradient
next to the rule's tolerance (tessera.reference.check_attention_backward).

    python bench/attention_backward_tile.py [--seq 1x1 113x203 ...] [--head-dim 64 128] [--deterministic]

Prints one row per configuration (seq_q x seq_k, head_dim, causal, heads_k of 6 query heads, dtype): the
max error and tolerance of dQ, dK and dV, the worst error/tolerance ratio, and the interpreter time; then the
worst ratio over the matrix. Exit status 1 if any gradient breaks the rule. The same matrix is the test
suite's (tests/test_attention_backward.py; its long shapes run with `pytest -m slow`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_attention_backward import NUMPY_DTYPES, _problem, _run  # noqa: E402

from tessera import reference  # noqa: E402

DEFAULT_SEQS = ["1x1", "113x203", "128x217", "256x512", "1023x1024", "1024x1023"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", nargs="+", default=DEFAULT_SEQS, help="seq_q x seq_k pairs, e.g. 113x203")
    parser.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--deterministic", action="store_true", help="the deterministic main kernel")
    args = parser.parse_args()
    worst, failed = 0.0, False
    print(f"{'shape':>10} {'d':>4} {'causal':>6} {'hk':>3} {'dtype':>5}  {'dQ err/tol':>19} {'dK err/tol':>19} "
          f"{'dV err/tol':>19} {'worst':>6} {'time':>6}")
    for pair in args.seq:
        seq_q, seq_k = (int(x) for x in pair.split("x"))
        for d in args.head_dim:
            for causal in (False, True):
                for heads_k in (6, 2):
                    for dtype in ("bf16", "f16"):
                        problem = _problem(seq_q, seq_k, d, causal, heads_k, dtype)
                        start = time.perf_counter()
                        grads = _run(problem, causal, args.deterministic, order_seed=seq_q + d)
                        elapsed = time.perf_counter() - start
                        q, k, v, o, _, do = problem
                        checks = reference.check_attention_backward(grads, q, k, v, o, do, NUMPY_DTYPES[dtype], causal)
                        ratio = max(c.max_error / c.tolerance for c in checks)
                        worst, failed = max(worst, ratio), failed or not all(c.ok for c in checks)
                        cells = " ".join(f"{c.max_error:9.2e}/{c.tolerance:9.2e}" for c in checks)
                        print(f"{pair:>10} {d:>4} {str(causal):>6} {heads_k:>3} {dtype:>5}  {cells} {ratio:6.2f} "
                              f"{elapsed:5.1f}s", flush=True)
    print(f"worst error/tolerance over the matrix: {worst:.2f}" + ("  (RULE BROKEN)" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
