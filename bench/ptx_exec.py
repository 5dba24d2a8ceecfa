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
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

import numpy as np
from busy_neighbour import busy_neighbour

import tessera
from tessera import reference
from tessera.host import describe
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-k", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy-neighbour", action="store_true", help="time with a process spinning on another core")
    args = parser.parse_args()

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
