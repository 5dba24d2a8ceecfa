"""The host cost of one call of Tessera's GPU entry points, measured on the CPU: the real host path of
`tessera.attention`, `tessera.attention_backward` (plain, and with modifiers) and `tessera.gemm` on pretend CUDA
tensors against a driver that runs nothing (`fake_cuda.py`), so what is timed is Tessera's Python and nothing
else.

    python bench/launch_overhead.py [--calls N] [--repeats R] [--against CHECKOUT [--rounds N]] [--json PATH]

For each entry point (forward and backward at batch 32, heads 16, seq 512, head_dim 128, bf16: the GPU session's
`backward_parts` row; `backward_mods`, the backward at that shape with ALiBi-style per-head slopes, a captured
array, as score_mod and a causal mask_mod, `modifiers`; `training_step`, a training step with a learned table:
the forward and the backward with captured_grads at batch 8, heads 16, seq 512, head_dim 64, bf16, of a score_mod
reading a relative-position table (a pretend CUDA tensor, f32) that the step changes in place first, as an
optimizer does, `learned_table`, each call one step; GEMM 4096^3 bf16), after a warm-up, it reports:
- `us_per_call`: CPU time of this thread per call (`time.thread_time`, not wall time, which other processes on
  a shared machine inflate), the median of R runs of N calls;
- `unplanned_us_per_call` and `planned_speedup`: the same with every kept launch plan dropped before each call
  (`tessera.runtime.launch_plan.forget_plans`): each call checks its tensors and encodes its tensor maps afresh,
  what every call cost before launches were planned; the ratio of the two, from one run;
- `stages_us`: the time inside each stage of the host path per call (inclusive: `check_inputs` runs inside
  `plan` when a plan is made), from one instrumented run: the entry point's argument checks (`check`), the kernel
  lookup (`lookup`, `compile_kernel`; with modifiers `flex._compiled`), the modifiers' own work (`modifiers`:
  their reads proved for the sizes, the kept kernels and block mask found by the modifiers' fingerprints, the
  captured arrays and block lists put on the device), the device check (`device`, `usable_device`), the launch
  plan (`plan`),
  the outputs' allocation (`allocate`: the fake's, reusing freed memory as PyTorch's caching allocator does; on
  a GPU, that allocator and a fill kernel's launch per zeroed buffer), the parameters and tensor maps
  (`prepare`), the driver call (`launch`: the fake's, recording the call);
- `driver_calls`: the driver calls per call, by name, and `zero_fills` (the fill kernels `torch.zeros` would
  issue): counts, not times.
An entry point a checkout cannot call on the fake driver (one from before the modifiers' captured arrays went
to the device through the runtime's torch) gets `error` instead, naming why.

`--against CHECKOUT` runs the same measurement in a subprocess on another checkout's `tessera` (a worktree of
the base branch, say) and prints the ratio of its `us_per_call` to this one's (`speedup`), in the same run;
`--rounds N` measures both sides N times, alternately, each keeping its least time per call.
Needs torch (CPU) and the kernels compiled (the kernel cache; ptxas the first time); no GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fake_cuda import FakeCudaApi, FakeCudaTorch  # noqa: E402 - bench/ is not a package

ATTENTION_SHAPE = (32, 16, 512, 128)
TRAINING_SHAPE = (8, 16, 512, 64)
GEMM_SIZE = 4096
SLOW_ROWS = {"training_step": 5}
"""Rows measured with at most this many calls per timed run (a checkout that re-traces and rebuilds the kernels on
every step takes a third of a second a call)."""
STAGES = (
    ("check", "tessera.runtime.attention", "check_attention_arguments"),
    ("check", "tessera.runtime.attention_backward", "check_backward_arguments"),
    ("check", "tessera.runtime.gemm", "check_gemm_arguments"),
    ("lookup", "tessera.runtime.attention", "compile_kernel"),
    ("lookup", "tessera.runtime.gemm", "compile_kernel"),
    ("lookup", "tessera.runtime.compiler", "compile_kernel"),
    ("lookup", "tessera.runtime.flex", "_compiled"),
    ("modifiers", "tessera.runtime.flex", "check_index_ranges"),
    ("modifiers", "tessera.runtime.flex", "backward_kernels"),
    ("modifiers", "tessera.runtime.flex", "kept_block_mask"),
    ("modifiers", "tessera.runtime.flex", "as_inputs_of"),
    ("device", "tessera.runtime.attention", "usable_device"),
    ("device", "tessera.runtime.gemm", "usable_device"),
    ("device", "tessera.runtime.entry", "usable_device"),
    ("device", "tessera.runtime.launch", "usable_device"),
    ("check_inputs", "tessera.runtime.launch", "check_inputs"),
    ("plan", "tessera.runtime.launch", "plan_for"),
    ("prepare", "tessera.runtime.launch", "prepare_planned"),
    ("prepare", "tessera.runtime.launch", "prepare"),
)
"""(stage, module, function): the functions of the host path timed, by the name the caller looks up (a module
that imported a function by name is wrapped there). Functions a checkout lacks are skipped."""


@contextmanager
def fake_gpu(torch):
    """Within: `tessera.runtime.launch` sees a fake driver and pretend CUDA tensors; yields (api, fake torch)."""
    from tessera.runtime import launch
    from tessera.runtime.driver import Driver

    api, fake = FakeCudaApi(), FakeCudaTorch(torch, fill=False)
    driver = Driver(api)
    saved = launch._torch, launch.get_driver
    launch._torch, launch.get_driver = (lambda: fake), (lambda: driver)
    try:
        yield api, fake
    finally:
        launch._torch, launch.get_driver = saved


def entry_points(torch, fake) -> dict:
    """{name: a call of the entry point} on pretend CUDA tensors (their contents are never read)."""
    import tessera

    def cuda(*shape):
        return fake.cuda_like(torch.empty(shape, dtype=torch.bfloat16))

    q, k, v, do = (cuda(*ATTENTION_SHAPE) for _ in range(4))
    o, lse = (fake.cuda_like(x) for x in tessera.attention(q, k, v, return_lse=True))  # lse: a reshape's
    a, b = cuda(GEMM_SIZE, GEMM_SIZE), cuda(GEMM_SIZE, GEMM_SIZE)
    score_mod, mask_mod = modifiers()
    return {"training_step": training_step(torch, fake),
            "forward": lambda: tessera.attention(q, k, v),
            "backward": lambda: tessera.attention_backward(q, k, v, o, lse, do),
            "backward_mods": lambda: tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod,
                                                                mask_mod=mask_mod),
            "gemm": lambda: tessera.gemm(a, b)}


def modifiers() -> tuple:
    """(score_mod, mask_mod) of `backward_mods`: ALiBi (its per-head slopes a captured array, a device input on
    every call) and a causal mask (block lists)."""
    import numpy as np

    heads = ATTENTION_SHAPE[1]
    slopes = np.asarray([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)], np.float32)

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return alibi, causal


def learned_table(torch, fake, seq: int):
    """(score_mod, the table): a relative-position bias table[q_idx - kv_idx + seq - 1], a pretend CUDA tensor."""
    import numpy as np

    values = torch.from_numpy(np.linspace(-1, 1, 2 * seq - 1, dtype=np.float32))
    table = fake.empty(tuple(values.shape), dtype=values.dtype, device="cuda").copy_(values)

    def relative(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + seq - 1]

    return relative, table


def training_step(torch, fake):
    """One training step's attention with a learned table (`learned_table`): the table changed in place (an
    optimizer's step), then the forward and the backward with its gradient (`captured_grads`)."""
    import warnings

    import tessera

    batch, heads, seq, head_dim = TRAINING_SHAPE
    q, k, v, do = (fake.cuda_like(torch.empty(TRAINING_SHAPE, dtype=torch.bfloat16)) for _ in range(4))
    relative, table = learned_table(torch, fake, seq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the backward's rung warning
        o, lse = (fake.cuda_like(x) for x in tessera.attention(q, k, v, score_mod=relative, return_lse=True))

    def step():
        table.add_(1e-3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tessera.attention(q, k, v, score_mod=relative, return_lse=True)
            tessera.attention_backward(q, k, v, o, lse, do, score_mod=relative, captured_grads=["table"])
    return step


def per_call_us(call, calls: int, repeats: int, before=None) -> float:
    """The median over `repeats` of the thread's CPU microseconds per call of `calls` calls (`before` run before
    each call, outside the time)."""
    runs = []
    for _ in range(repeats):
        spent = 0
        for _ in range(calls):
            if before is not None:
                before()
            start = time.thread_time_ns()
            call()
            spent += time.thread_time_ns() - start
        runs.append(spent / calls / 1e3)
    return round(statistics.median(runs), 1)


@contextmanager
def timed_stages(fake):
    """Within: the functions of `STAGES`, `PreparedLaunch.__call__` (`launch`) and the fake torch's allocations
    (`allocate`) timed; yields a Counter of thread nanoseconds by stage."""
    from tessera.runtime import launch

    spent: Counter = Counter()

    def timer(stage, function):
        def timed(*args, **kwargs):
            start = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent[stage] += time.thread_time_ns() - start
        return timed

    targets = [(stage, importlib.import_module(module), name) for stage, module, name in STAGES]
    targets = [(stage, owner, name) for stage, owner, name in targets if hasattr(owner, name)]
    targets += [("launch", launch.PreparedLaunch, "__call__"), ("allocate", fake, "zeros"), ("allocate", fake, "empty")]
    saved = [(owner, name, getattr(owner, name)) for _, owner, name in targets]
    try:
        for stage, owner, name in targets:
            setattr(owner, name, timer(stage, getattr(owner, name)))
        yield spent
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def measure(calls: int, repeats: int) -> dict:
    """Every entry point's figures (see the module docstring), on this process's `tessera`."""
    import torch

    try:
        from tessera.runtime.launch_plan import forget_plans
    except ImportError:  # a checkout from before launch plans
        forget_plans = None
    results = {}
    with fake_gpu(torch) as (api, fake):
        for name, call in entry_points(torch, fake).items():
            try:
                call()
            except Exception as error:  # noqa: BLE001 - reported, the other entry points measured
                results[name] = {"error": f"{type(error).__name__}: {error}"[:300]}
                continue
            for _ in range(2):
                call()
            calls_here = min(calls, SLOW_ROWS.get(name, calls))
            row = {"us_per_call": per_call_us(call, calls_here, repeats)}
            if forget_plans is not None:
                row["unplanned_us_per_call"] = per_call_us(call, calls_here, repeats, before=forget_plans)
                row["planned_speedup"] = round(row["unplanned_us_per_call"] / row["us_per_call"], 2)
                call()  # plans again, for the counts below
            before, fills = len(api.calls), fake.zero_fills
            with timed_stages(fake) as spent:
                for _ in range(calls_here):
                    call()
            row["stages_us"] = {stage: round(ns / calls_here / 1e3, 1) for stage, ns in sorted(spent.items())}
            row["driver_calls"] = {k: n / calls_here for k, n in sorted(Counter(api.names()[before:]).items())}
            row["zero_fills"] = (fake.zero_fills - fills) / calls_here
            results[name] = row
    return results


def against(checkout: Path, calls: int, repeats: int) -> dict:
    """`measure` on another checkout's tessera, in a subprocess."""
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, str(Path(__file__).resolve()), "--calls", str(calls), "--repeats", str(repeats),
               "--raw"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, cwd=checkout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measurement on {checkout} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per timed run (default 50)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument("--against", type=Path, help="another checkout to measure in the same run")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --against: measure both sides this many times, alternately, and keep each side's "
                             "least time per call (a shared machine's load comes and goes; default 1)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("launch_overhead: needs torch (the CPU build is enough)")
        return 0
    results = {"this": measure(args.calls, args.repeats)}
    if args.raw:
        print(json.dumps(results["this"]))
        return 0
    if args.against is not None:
        results["against"] = {"checkout": str(args.against), **against(args.against, args.calls, args.repeats)}
        for _ in range(args.rounds - 1):  # alternately, each side keeping its least time per call
            for side, again in (("this", measure(args.calls, args.repeats)),
                                ("against", against(args.against, args.calls, args.repeats))):
                for name, row in again.items():
                    if "us_per_call" in row:
                        results[side][name]["us_per_call"] = min(results[side][name]["us_per_call"],
                                                                 row["us_per_call"])
        for name, row in results["this"].items():
            other = results["against"].get(name)
            if other and "us_per_call" in other and "us_per_call" in row:
                row["speedup"] = round(other["us_per_call"] / row["us_per_call"], 2)
    print(json.dumps(results, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
