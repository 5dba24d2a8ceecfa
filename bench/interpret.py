"""Interpreter throughput (Tile IR interpreter and the Target IR CTA simulator), against the NumPy reference of
the same attention, in one run.

    python bench/interpret.py [--seq 1024] [--head-dim 128] [--repeats 3]
    python bench/interpret.py --simulator --cpu --seq 512,2048 --heads 1,2

Prints, for each attention variant and causal/non-causal: the best wall time of the Tile interpreter and of
the CTA simulator (lowering included; "-" where the variant does not lower) over the repeats, the time of the
fp64 NumPy reference on the same inputs, and the ratios to it (absolute times are only
indicative on a shared machine; compare ratios taken in the same run). The last rows run flash attention again
with a busy neighbour core (bench/busy_neighbour.py: a process spinning on another core), the usual state of a
machine running a test suite; `--no-busy` leaves them out.

The CTA simulator rows (`--simulator` prints only them) time the simulator alone over the whole grid of flash
attention, lowered and allocated once outside the timing, with the register-file check on (as
`tessera.interpret(level="target")` runs it) and off, and checked with one CTA at a time ("alone": batches of
leader and followers turned off, `batch_ctas=1`), against a plain NumPy fp32 attention on the same shape on one
BLAS thread, as the simulator runs (issue 28's measure: the simulator's goal is <= 50x NumPy fp32). With
`--simulator`, `--seq` and `--heads` take comma-separated lists: a row per sequence length, head count and
causality, every ratio from times taken in the same run.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

from busy_neighbour import busy_neighbour
from numpy_heap import settle_heap

import numpy as np
from xdsl.utils.exceptions import DiagnosticException

import tessera
from tessera import reference_attention


CLOCK = time.perf_counter
"""Wall time; `--cpu` makes it time.process_time (this process's CPU time, all its threads: steadier on a
shared machine, where a simulator's strands otherwise mostly wait for a core)."""


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=_sizes, default=[1024], help="keys (and queries unless --queries); with "
                        "--simulator a comma-separated list")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=_sizes, default=[1], help="with --simulator a comma-separated list")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-busy", action="store_true", help="leave out the rows with a busy neighbour core")
    parser.add_argument("--simulator", action="store_true", help="only the CTA simulator rows")
    parser.add_argument("--cpu", action="store_true", help="time CPU (time.process_time), not wall time")
    args = parser.parse_args()
    if args.cpu:
        global CLOCK
        CLOCK = time.process_time
    rng = np.random.default_rng(0)
    if args.simulator:
        print(f"CTA simulator, best of {args.repeats}, CPU time" if args.cpu else f"best of {args.repeats}")
        header = True
        for seq in args.seq:
            for heads in args.heads:
                shape = (args.batch, heads, seq, args.head_dim)
                q = rng.standard_normal((args.batch, heads, args.queries or seq, args.head_dim))
                k, v = (rng.standard_normal(shape) for _ in range(2))
                simulator_rows(q, k, v, args.repeats, header)
                header = False
        return
    seq, heads = args.seq[0], args.heads[0]
    shape = (args.batch, heads, seq, args.head_dim)
    q = rng.standard_normal((args.batch, heads, args.queries or seq, args.head_dim))
    k, v = (rng.standard_normal(shape) for _ in range(2))
    print(f"attention q {q.shape}, k/v {shape}, best of {args.repeats}")
    print(f"{'variant':<22}{'causal':<8}{'tile s':>9}{'target s':>10}{'numpy s':>9}{'tile/np':>9}{'target/np':>10}")
    rows = [(variant, causal, False) for variant in ("flash_attention", "two_pass_attention", "three_pass_attention")
            for causal in (False, True)]
    rows += [] if args.no_busy else [("flash_attention", causal, True) for causal in (False, True)]
    for variant, causal, busy in rows:
        module = getattr(tessera.kernels, variant)(head_dim=args.head_dim, causal=causal)
        with busy_neighbour() if busy else nullcontext():
            t_tile, t_target, t_ref = measure(module, q, k, v, causal, args.repeats)
        target = ("-", "-") if t_target is None else (f"{t_target:.3f}", f"{t_target / t_ref:.2f}")
        label = variant + (" +busy" if busy else "")
        print(f"{label:<22}{str(causal):<8}{t_tile:>9.3f}{target[0]:>10}{t_ref:>9.3f}"
              f"{t_tile / t_ref:>9.2f}{target[1]:>10}")


