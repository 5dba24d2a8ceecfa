"""The cost of the PTX executor's race detector (tessera/interpreters/ptx/happens_before.py).

    python bench/races.py [--repeats 3]

    python bench/races.py --matrix [--shapes 300,700]

    python bench/races.py --backward | --tessera | --unseen | --triton | --library | --fa3-backward

    python bench/races.py --clean [--seeds 0 1 2]

--clean: the other direction: every correct kernel of tests/clean_runs.py (Triton's PTX samples, and the CUTLASS
and FA3 configurations tests/ptx_library/build.py built here) with races on, under the default schedule, the
adversarial one with each seed, the delayed one with each seed's CTA delayed, and delayed-warp and delayed-warpgroup
with each seed's warp or warpgroup of every CTA delayed: one line per run, "clean" or the report (exit status 1 on any
report or wrong answer; tests/test_ptx_clean_adversarial.py runs a slice, and all with -m slow).

--backward: the seeds of tests/backward_seeds.py in the PTX of the attention backward (head_dim 128: warp-specialized
with red and with the producer's bulk-reduction dQ (the default), single-stage at 64x64; the default keys-on-rows kernel
at 64x128, bulk and red; head_dim 64's 128x128, bulk and red) on one trip and several: the outcome (R reported, C clean and right) against the
catalogue's expectation (exit status 1 on a mismatch). --tessera: the same for tests/tessera_seeds.py (split-KV,
clusters of two, the GEMM). --unseen: tests/unseen_seeds.py (every synchronisation op of GEMMs of three layouts,
single-stage and with generic stores, in clusters of 2 x 1, the FP8 forward, varlen, the paged gather, the
deterministic backward). --triton: tests/triton_seeds.py (every synchronisation instruction of Triton's TMA matmul
and flash attention PTX, on each shape). --library: the kinds of tests/library_seeds.py in the PTX of CUTLASS and FA3 that
tests/ptx_library/build.py built here (the unseeded kernel first: it must run clean), then the seven variant
configurations' seeds of tests/library_variant_seeds.py against their expected outcomes (exit status 1 on a
mismatch). --fa3-backward: its
FA3_BACKWARD_BUGS in FA3's Hopper backward (hdim 128), unseeded first (clean and right against NumPy).

With --matrix: the one-edit bugs of tests/race_seeds.py (33 of 17 kinds in the warp-specialized flash
kernel, on each shape of keys, and the edits the memory model accepts there), then the generic kinds seeded
into the kernels of tests/race_kernels.py (Tessera's GEMM and clustered flash, Triton's PTX): one line per
edit with the verdict (hazard, deadlock, silent with the right or a WRONG answer) and the start of the report,
and the counts at the end.

Without it: runs kernels with generic shared-memory traffic (tests/ptx_kernels: the cp.async row pipeline, the softmax
row, the transpose, the ldmatrix reduction) and one CTA of Tessera's any-shape GEMM (st.shared, proxy fence,
wgmma) through `tessera.ptx.launch` with `races=True` and `races=False`, and prints the best CPU time (of this
process: steadier than wall time on a shared machine) of each and the ratio. Run it under an older checkout too (where `launch` has no `races`) to compare with the
executor before happens-before: the script then times one configuration.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

import numpy as np

from tessera.interpreters.ptx import launch

KERNELS = Path(__file__).resolve().parent.parent / "tests" / "ptx_kernels"


def _cases():
    rng = np.random.default_rng(0)
    rows, cols, ld = 16, 4000, 4004
    x = rng.standard_normal((rows, ld)).astype(np.float32)
    yield "cp_async_pipeline", lambda **kw: launch(
        (KERNELS / "cp_async_pipeline.ptx").read_text(), "row_scale_sum", (rows, 1, 1), (64, 1, 1),
        [x, np.zeros((rows, ld), np.float32), np.zeros(rows, np.float32), cols, ld, np.float32(0.75)], **kw)
    t = rng.standard_normal((256, 192)).astype(np.float32)
    yield "transpose_2d", lambda **kw: launch((KERNELS / "transpose_2d.ptx").read_text(), "transpose_2d", (6, 8, 1),
                                              (32, 8, 1), [np.zeros((192, 256), np.float32), t, 256, 192], **kw)


def _best(run, repeats: int, **kw) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run(**kw)
        times.append(time.process_time() - start)
    return min(times)


def _verdict(run) -> str:
    from tessera.interpreters.ptx import PtxDeadlockError, PtxExecutionError, PtxHazardError

    try:
        return "silent, right" if run() else "silent, WRONG"
    except PtxDeadlockError as error:
        return "deadlock: " + str(error).split("\n")[1].strip()
    except PtxHazardError as error:
        return "hazard: " + str(error).split("error: ", 1)[1]
    except PtxExecutionError as error:
        return "error: " + str(error)


def matrix(shapes: list[int]) -> None:
    sys.path.insert(0, str(KERNELS.parent))
    from race_kernels import KERNELS as OTHERS
    from race_seeds import FLASH_BENIGN, FLASH_BUGS, GENERIC_BUGS, seed
    from test_ptx_hazards import _attention, _run
    from tessera.reference_attention import attention_operands

    from tessera import reference

    compiled = _attention(True)

    def flash(edit, seq_k):
        def run():
            arrays = _run(compiled, seed(compiled[2], edit),
                          attention_operands(np.random.default_rng(seq_k), 64, seq_k, 64))
            return reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False).ok
        return run

    counts: dict[str, int] = {}
    for title, bugs in (("bugs", FLASH_BUGS), ("edits the memory model accepts", FLASH_BENIGN)):
        print(f"warp-specialized flash attention d64, {title}:")
        for kind, name, edit in bugs:
            for seq_k in shapes:
                verdict = _verdict(flash(edit, seq_k))
                key = f"flash {title}: {verdict.split(':')[0].split(',')[0]}"
                counts[key] = counts.get(key, 0) + 1
                print(f"  {kind}: {name[:60]} [{seq_k} keys]\n      {verdict[:200]}")
    for kernel, make in OTHERS.items():
        text, run_text = make()
        print(f"{kernel}: unseeded {_verdict(lambda: run_text(text))}")
        for kind, name, edit in GENERIC_BUGS:
            try:
                seeded = seed(text, edit)
            except LookupError:
                continue
            verdict = _verdict(lambda: run_text(seeded))
            key = f"other kernels: {verdict.split(':')[0].split(',')[0]}"
            counts[key] = counts.get(key, 0) + 1
            print(f"  {kind}: {name}\n      {verdict[:200]}")
    print("counts:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def library() -> None:
    sys.path.insert(0, str(KERNELS.parent))
    from library_seeds import LIBRARY, LIBRARY_BUGS, available, run, seed, sizes_of
    from ptx_library.library import BUILD

    counts: dict[str, int] = {}
    for name in LIBRARY:
        if name not in available():
            print(f"{name}: not built (tests/ptx_library/build.py)")
            continue
        text = (BUILD / name / "kernel.ptx").read_text()
        for sizes in sizes_of(name):
            print(f"{name} {sizes}: unseeded {_verdict(lambda: run(name, text, sizes))}")
        for kind, bug, edit in LIBRARY_BUGS:
            try:
                seeded = seed(text, edit)
            except LookupError:
                print(f"  {kind}: {bug}: no such instruction")
                continue
            for sizes in sizes_of(name):
                verdict = _verdict(lambda: run(name, seeded, sizes))
                key = verdict.split(":")[0].split(",")[0]
                counts[key] = counts.get(key, 0) + 1
                print(f"  {kind}: {bug} {sizes}\n      {verdict[:220]}")
    print("counts:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def library_variants() -> int:
    """The seven variant configurations seeded (tests/library_variant_seeds.py: the 17 kinds, and the stream-K /
    split-K fixup's own), each cell against its expectation; returns how many differ."""
    sys.path.insert(0, str(KERNELS.parent))
    from library_variant_seeds import VARIANTS, available, matrix

    for label in VARIANTS:
        if label not in available():
            print(f"{label}: not built (tests/ptx_library/build.py)")
    return matrix()


def fa3_backward() -> int:
    """FA3's backward seeded (tests/library_seeds.py FA3_BACKWARD_BUGS) in each built configuration: one line per
    seed and size, with its expected outcome; returns how many differ from it."""
    sys.path.insert(0, str(KERNELS.parent))
    from library_seeds import FA3_BACKWARD_BUGS, FA3_BACKWARDS, run_backward, seed
    from ptx_library.library import BUILD, built

    missed = 0
    for name, shapes in FA3_BACKWARDS.items():
        if not built(name):
            print(f"{name}: not built (tests/ptx_library/build.py)")
            continue
        text = (BUILD / name / "kernel.ptx").read_text()
        for sizes in shapes:
            print(f"{name} {sizes}: unseeded {_verdict(lambda: run_backward(None, sizes, name)[0])}")
        for kind, bug, edit, expected, _ in FA3_BACKWARD_BUGS:
            seeded = seed(text, edit)
            for sizes, want in zip(shapes, expected):
                verdict = _verdict(lambda: run_backward(seeded, sizes, name)[0])
                got = "C" if verdict == "silent, right" else "WRONG" if verdict == "silent, WRONG" else "R"
                ok = got == want or (want == "G" and got == "C")
                missed += not ok
                note = ("" if ok else f"  MISMATCH (expected {want})") + ("  (a known gap)" if want == "G" else "")
                print(f"  {got} {kind}: {bug} {sizes}{note}\n      {verdict[:220]}")
    return missed


def clean(seeds: list[int]) -> int:
    """Run every kernel of tests/clean_runs.py with races on, min-pc, then adversarial, delayed (the seed's CTA run
    only when no other can), delayed-warp and delayed-warpgroup (the seed's warp or warpgroup of every CTA run only
    when no other of its CTA can) with each seed; the number of runs that reported or went wrong."""
    sys.path.insert(0, str(KERNELS.parent))
    from clean_runs import external_runs, library_runs

    failed = 0
    kinds = ("adversarial", "delayed", "delayed-warp", "delayed-warpgroup")
    schedules = [{"schedule": "min-pc"}] + [{"schedule": kind, "seed": seed} for kind in kinds for seed in seeds]
    for name, run in [*external_runs(), *library_runs()]:
        for options in schedules:
            start = time.process_time()
            try:
                run(races=True, **options)
                verdict = "clean"
            except Exception as error:  # a report, a deadlock or a wrong answer: each is a false report here
                failed += 1
                verdict = f"FAILED {type(error).__name__}: {' '.join(str(error).split())[:200]}"
            label = options["schedule"] + (f" seed {options['seed']}" if "seed" in options else "")
            print(f"  {name:28s} {label:18s} {time.process_time() - start:6.1f} s  {verdict}", flush=True)
    print(f"{failed} false reports")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matrix", action="store_true", help="the seeded-bug matrix instead of the cost")
    parser.add_argument("--shapes", default="300,700", help="with --matrix: the key counts of the flash kernel")
    parser.add_argument("--backward", action="store_true", help="the backward's seeds (tests/backward_seeds.py)")
    parser.add_argument("--library", action="store_true", help="CUTLASS's and FA3's PTX seeded")
    parser.add_argument("--tessera", action="store_true", help="split-KV, clusters, GEMM (tests/tessera_seeds.py)")
    parser.add_argument("--fa3-backward", action="store_true", help="FA3's backward PTX seeded")
    parser.add_argument("--unseen", action="store_true", help="ten more kernels (tests/unseen_seeds.py)")
    parser.add_argument("--triton", action="store_true", help="Triton's PTX at every op (tests/triton_seeds.py)")
    parser.add_argument("--clean", action="store_true", help="correct library PTX: no report on any schedule")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="with --clean: adversarial seeds")
    options = parser.parse_args()
    if options.clean:
        sys.exit(1 if clean(options.seeds) else 0)
    if options.unseen or options.triton:
        sys.path.insert(0, str(KERNELS.parent))
        if options.unseen:
            from unseen_seeds import matrix as unseen_matrix

            sys.exit(1 if unseen_matrix("ptx") else 0)
        from triton_seeds import matrix as triton_matrix

        sys.exit(1 if triton_matrix() else 0)
    if options.tessera:
        sys.path.insert(0, str(KERNELS.parent))
        from tessera_seeds import matrix as tessera_matrix

        sys.exit(1 if tessera_matrix("ptx") else 0)
    if options.fa3_backward:
        sys.exit(1 if fa3_backward() else 0)
    if options.backward:
        sys.path.insert(0, str(KERNELS.parent))
        from backward_seeds import matrix as backward_matrix

        sys.exit(1 if backward_matrix("ptx") else 0)
    if options.library:
        library()
        sys.exit(1 if library_variants() else 0)
    if options.matrix:
        matrix([int(s) for s in options.shapes.split(",")])
        return
    has_flag = "races" in inspect.signature(launch).parameters
    for name, run in _cases():
        if has_flag:
            on, off = _best(run, options.repeats, races=True), _best(run, options.repeats, races=False)
            print(f"{name:20s} races on {on:7.3f} s   off {off:7.3f} s   ratio {on / off:5.2f}")
        else:
            print(f"{name:20s} {_best(run, options.repeats):7.3f} s (no races flag: the executor before)")


if __name__ == "__main__":
    main()
