"""Tile IR interpreter throughput, against the NumPy reference of the same attention, in one run.

    python bench/interpret.py [--seq 1024] [--head-dim 128] [--repeats 3]

Prints, for each attention variant and causal/non-causal: the best wall time of the interpreter over the
repeats, the time of the fp64 NumPy reference on the same inputs, and their ratio (absolute times are only
indicative on a shared machine; compare ratios taken in the same run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tessera
from tessera import reference


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    print(f"attention {shape}, best of {args.repeats}")
    print(f"{'variant':<22}{'causal':<8}{'interpreter s':>14}{'numpy ref s':>13}{'ratio':>8}")
    for variant in ("flash_attention", "two_pass_attention", "three_pass_attention"):
        for causal in (False, True):
            module = getattr(tessera.kernels, variant)(head_dim=args.head_dim, causal=causal)
            t_interp = best_time(lambda: tessera.interpret(module, q, k, v), args.repeats)
            t_ref = best_time(lambda: reference.attention(q, k, v, causal), args.repeats)
            print(f"{variant:<22}{str(causal):<8}{t_interp:>14.3f}{t_ref:>13.3f}{t_interp / t_ref:>8.2f}")


if __name__ == "__main__":
    main()
