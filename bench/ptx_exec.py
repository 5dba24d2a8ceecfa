"""PTX executor throughput: one CTA of Tessera's flash attention run from its PTX text, against the Target IR
CTA simulator on the same CTA, in one run.

    python bench/ptx_exec.py [--seq-k 1024] [--head-dim 128] [--causal] [--repeats 3] [--busy-neighbour]

The kernel (seq_q = 128 rows = one CTA, batch = heads = 1) is lowered with DEFAULT_PIPELINE (TMA producer
warpgroup, two consumer warpgroups: 384 threads; registers allocated), printed as PTX, parsed and run by
`tessera.ptx.launch`; the Target IR simulator runs the same lowered kernel. Prints the best wall time of each
over the repeats (parse + decode + run for PTX; excluding lowering for both), the ratio, the largest
difference between the two outputs, and both errors against the NumPy reference. Absolute times are only
indicative on a shared machine; compare the ratio taken in the same run. `--busy-neighbour` times both while a
process spins on another core (bench/busy_neighbour.py).

    python bench/ptx_exec.py --library [--gemm cutlass_cooperative_128x128x64] [--attention fa3_fwd_hdim128]
                             [--k 512] [--seq-k 1024] [--repeats 3]

    python bench/ptx_exec.py --grid [--seq-q 512] [--seq-k 1024] [--head-dim 128] [--baseline /path/to/checkout]
                             [--races-cost] [--step-kinds]

times the whole grid of the warp-specialized flash kernel (seq_q / 128 CTAs, parse excluded, CPU time of this
process) against NumPy fp32 attention on one core, and prints the ratio; with --baseline, a table of another
checkout of Tessera (e.g. main before a change) and this one, timed in alternating rounds (--repeats of them;
the baseline in a subprocess of this run) with NumPy between them, every ratio against the same NumPy time, so
that before and after are measured together (the checkout goes first on PYTHONPATH: its tessera/ package, the
executor, is what is timed; dialects/ and passes/ resolve through the installed editable mapping); with --races-cost, the
same grid again with `races=False`, and the cost of the race checks as the ratio of the two; with
--lanes-per-batch N [N ...], the same grid with CTAs vectorised together up to N threads a batch (the
launch_setup's LANES_PER_BATCH), one row each.

    python bench/ptx_exec.py --lock 32 128 256 [--repeats 3]

times N threads of one CTA taking one `atom.cas` spin lock in turn (each increments a counter under it): the
contention the executor's spin-wait parking and its release/acquire records see (CPU seconds, best of the
repeats; the count is checked).

With --step-kinds, the grid is run with each decoded step's closure timed (CPU time) and the time of every
kind of instruction (opcode and its first two modifiers) is printed, most first, with its steps and time per
step: where a launch spends its time (the scheduler's own loop is the rest of the total). Fused blocks of
straight-line register instructions (`fuse`) are one row, "fused blocks", its steps the blocks run.

`--library` runs instead one CTA of NVIDIA's own kernels built by tests/ptx_library/build.py (nvcc, from CUTLASS and
FlashAttention-3; skipped when not built): a CUTLASS GEMM CTA (one 128x128 output tile, K = --k) and an FA3
forward CTA (seq_q = the kernel's kBlockM, seq_k = --seq-k), each launched through `tessera.ptx.launch` from
the libraries' own host code. Prints the best wall time (parse excluded, decode included), the instructions
executed (warp instructions and thread instructions) per second, and the time of the same problem in NumPy
(float32, inputs converted beforehand, one BLAS thread), with the largest error against the float64
reference.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

import numpy as np
from busy_neighbour import busy_neighbour
from numpy_heap import settle_heap

import tessera
from tessera import reference
from tessera.host import describe
from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.kernel_abi import is_target_kernel
from tessera.passes import DEFAULT_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers
from tessera.regalloc import allocate_registers


def best_time(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def library_rows(args) -> None:
    """One CTA of a CUTLASS GEMM and of FA3's forward (tests/ptx_library), against NumPy."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from ptx_library.build import CONFIGS
    from ptx_library.library import attention_reference, built, gemm_reference, launch_library

    def numpy_attention(q, k, v):  # one head, float32: what the CTA computes
        scores = q @ k.T / np.float32(np.sqrt(q.shape[-1]))
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (weights / weights.sum(axis=-1, keepdims=True)) @ v

    rows = []
    if built(args.gemm):
        tile_m, tile_n, _ = (int(t) for t in CONFIGS[args.gemm]["TILE"].split(","))
        rows.append((args.gemm, f"GEMM {tile_m}x{tile_n}x{args.k} (one output tile, one CTA)",
                     (tile_m, tile_n, args.k, 1), "D", lambda a, b: a @ b.T, gemm_reference,
                     lambda t: (t["A"][0].astype(np.float32), t["B"][0].astype(np.float32))))
    if built(args.attention):
        head_dim = CONFIGS[args.attention]["HDIM"]
        block_m = 128 if head_dim > 64 else 192  # FA3's kBlockM (hopper/tile_size.h)
        causal = bool(CONFIGS[args.attention]["IS_CAUSAL"])
        rows.append((args.attention, f"attention d{head_dim}, seq_q {block_m}, seq_k {args.seq_k} (one query block, "
                     "one CTA)", (1, 1, block_m, args.seq_k, head_dim), "O", numpy_attention,
                     lambda t: attention_reference(t, causal)[0],
                     lambda t: tuple(t[n][0, :, 0].astype(np.float32) for n in "QKV")))
    for name, what, sizes, output, numpy_fn, reference_fn, numpy_inputs in rows:
        best, stats = None, {}
        for _ in range(args.repeats):
            counts: dict = {}
            tensors, description, seconds = launch_library(name, sizes, sms=1, stats=counts)
            if best is None or seconds < best:
                best, stats = seconds, counts
        inputs = numpy_inputs(tensors)
        settle_heap()
        with single_threaded_blas():  # as the executor runs (one BLAS thread never waits for a busy core)
            numpy_time, _ = best_time(lambda: numpy_fn(*inputs), max(args.repeats, 5))
        error = np.abs(tensors[output].astype(np.float64) - reference_fn(tensors)).max()
        print(f"{name}: {what}; grid {description['grid']}, block {description['block']}, "
              f"{description['shared_bytes']} B shared memory")
        print(f"  PTX executor {best:8.3f} s: {stats['warp_instructions'] / best:10.0f} warp instructions/s, "
              f"{stats['thread_instructions'] / best:12.0f} thread instructions/s ({stats['warp_instructions']} warp "
              f"instructions, {stats['steps']} steps); max error {error:.3g}")
        print(f"  NumPy        {numpy_time:8.6f} s: the executor takes {best / numpy_time:.0f}x as long")
    if not rows:
        print("no library kernel is built (tests/ptx_library/build.py)")


