"""Speedup of the simulators with workers: flash attention's whole grid in the CTA simulator and in the PTX
executor, with workers = 1 (serial) and N, against NumPy fp32 attention on the same shape, in one run.

    python bench/parallel.py [--seq 512] [--head-dim 64] [--batch 1] [--heads 2] [--workers 1 2] [--repeats 1]

The kernel is lowered (default pipeline, registers allocated) and printed once, outside the timing; each row
times one whole launch (forking the workers included) and checks that its outputs equal the serial run's bit
for bit. Columns: seconds, speedup over workers = 1, the ratio to NumPy fp32 (issue 28's measure), and the CPU
seconds of the run, workers included (what the groups cost in all: on a machine whose cores other processes
hold, the wall-clock speedup cannot show, but the CPU seconds say how much work the split adds), the CPU
seconds of the longest group, and the speedup the run would have on free cores: the serial run's CPU seconds
over the launch's own CPU seconds outside the groups plus its longest group. On a shared machine absolute
times are indicative only: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np

import tessera
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
import tessera.interpreters.ptx.launch_groups as ptx_launch_groups
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.ptx.printed import ptx_text
import tessera.interpreters.sm90.launch as sm90_launch
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.kernel_abi import is_target_kernel, specialized
from tessera.regalloc import allocate_registers


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best(fn, repeats: int) -> tuple[float, float, object]:
    """(best wall seconds, CPU seconds of that run, the result of the last run)."""
    runs, result = [], None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), cpu_seconds()
        result = fn()
        runs.append((time.perf_counter() - start, cpu_seconds() - cpu))
    wall, cpu = min(runs)
    return wall, cpu, result


GROUP_CPU: list[float] = []
"""The CPU seconds of each group of the last launch (`GroupResult.extra["cpu_seconds"]`)."""


def record_groups(merge):
    """`merge` that first notes each group's CPU seconds in GROUP_CPU."""
    def recording(futures, *args, **kwargs):
        GROUP_CPU[:] = [future.result().extra["cpu_seconds"] for future in futures]
        return merge(futures, *args, **kwargs)
    return recording


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    module = tessera.kernels.flash_attention(head_dim=args.head_dim, causal=args.causal, dtype="bf16")
    sig = tessera.find_kernel(module)
    arguments, sizes = prepare_arguments(sig, [q, k, v])
    lowered = tessera.compile(specialized(module, sig, sizes), target="target")
    kernel = next(op for op in lowered.walk() if is_target_kernel(op) and op.sym_name.data == sig.name)
    allocation = allocate_registers(kernel)
    text, printed = ptx_text(lowered)
    host = next(h for h in describe(printed) if h.kernel == sig.name)
    grid = sig.grid_size(sizes)
    reference, _, _ = best(lambda: numpy_attention(q, k, v, args.causal), 3)
    print(f"flash attention {shape}, causal={args.causal}: grid {grid}, {os.cpu_count()} cores; "
          f"NumPy fp32 {reference * 1e3:.1f} ms")

    def target(workers: int):
        copies = [a.copy() for a in arguments]
        run_target_kernel(kernel, copies, sizes, allocation, workers=workers)
        return copies

    def ptx(workers: int):
        copies = [a.copy() for a in arguments]
        launch_described(text, host, copies, dict(sizes), workers=workers)
        return copies

    sm90_launch.merge = record_groups(sm90_launch.merge)
    ptx_launch_groups.merge = record_groups(ptx_launch_groups.merge)
    print(f"{'simulator':<16}{'workers':>8}{'seconds':>10}{'speedup':>9}{'x NumPy':>10}{'CPU s':>9}"
          f"{'longest group':>15}{'free-core speedup':>19}")
    for name, run in (("CTA simulator", target), ("PTX executor", ptx)):
        serial_time, serial = None, None
        serial_cpu = None
        for workers in args.workers:
            GROUP_CPU.clear()
            seconds, cpu, outputs = best(lambda: run(workers), args.repeats)
            if serial is None:
                serial_time, serial, serial_cpu = seconds, outputs, cpu
            assert all(a.tobytes() == b.tobytes() for a, b in zip(serial, outputs)), "not bitwise equal"
            # on free cores the launch takes its own CPU outside the groups plus its longest group
            longest = max(GROUP_CPU, default=0.0)
            critical = cpu - sum(GROUP_CPU) + longest
            print(f"{name:<16}{workers:>8}{seconds:>10.2f}{serial_time / seconds:>9.2f}"
                  f"{seconds / reference:>10.0f}{cpu:>9.2f}{longest:>15.2f}{serial_cpu / critical:>19.2f}")


if __name__ == "__main__":
    main()
