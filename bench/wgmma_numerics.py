"""What the executor's "hopper" wgmma numerics cost (docs/ptx-executor.md, "Fidelity on hardware"): fidelity
cases of bench/gpu_fidelity.py run in the PTX executor with the exact default and with the Hopper block-FMA
model, alternating, the best wall time of each over the rounds and their ratio, all from this one run.

    python bench/wgmma_numerics.py                      # gemm-odd-mn, forward-d128, forward-d256; 3 rounds
    python bench/wgmma_numerics.py --cases gemm-odd-k --rounds 5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_fidelity  # noqa: E402 - bench/ is not a package


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["gemm-odd-mn", "forward-d128", "forward-d256"],
                        choices=[c.name for c in gpu_fidelity.cases()])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from tessera.interpreters.ptx.tensor_core_numerics import NUMERICS, wgmma_numerics

    for name in args.cases:
        case = gpu_fidelity.case_named(name)
        arrays = gpu_fidelity.inputs(case)
        gpu_fidelity.run(case, arrays, "ptx")  # compiled and warm
        best = dict.fromkeys(NUMERICS, float("inf"))
        for _ in range(args.rounds):
            for numerics in NUMERICS:
                start = time.perf_counter()
                with wgmma_numerics(numerics):
                    gpu_fidelity.run(case, arrays, "ptx")
                best[numerics] = min(best[numerics], time.perf_counter() - start)
        print(f"{name}: exact {best['exact']:.2f} s, hopper {best['hopper']:.2f} s, "
              f"ratio {best['hopper'] / best['exact']:.2f}", flush=True)


if __name__ == "__main__":
    main()