def numpy_attention_f32(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """softmax(Q K^T / sqrt(d) [+ causal mask]) V in float32, the plain NumPy way (inputs already float32)."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(1.0 / np.sqrt(q.shape[-1]))
    if causal:
        seq_q, seq_k = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((seq_q, seq_k), bool), seq_k - seq_q), scores, np.float32(-np.inf))
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.matmul(scores / scores.sum(axis=-1, keepdims=True), v)


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def simulator_rows(q, k, v, repeats: int, header: bool = True) -> None:
    """The CTA simulator alone (register-file check on and off) over the whole grid of flash attention, against
    NumPy fp32 attention, best of `repeats`, each ratio from times taken in this run."""
    from tessera.interpreters.blas_threads import single_threaded_blas
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90.launch import BATCH_CTAS, run_target_kernel
    from tessera.kernel_abi import kernels, signature
    from tessera.regalloc import allocate_registers

    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    if header:
        print(f"{'seq x heads (CTAs)':<22}{'causal':<8}{'checked s':>10}{'alone s':>9}{'unchecked s':>12}"
              f"{'np f32 s':>10}{'checked/np':>11}{'alone/np':>9}{'unchecked/np':>13}")
    _, heads, seq_q, _ = q.shape
    label = f"{seq_q} x {heads} ({-(-seq_q // 128) * heads * q.shape[0]})"
    for causal in (False, True):
        module = tessera.kernels.flash_attention(head_dim=q.shape[-1], causal=causal)
        sig = signature(kernels(module)[0])
        target = tessera.lower_to_target(module, sig.name)
        allocation = allocate_registers(target)

        def run(checked: bool, batch_ctas: int = BATCH_CTAS) -> None:
            arguments, sizes = prepare_arguments(sig, [q, k, v])
            run_target_kernel(target, arguments, sizes, allocation if checked else None, batch_ctas=batch_ctas)

        t_checked, t_unchecked = best_time(lambda: run(True), repeats), best_time(lambda: run(False), repeats)
        t_alone = best_time(lambda: run(True, 1), repeats)
        # NumPy takes milliseconds, and BLAS threads on a loaded machine make single runs vary 50x (their spinning
        # counts as CPU time): one BLAS thread, as the simulator runs with, and best of 20; its temporaries on
        # the heap whatever ran before (bench/numpy_heap.py).
        settle_heap()
        with single_threaded_blas():
            t_np = best_time(lambda: numpy_attention_f32(q32, k32, v32, causal), max(20, repeats))
        print(f"{label:<22}{str(causal):<8}{t_checked:>10.3f}{t_alone:>9.3f}{t_unchecked:>12.3f}"
              f"{t_np:>10.4f}{t_checked / t_np:>11.0f}{t_alone / t_np:>9.0f}{t_unchecked / t_np:>13.0f}")


def measure(module, q, k, v, causal: bool, repeats: int) -> tuple[float, float | None, float]:
    """Best times of the Tile interpreter, the CTA simulator (None where the kernel does not lower) and the
    NumPy reference on the same inputs."""
    t_tile = best_time(lambda: tessera.interpret(module, q, k, v), repeats)
    try:
        t_target = best_time(lambda: tessera.interpret(module, q, k, v, level="target"), repeats)
    except DiagnosticException:
        t_target = None
    settle_heap()
    t_ref = best_time(lambda: reference_attention.attention(q, k, v, causal), repeats)
    return t_tile, t_target, t_ref


if __name__ == "__main__":
    main()