def numpy_grid_seconds(args) -> float:
    """The best CPU seconds of NumPy fp32 attention (one BLAS thread) on the grid's problem, of 30 runs, its
    temporaries on the heap whatever ran before (bench/numpy_heap.py: 1.7x faster than a fresh process's mmaps)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, args.head_dim)).astype(np.float32) for n in (args.seq_q, args.seq_k, args.seq_k))

    def numpy_attention():
        s = q @ k.T / np.float32(np.sqrt(args.head_dim))
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return (p / p.sum(axis=-1, keepdims=True)) @ v

    settle_heap()
    with single_threaded_blas():
        times = []
        for _ in range(30):
            start = time.process_time()
            numpy_attention()
            times.append(time.process_time() - start)
    return min(times)


def executor_grid_seconds(args, races: bool = True, warm: bool = False, before_timed=None) -> float:
    """The best CPU seconds of the whole flash grid in the PTX executor (parse excluded), of `args.repeats`
    launches; `warm`: after two untimed launches (the decoded program and its fused blocks' plans are then kept:
    decode and planning excluded);
    `before_timed()` is called before each timed launch."""
    module = tessera.kernels.flash_attention(head_dim=args.head_dim, causal=args.causal, dtype="bf16")
    sig = tessera.find_kernel(module)
    lowered = module.clone()
    apply_pipeline(lowered, DEFAULT_PIPELINE)
    from tessera.interpreters.ptx.parse import parse_ptx

    parsed = parse_ptx(print_ptx(lowered, registers=allocated_registers))
    host = describe(lowered)[0]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 1, n, args.head_dim)) for n in (args.seq_q, args.seq_k, args.seq_k)]
    best = None
    for _ in range(2 if warm else 0):  # decode, then the fused blocks' planning (`fuse.HOT`): both kept
        launch_described(parsed, host, *prepare_arguments(sig, inputs), races=races)
    for _ in range(args.repeats):
        arrays, sizes = prepare_arguments(sig, inputs)
        if before_timed is not None:
            before_timed()
        start = time.process_time()
        launch_described(parsed, host, arrays, sizes, races=races)
        elapsed = time.process_time() - start
        best = elapsed if best is None else min(best, elapsed)
    return best


def step_kind_rows(args, top: int = 25) -> None:
    """The grid with every decoded step timed: CPU seconds per kind of instruction, of the fastest of
    `args.repeats` launches after two untimed ones (decode and planning excluded), against the launch's total."""
    from collections import Counter, defaultdict

    from tessera.interpreters.ptx import launch_setup

    seconds: dict[str, float] = defaultdict(float)
    steps: Counter = Counter()
    install = launch_setup.async_checks.install

    def timed_install(machine, decoded):
        result = install(machine, decoded)
        for step in result:
            kind, run = ".".join([step.inst.opcode, *step.inst.modifiers[:2]]), step.run

            def timed(*a, run=run, kind=kind):
                start = time.process_time()
                try:
                    return run(*a)
                finally:
                    seconds[kind] += time.process_time() - start
                    steps[kind] += 1
            step.run = timed
        return result

    from tessera.interpreters.ptx import fuse

    block_run = fuse.Block.run

    def timed_block(block, lanes):
        start = time.process_time()
        try:
            return block_run(block, lanes)
        finally:
            seconds["fused blocks"] += time.process_time() - start
            steps["fused blocks"] += 1

    launch_setup.async_checks.install = timed_install
    fuse.Block.run = timed_block
    best = None
    try:
        repeats, args.repeats = args.repeats, 1
        for _ in range(repeats):
            total = executor_grid_seconds(args, warm=True, before_timed=lambda: (seconds.clear(), steps.clear()))
            if best is None or total < best[0]:
                best = (total, dict(seconds), dict(steps))
        args.repeats = repeats
    finally:
        launch_setup.async_checks.install = install
        fuse.Block.run = block_run
    total, times, counts = best
    print(f"flash d{args.head_dim}, grid of {args.seq_q // 128} CTAs (seq_q {args.seq_q}, seq_k {args.seq_k}): "
          f"{total:.3f} CPU s, {sum(times.values()):.3f} s in {sum(counts.values())} steps (best of {args.repeats})")
    print("| instruction | CPU s | steps | us per step |")
    print("|---|---|---|---|")
    for kind, t in sorted(times.items(), key=lambda item: -item[1])[:top]:
        print(f"| {kind} | {t:.4f} | {counts[kind]} | {1e6 * t / counts[kind]:.0f} |")


