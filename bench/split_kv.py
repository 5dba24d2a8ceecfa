"""Split-KV attention on FlashAttention-3's grid, through `tessera.attention(..., level=...)` (the test suite runs
a fast slice, tests/test_attention_split.py):

    python bench/split_kv.py [--levels tile target ptx] [--head-dim 64 128] [--splits 1 3 auto]
                             [--shapes 1x128 1x339 3x799 64x800 16x20000 128x128 256x512] [--heads 6] [--batch 1]

For each (seq_q, seq_k), head_dim, causal or not and split count it runs the forward (and with more than one
part the combine kernel) at each level, and prints one row: level, shape, the split count chosen ("auto" shows
the heuristic's answer), O's error and tolerance (`reference.check_attention`), LSE's error against float64
logsumexp (bound 1e-4), the largest difference from the same call with num_splits=1, and seconds. Exits 1 if
any run is outside its bound. The target and PTX levels take seconds per kernel per shape.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.runtime.attention_plan import resolve_num_splits

SHAPES = ["1x128", "1x339", "3x799", "64x800", "16x20000", "128x128", "256x512"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["tile"], choices=tessera.LEVELS)
    parser.add_argument("--head-dim", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--splits", nargs="+", default=["1", "3", "auto"])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="SEQ_QxSEQ_K")
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    failed = 0
    print(f"{'level':6} {'seq_q':>5} {'seq_k':>6} {'d':>3} {'causal':6} {'splits':>6} {'O err':>9} {'O tol':>9} "
          f"{'LSE err':>9} {'vs 1':>9} {'s':>6}")
    for shape in args.shapes:
        seq_q, seq_k = (int(x) for x in shape.split("x"))
        for d in args.head_dim:
            q, k, v = (rng.standard_normal((args.batch, args.heads, s, d)).astype(BF16) for s in (seq_q, seq_k, seq_k))
            for causal in (False, True):
                for level in args.levels:
                    baseline = None
                    for name in args.splits:
                        splits = name if name == "auto" else int(name)
                        chosen = resolve_num_splits(splits, args.batch, args.heads, seq_q, seq_k, d, causal)
                        start = time.perf_counter()
                        o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, num_splits=splits,
                                                   level=level)
                        seconds = time.perf_counter() - start
                        o_check = reference.check_attention(o, q, k, v, BF16, causal=causal)
                        lse_check = reference.check_lse(lse, q, k, BF16, causal=causal)
                        o64 = o.astype(np.float64)
                        baseline = o64 if baseline is None else baseline
                        versus = float(np.abs(o64 - baseline).max())
                        ok = o_check.ok and lse_check.ok and versus <= o_check.tolerance
                        failed += not ok
                        label = f"{chosen}" + ("*" if name == "auto" else "")
                        print(f"{level:6} {seq_q:5} {seq_k:6} {d:3} {str(causal):6} {label:>6} {o_check.max_error:9.2e} "
                              f"{o_check.tolerance:9.2e} {lse_check.max_error:9.2e} {versus:9.2e} {seconds:6.1f}"
                              + ("" if ok else "  MISMATCH"), flush=True)
    print(f"{failed} run(s) outside their bounds" if failed else "every run within its bounds (* = chosen by auto)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
