"""The benchmark harness that bench/attention.py, attention_backward_gpu.py, gemm.py and decode.py share: the GPU
check, the systems and records, timing, checking, the table, JSON results and plots."""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

CHECK_SCORE_BYTES = 1 << 28
"""The fp32 references work on this many score bytes at a time (seq 16k: one head)."""
L2_FLUSH_BYTES = 256 << 20
"""Written before every timed run: five times the H100's and H200's 50 MiB L2."""

def require_gpu():
    """PyTorch, when this machine has a GPU Tessera can run on; otherwise print "no CUDA GPU: <why>" and
    exit 0 (exit 1 when there is a GPU but no PyTorch, which the checks and baselines need)."""
    from tessera.runtime import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"no CUDA GPU: {reason}")
        sys.exit(0)
    try:
        import torch
    except ImportError:
        print("the GPU benchmarks need PyTorch for their fp32 checks and baselines (pip install torch)", file=sys.stderr)
        sys.exit(1)
    if not torch.cuda.is_available():
        print(f"no CUDA GPU: PyTorch {torch.__version__} sees none (built for CUDA {torch.version.cuda})")
        sys.exit(0)
    # The references are fp32 (or fp64) computations, not TF32 ones.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


@dataclass
class Record:
    """One system on one configuration. `status`: "ok" (checked, then timed), "WRONG" (checked and
    refused: no time), "unsupported" (the system refused the configuration), "error" (it failed)."""

    system: str
    config: dict
    status: str
    ms: float | None = None
    tflops: float | None = None
    max_error: float | None = None
    tolerance: float | None = None
    note: str = ""

    def cell(self) -> str:
        return f"{self.tflops:.1f}" if self.status == "ok" else self.status


@dataclass
class System:
    """A way to compute the benchmark: `build(inputs)` returns a function that computes into its output
    and returns it (the function is what is timed), or raises `Unsupported`. A `note` attribute of that
    function (how it was compiled, say) goes into the configuration's `Record`."""

    name: str
    build: Callable
    output_rounding: float = 0.0
    """Relative rounding of the system's output type beyond the checked computation's (bf16 output of an
    fp32-output check: 2^-8), added to the tolerance as output_rounding * max |reference|."""


class Unsupported(Exception):
    """The system does not compute this configuration."""


RECOMPILE_LIMIT = 64
"""dynamo's recompile limit while a benchmark compiles a baseline (`compile_strictly`). Its default, 8
(`torch._dynamo.config.recompile_limit`, `cache_size_limit` before PyTorch 2.6), is per function: the forward
grid compiles FlexAttention twice (static, then dynamic shapes) per head_dim and mask, 12 in all, and each
attention variant at each length anew; past the limit dynamo runs the function eagerly without a word (the
H200 session of 2026-11-30: FlexAttention at 4-30 TFLOP/s, 73 ms a call, bench/results/2026-11-30-h200)."""


def compile_strictly(torch, fn, backend: str = "inductor"):
    """`torch.compile(fn, fullgraph=True)` with dynamo's recompile limit raised to `RECOMPILE_LIMIT` for the
    process: a call of the result runs compiled, or raises (a graph break, or the limit hit:
    `FailOnRecompileLimitHit`), never falls back to eager as dynamo otherwise does past its limit."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # PyTorch 2.6 renamed cache_size_limit (an alias since)
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
            break
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True
    return torch.compile(fn, fullgraph=True, backend=backend)


def compiled_graphs(torch) -> int:
    """Graphs dynamo has compiled in this process so far (its `unique_graphs` counter)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def first_compiled_call(torch, run: Callable) -> Callable:
    """`run` (a call of a `compile_strictly` function) called once: it compiles there, or its failure
    (a compile refused, the recompile limit hit) is `Unsupported`, naming it. Returns `run` with `note` saying
    how many graphs that call compiled (0: a graph of an earlier configuration served, dynamic shapes), which
    `measure` records."""
    before = compiled_graphs(torch)
    try:
        run()
    except Exception as why:  # noqa: BLE001 - an Inductor or Triton refusal (shared memory at head_dim 256)
        first = str(why).strip().splitlines()[0] if str(why).strip() else ""
        raise Unsupported(f"not compiled: {type(why).__name__}: {first}") from None
    new = compiled_graphs(torch) - before
    run.note = f"compiled (torch.compile, fullgraph): {new} new graph{'s' * (new != 1)}"
    return run


SDPA_BACKENDS = (("PyTorch flash", "FLASH_ATTENTION"), ("PyTorch cuDNN", "CUDNN_ATTENTION"),
                 ("PyTorch efficient", "EFFICIENT_ATTENTION"))
"""(system name, `torch.nn.attention.SDPBackend` member) of each PyTorch SDPA backend a benchmark compares with."""


