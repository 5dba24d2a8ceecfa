"""The CTA simulator's race detector (tessera/interpreters/sm90/happens_before.py): the seeded-bug matrix and its
cost.

    python bench/races_target.py [--keys 300 700] [--schedule round_robin] [--cost-only | --matrix-only]
    python bench/races_target.py --backward
    python bench/races_target.py --tessera
    python bench/races_target.py --unseen

--backward: the seeds of tests/backward_seeds.py (the attention backward, head_dim 128: warp-specialized with red
and with the producer's bulk-reduction dQ (the default), single-stage at 64x64; the default keys-on-rows kernel at
64x128, bulk and red; head_dim 64's 128x128, bulk and red) on one trip and several, each line the outcome (R reported, C clean and right)
and the start of the report, MISMATCH where it differs from the catalogue's expectation (exit status 1).
--tessera: the same for tests/tessera_seeds.py (the split-KV flash kernel, the flash kernel in clusters of two and
the warp-specialized GEMM, each on a short and a long shape). --unseen: tests/unseen_seeds.py (every synchronisation op
of ten more kernels: GEMM layouts and structures, clusters of 2 x 1, FP8, varlen, paged gather, deterministic
backward, bias, TMA-paged decode, each on a one-block and a long shape).

Matrix: every one-edit bug of tests/target_bug_seeds.py (the warp-specialized flash kernel, head_dim 64, its
ping-pong variant, and the warp-specialized GEMM with K the sequence length rounded up to 8) on each length, with the first line of what the simulator reports ("SILENT" if
it runs clean), then the benign edits (which must run clean). Cost: the unseeded kernel (flash d128 whole grid,
seq 512) with races=True and races=False, best CPU time of this process over --repeats, and their ratio
measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import tessera  # noqa: E402
from tessera.interpreters.block_batch import KernelHazardError  # noqa: E402
from tessera.interpreters.launch import prepare_arguments  # noqa: E402
from tessera.interpreters.sm90 import run_target_kernel  # noqa: E402
from tessera.passes import SPECIALIZED_PIPELINE  # noqa: E402

from target_bug_seeds import BENIGN, SEEDS, seeded  # noqa: E402


def matrix(keys: list[int], schedule: str) -> int:
    rng = np.random.default_rng(0)
    missed = 0
    for seq_k in keys:
        attention = [rng.standard_normal((1, 1, s, 64)) for s in (64, seq_k, seq_k)]
        depth = -(-seq_k // 8) * 8  # the GEMM's K: the sequence length rounded up to its promised multiple of 8
        gemm = [rng.standard_normal((128, depth)), rng.standard_normal((depth, 128))]
        reported = 0
        for name, (kind, variant, _) in {**SEEDS, **BENIGN}.items():
            sig, fn = seeded(name)
            arguments, sizes = prepare_arguments(sig, gemm if variant == "gemm" else attention)
            try:
                run_target_kernel(fn, arguments, sizes, schedule=schedule)
                verdict = "SILENT" if name in SEEDS else "clean (benign)"
                missed += name in SEEDS
            except KernelHazardError as error:
                verdict = ("reported: " if name in SEEDS else "WOLF: ") + str(error).splitlines()[0][:150]
                reported += name in SEEDS
                missed += name in BENIGN
            print(f"{seq_k:5d} keys  {kind:30s} {name:42s} {verdict}")
        print(f"{seq_k:5d} keys: {reported} of {len(SEEDS)} bugs reported, {len(BENIGN)} benign edits checked\n")
    return missed


def cost(repeats: int) -> None:
    module = tessera.kernels.flash_attention(head_dim=128, causal=False, dtype="bf16")
    sig = tessera.find_kernel(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = tessera.lower_to_target(module, sig.name, SPECIALIZED_PIPELINE)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 2, 512, 128)) for _ in range(3)]

    def best(**kw) -> float:
        times = []
        for _ in range(repeats):
            arguments, sizes = prepare_arguments(sig, inputs)
            start = time.process_time()
            run_target_kernel(fn, arguments, sizes, **kw)
            times.append(time.process_time() - start)
        return min(times)

    on, off = best(races=True), best(races=False)
    print(f"flash d128, 1x2x512, whole grid: races on {on:7.3f} s   off {off:7.3f} s   ratio {on / off:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[300, 700])
    parser.add_argument("--schedule", default="round_robin")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cost-only", action="store_true")
    parser.add_argument("--matrix-only", action="store_true")
    parser.add_argument("--backward", action="store_true", help="the backward's seeds (tests/backward_seeds.py)")
    parser.add_argument("--tessera", action="store_true", help="split-KV, clusters, GEMM (tests/tessera_seeds.py)")
    parser.add_argument("--unseen", action="store_true", help="ten more kernels (tests/unseen_seeds.py)")
    options = parser.parse_args()
    if options.unseen:
        from unseen_seeds import matrix as unseen_matrix

        sys.exit(1 if unseen_matrix("target") else 0)
    if options.backward:
        from backward_seeds import matrix as backward_matrix

        sys.exit(1 if backward_matrix("target") else 0)
    if options.tessera:
        from tessera_seeds import matrix as tessera_matrix

        sys.exit(1 if tessera_matrix("target") else 0)
    missed = 0
    if not options.cost_only:
        missed = matrix(options.keys, options.schedule)
    if not options.matrix_only:
        cost(options.repeats)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
