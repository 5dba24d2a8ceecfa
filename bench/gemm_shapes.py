"""The full GEMM shape x layout matrix at every level, against NumPy (the test suite runs a slice of it,
tests/test_gemm_shapes.py):

    python bench/gemm_shapes.py [--levels tile target ptx] [--sizes 1 7 63 65 129 300] [--all-triples]
                                [--dtype bf16|f16] [--epilogue]

For each layout (NN, NT, TN, TT) and each (M, N, K) — by default the triples in which every size takes every
position once, with --all-triples every combination — it runs the any-shape kernel (`gemm(aligned=False)`;
with 16-byte rows also the TMA kernel) at each level: the Tile interpreter, the CTA simulator and the PTX
executor (both through the single-stage pipeline, the TMA kernel also through the full one at target level),
and prints one row per run: level, layout, sizes, how A and B are copied, error, tolerance, seconds. Exits 1
if any run is outside the tolerance. --epilogue adds alpha, beta with C, a bias and a batch of 2.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

import tessera
from tessera import find_kernel, reference, reference_gemm
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described
from tessera.kernels import gemm
from tessera.numerics import dtype_from_name
from tessera.passes import PTX_PIPELINE, SPECIALIZED_PIPELINE, TARGET_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}
EPILOGUE = dict(alpha=-1.5, beta=0.5, bias=True, batch=True)


def inputs_for(rng, m, n, k, ta, tb, epilogue):
    factors = dict(alpha=EPILOGUE["alpha"], beta=EPILOGUE["beta"]) if epilogue else {}
    return reference_gemm.gemm_operands(rng, m, n, k, transpose_a=ta, transpose_b=tb, batch=2 if epilogue else None,
                                   **factors)


def run_level(module, level: str, pipeline: str, inputs):
    if level == "tile":
        return tessera.interpret(module, *inputs)
    if level == "target":
        return tessera.interpret(module, *inputs, level="target", pipeline=pipeline)
    lowered = module.clone()
    apply_pipeline(lowered, pipeline + ",allocate-registers")
    arrays, sizes = prepare_arguments(find_kernel(module), inputs)
    launch_described(print_ptx(lowered, registers=allocated_registers), describe(lowered)[0], arrays, sizes)
    return arrays[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", nargs="+", default=["tile", "target", "ptx"], choices=["tile", "target", "ptx"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 7, 63, 65, 129, 300])
    parser.add_argument("--all-triples", action="store_true")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    parser.add_argument("--epilogue", action="store_true")
    args = parser.parse_args(argv)
    sizes = args.sizes
    triples = (list(itertools.product(sizes, repeat=3)) if args.all_triples else
               [tuple(sizes[(i + j) % len(sizes)] for j in range(3)) for i in range(len(sizes))])
    rng = np.random.default_rng(0)
    failures = 0
    print(f"{'level':7} {'layout':6} {'M':>4} {'N':>4} {'K':>4} {'copies':10} {'pipeline':9} {'error':>10} {'tolerance':>10} {'s':>6}")
    for layout, (ta, tb) in LAYOUTS.items():
        extra = EPILOGUE if args.epilogue else {}
        kernels = {aligned: gemm(args.dtype, transpose_a=ta, transpose_b=tb, aligned=aligned, **extra)
                   for aligned in (True, False)}
        for m, n, k in triples:
            inputs, options = inputs_for(rng, m, n, k, ta, tb, args.epilogue)
            rows_ok = all(x.shape[-1] % 8 == 0 for x in inputs[:2])
            for level in args.levels:
                runs = [(False, "single", TARGET_PIPELINE)]
                if rows_ok and level != "tile":
                    runs += [(True, "single", TARGET_PIPELINE)] + ([(True, "full", SPECIALIZED_PIPELINE)] if level == "target" else [])
                for aligned, label, pipeline in runs:
                    start = time.perf_counter()
                    out = run_level(kernels[aligned], level, pipeline, inputs)
                    seconds = time.perf_counter() - start
                    c = reference.check_gemm(out, inputs[0], inputs[1], dtype_from_name(args.dtype), **options)
                    failures += not c.ok
                    copies = "-" if level == "tile" else ("tma" if aligned else "ld.global")
                    print(f"{level:7} {layout:6} {m:4} {n:4} {k:4} {copies:10} {label:9} {c.max_error:10.3e} "
                          f"{c.tolerance:10.3e} {seconds:6.2f}{'' if c.ok else '  FAIL'}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