def sdpa_systems_of(build_for: Callable) -> list[System]:
    """One System for each of `SDPA_BACKENDS` that this PyTorch has (none without `torch.nn.attention`):
    `build_for(backend, sdpa_kernel)` is its `build`, `sdpa_kernel` the context manager that selects it."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return []
    return [System(name, build_for(getattr(SDPBackend, member), sdpa_kernel)) for name, member in SDPA_BACKENDS
            if getattr(SDPBackend, member, None) is not None]


CAUSAL_CHOICES = {"both": (False, True), "yes": (True,), "no": (False,)}
"""The causal settings a `--causal` choice of bench/attention.py runs."""


def attention_grid(args):
    """(head_dim, heads, causal, seq, batch) of each row of the attention tables, in table order: heads =
    hidden / head_dim and batch = tokens / seq (at least 1), so every row does about the same work."""
    for head_dim in args.head_dim:
        for causal in CAUSAL_CHOICES[args.causal]:
            for seq in args.seq:
                yield head_dim, args.hidden // head_dim, causal, seq, max(1, args.tokens // seq)


def time_ms(torch, fn: Callable, warmup: int, repeats: int, flush) -> float:
    """Median milliseconds of `fn` by CUDA events, after `warmup` calls, with L2 flushed before each run."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def measure(torch, systems: list[System], inputs, config: dict, flops: float, check: Callable, args) -> list[Record]:
    """Run every system once, check all outputs together (`check(outputs)` -> (errors, tolerance) by name),
    then time those that are right."""
    runners, outputs, records = {}, {}, {}
    for system in systems:
        try:
            fn = system.build(inputs)
            outputs[system.name] = fn()
            torch.cuda.synchronize()  # an asynchronous failure is this system's
        except Unsupported as why:
            records[system.name] = Record(system.name, config, "unsupported", note=str(why))
            continue
        except Exception as error:  # noqa: BLE001 - a failing system is reported, not fatal
            records[system.name] = Record(system.name, config, "error", note=f"{type(error).__name__}: {error}")
            continue
        runners[system.name] = fn
    errors, tolerance, magnitude = check(outputs)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for system in systems:
        if system.name in records:
            continue
        fn = runners[system.name]
        allowed = tolerance + system.output_rounding * magnitude
        error = errors[system.name]
        if not error <= allowed:
            records[system.name] = Record(system.name, config, "WRONG", max_error=error, tolerance=allowed,
                                          note="; ".join(filter(None, ("refused: the result is outside the "
                                                                       "tolerance", getattr(fn, "note", "")))))
            continue
        ms = time_ms(torch, fn, args.warmup, args.repeats, flush)
        rounding = system.output_rounding * magnitude
        note = getattr(fn, "note", "") or (f"its output type's rounding alone is up to {rounding:.3g} of its error"
                                           if rounding else "")
        records[system.name] = Record(system.name, config, "ok", ms, flops / (ms * 1e-3) / 1e12, error, allowed, note)
    del flush
    return [records[s.name] for s in systems]


def print_row(label: str, records: list[Record], widths: list[int]) -> None:
    print(f"{label:<34}" + "".join(f"{r.cell():>{w}}" for r, w in zip(records, widths)), flush=True)


def print_header(systems: list[System]) -> list[int]:
    widths = [max(12, len(s.name) + 2) for s in systems]
    print(f"{'configuration (TFLOP/s)':<34}" + "".join(f"{s.name:>{w}}" for s, w in zip(systems, widths)))
    return widths


def report_problems(records: list[Record]) -> None:
    for r in records:
        if r.status in ("WRONG", "error"):
            detail = f"max error {r.max_error:.3e} > tolerance {r.tolerance:.3e}" if r.status == "WRONG" else r.note
            print(f"  {r.system} {r.status}: {detail}")


def environment(torch) -> dict:
    """The device and the versions a result depends on (`versions`: the driver, Triton, NumPy, ml_dtypes)."""
    from tessera.runtime.compiler import ptxas_version, tessera_version

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "tessera": tessera_version(), "ptxas": ptxas_version(),
            "python": platform.python_version(), **versions(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def versions() -> dict:
    """The NVIDIA driver's version (nvidia-smi's; None without one) and Triton's, NumPy's and ml_dtypes' (None
    where not installed): the 2026-11-30 session's results needed nvidia-smi run by hand for the driver."""
    import importlib.metadata
    import subprocess

    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
        driver = query.stdout.strip().splitlines()[0] if query.returncode == 0 and query.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        driver = None
    found = {}
    for package in ("triton", "numpy", "ml_dtypes"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return {"driver": driver, **found}


def write_results(out: Path, name: str, env: dict, args, records: list[Record]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "environment": env, "arguments": vars(args),
                                "records": [asdict(r) for r in records]}, indent=1, default=str))
    return path


def plot(out: Path, name: str, records: list[Record], panel_of: Callable, panel_title: Callable, x_of: Callable,
         x_label: str, title: str) -> Path | None:
    """TFLOP/s against `x_of(config)`, one line per system (one colour each throughout), one panel per
    `panel_of(config)` (a sortable key, titled `panel_title(key)`); None (and a message) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot skipped: matplotlib is not installed (pip install matplotlib)")
        return None
    panels = sorted({panel_of(r.config) for r in records})
    systems = list(dict.fromkeys(r.system for r in records))
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for colour, system in enumerate(systems):
            points = sorted((x_of(r.config), r.tflops) for r in records
                            if r.system == system and panel_of(r.config) == panel and r.status == "ok")
            if points:
                ax.plot(*zip(*points), marker="o", label=system, color=f"C{colour}")
        xs = sorted({x_of(r.config) for r in records if panel_of(r.config) == panel})
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
        ax.set_title(panel_title(panel))
        ax.set_xlabel(x_label)
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