_LOCK = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_lock, .param .u64 k_count)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [k_lock];
    ld.param.u64 %rd2, [k_count];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
$L_spin:
    atom.global.acquire.gpu.cas.b32 %r1, [%rd1], 0, 1;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $L_spin;
    ld.global.u32 %r2, [%rd2];
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd2], %r2;
    atom.global.release.gpu.exch.b32 %r3, [%rd1], 0;
    ret;
}
"""


def lock_rows(args) -> None:
    """N threads taking one CAS lock in turn: the best CPU seconds of `args.repeats` launches, per N."""
    from tessera.interpreters.ptx import launch

    for threads in args.lock:
        best = None
        for _ in range(args.repeats):
            start = time.process_time()
            out = launch(_LOCK, "k", 1, threads, [np.zeros(1, np.uint32), np.zeros(1, np.uint32)])
            elapsed = time.process_time() - start
            assert int(out[1][0]) == threads, out[1]
            best = elapsed if best is None else min(best, elapsed)
        print(f"{threads} threads on one atom.cas lock: {best:.3f} CPU s (best of {args.repeats})")


def grid_row(args, races: bool = True) -> tuple[float, float]:
    """(CPU seconds of the whole flash grid in the PTX executor, their ratio to NumPy fp32's on one BLAS
    thread); prints the row. `races=False` times the executor without the happens-before race checks."""
    best = executor_grid_seconds(args, races)
    numpy_seconds = numpy_grid_seconds(args)
    ratio = best / numpy_seconds
    print(f"flash d{args.head_dim}, grid of {args.seq_q // 128} CTAs (seq_q {args.seq_q}, seq_k {args.seq_k}): PTX "
          f"executor {best:.2f} s{'' if races else ' (races=False)'}, NumPy fp32 {numpy_seconds:.4f} s: {ratio:.0f}x")
    return best, ratio


def baseline_rows(args) -> None:
    """The grid in the `--baseline` checkout and in this one, alternating (`--repeats` rounds, the baseline in a
    subprocess each round; each side's launch timed after two untimed ones), and NumPy fp32 between them: one table, every ratio against the same NumPy time
    (the best of all its runs), so that before and after are measured together on a loaded machine."""
    import os
    import subprocess
    import sys

    command = [sys.executable, os.path.abspath(__file__), "--grid", "--executor-seconds", "--seq-q", str(args.seq_q),
               "--seq-k", str(args.seq_k), "--head-dim", str(args.head_dim), "--repeats", "1"]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([args.baseline, os.environ.get("PYTHONPATH", "")]))
    rounds, repeats = args.repeats, args.repeats
    baseline, this, numpy_seconds = [], [], []
    args.repeats = 1
    for _ in range(rounds):  # each side after two untimed launches: decode and planning excluded from both
        out = subprocess.run(command, env=environment, cwd=args.baseline, capture_output=True, text=True, check=True)
        baseline.append(float(out.stdout.split()[-1]))
        numpy_seconds.append(numpy_grid_seconds(args))
        this.append(executor_grid_seconds(args, warm=True))
    args.repeats = repeats
    fastest = min(numpy_seconds)
    print(f"flash d{args.head_dim}, grid of {args.seq_q // 128} CTAs (seq_q {args.seq_q}, seq_k {args.seq_k}), "
          f"{rounds} alternating rounds, CPU seconds (best, median); NumPy fp32 {fastest:.4f} s (best; median "
          f"{np.median(numpy_seconds):.4f} s)")
    print("| checkout | executor CPU s (best, median) | against NumPy fp32's best |")
    print("|---|---|---|")
    for name, times in ((f"baseline {args.baseline}", baseline), ("this checkout", this)):
        print(f"| {name} | {min(times):.3f}, {np.median(times):.3f} | {min(times) / fastest:.0f}x |")
    print(f"this checkout / baseline: {min(this) / min(baseline):.2f} (best), {np.median(this) / np.median(baseline):.2f} "
          "(median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-k", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy-neighbour", action="store_true", help="time with a process spinning on another core")
    parser.add_argument("--library", action="store_true", help="one CTA of CUTLASS's GEMM and FA3 (tests/ptx_library)")
    parser.add_argument("--gemm", default="cutlass_cooperative_128x128x64", help="with --library: the GEMM built")
    parser.add_argument("--attention", default="fa3_fwd_hdim128", help="with --library: the attention built")
    parser.add_argument("--k", type=int, default=512, help="with --library: the GEMM's K")
    parser.add_argument("--grid", action="store_true", help="the whole grid against NumPy fp32 (see above)")
    parser.add_argument("--seq-q", type=int, default=512, help="with --grid: query rows (128 per CTA)")
    parser.add_argument("--baseline", help="with --grid: a checkout of Tessera to time in the same run")
    parser.add_argument("--races-cost", action="store_true", help="with --grid: also time races=False, same run")
    parser.add_argument("--executor-seconds", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--step-kinds", action="store_true",
                        help="with --grid: CPU time per kind of instruction (each step timed)")
    parser.add_argument("--lanes-per-batch", type=int, nargs="+",
                        help="with --grid: time the grid again with CTAs batched up to each of these thread counts")
    parser.add_argument("--lock", type=int, nargs="+", help="N threads taking one atom.cas lock in turn, per N")
    args = parser.parse_args()
    if args.lock:
        lock_rows(args)
        return
    if args.grid and args.lanes_per_batch:
        from tessera.interpreters.ptx import launch_setup

        default = launch_setup.LANES_PER_BATCH
        for lanes in args.lanes_per_batch:
            launch_setup.LANES_PER_BATCH = lanes
            print(f"CTAs batched up to {lanes} threads:", end=" ")
            grid_row(args)
        launch_setup.LANES_PER_BATCH = default
        return
    if args.grid and args.step_kinds:
        step_kind_rows(args)
        return
    if args.grid and args.executor_seconds:  # the baseline's side of --baseline
        print(f"{executor_grid_seconds(args, warm=True):.6f}")
        return
    if args.grid:
        if args.baseline:
            baseline_rows(args)
            return
        with_races, _ = grid_row(args)
        if args.races_cost:
            without, _ = grid_row(args, races=False)
            print(f"  the race checks (shared and global happens-before) cost {with_races / without:.2f}x CPU time")
        return
    if args.library:
        with busy_neighbour() if args.busy_neighbour else nullcontext():
            library_rows(args)
        return

    module = tessera.kernels.flash_attention(head_dim=args.head_dim, causal=args.causal, dtype="bf16")
    sig = tessera.find_kernel(module)
    lowered = module.clone()
    apply_pipeline(lowered, DEFAULT_PIPELINE)
    ptx = print_ptx(lowered, registers=allocated_registers)
    host = describe(lowered)[0]
    target = next(op for op in lowered.walk() if is_target_kernel(op) and op.sym_name.data == sig.name)
    allocation = allocate_registers(target)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 1, n, args.head_dim)) for n in (128, args.seq_k, args.seq_k)]

    def run_ptx():
        arrays, sizes = prepare_arguments(sig, inputs)
        launch_described(ptx, host, arrays, sizes)
        return arrays

    def run_target():
        arrays, sizes = prepare_arguments(sig, inputs)
        run_target_kernel(target, arrays, sizes, allocation)
        return arrays

    with busy_neighbour() if args.busy_neighbour else nullcontext():
        ptx_time, ptx_arrays = best_time(run_ptx, args.repeats)
        target_time, target_arrays = best_time(run_target, args.repeats)
    q, k, v = ptx_arrays[:3]
    print(f"flash attention d{args.head_dim} {'causal' if args.causal else 'non-causal'}, one CTA: seq_q 128, "
          f"seq_k {args.seq_k}, {host.block[0]} threads, {len(ptx.splitlines())} PTX lines"
          + (", with a busy neighbour core" if args.busy_neighbour else ""))
    print(f"  PTX executor       {ptx_time:8.2f} s   check: "
          f"{reference.check_attention(ptx_arrays[3], q, k, v, q.dtype, causal=args.causal)}")
    print(f"  Target IR simulator {target_time:7.2f} s   check: "
          f"{reference.check_attention(target_arrays[3], q, k, v, q.dtype, causal=args.causal)}")
    print(f"  ratio PTX / Target IR: {ptx_time / target_time:.2f}; max |PTX - Target IR| = "
          f"{np.abs(ptx_arrays[3].astype(np.float64) - target_arrays[3].astype(np.float64)).max():.3g}")


if __name__ == "__main__":
    main()
