"""Where Tessera's backward spends its time at short sequences, taken apart (issue 26; the GPU session's
`backward_parts` stage).

The first H200 session measured the backward at 46 TFLOP/s at seq 512 and 118 at 2k against 310-489 from 4k up
(head_dim 128): a fixed cost per call. `tessera.attention_backward` on CUDA tensors checks its arguments, looks
its three kernels up (`compile_kernel`: in memory after the first call), then for each of preprocess (dO.O), main
and postprocess (dQ's conversion) allocates its outputs and launches it (`launch_on_tensors`: no zero fill
but the deterministic kernel's semaphores; `prepare_planned` packs the parameters on the
host, encoding a tensor map only for an address it has not seen, `tessera.runtime.launch_plan`). `instrumented`
wraps those four functions of the runtime, unchanged, with timers: host seconds around each (perf_counter), CUDA
events on the current stream around each `launch_on_tensors` (zero fills and kernel) and around the kernel's own
launch, and events at the call's start and end. Per call (`sample`), in milliseconds:

- `wall`: the call to its synchronisation (host); `gpu_span`: start to end event;
- `kernel[part]` and `zero_fill[part]` (GPU) for preprocess, main, postprocess;
- `gap`: GPU time between the parts, where the stream waits for the host: `before_preprocess` (argument
  checks, lookups), `preprocess_to_main`, `main_to_postprocess`, `after_postprocess`;
- `host`: `check`, `lookup` (the three), `preprocess`, `main`, `postprocess` (each `launch_on_tensors` call, of which
  `prepare[part]`, the `prepare_planned` call).

`measure` reports each figure's median over the repeats, and `plain`: the median of the same call, timed
without the timers (the benchmark's figure, so the timers' own cost shows).
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import gpu_plan

PARTS = ("preprocess", "main", "postprocess")
SEQS = (512, 1024, 2048)
HEAD_DIM = 128


def rows() -> list[dict]:
    """The configurations taken apart: head_dim 128 at 512, 1k and 2k (the benchmark grid's shape rule), causal
    or not."""
    return [row for row in gpu_plan.attention_rows("backward") if row["head_dim"] == HEAD_DIM and row["seq"] in SEQS]


def _part(kernel) -> str:
    return kernel.config.builder.removeprefix("attention_backward_")


@contextmanager
def instrumented(torch):
    """Within: the runtime's check_backward_arguments, compile_kernel, launch_on_tensors and prepare_planned timed (see
    the module docstring); yields a list that gets one dict of raw timings (seconds and event pairs) per call to
    `new_call()`, the entries the wrappers fill."""
    import tessera.runtime.attention_backward as backward
    from tessera.runtime import compiler, launch

    calls: list[dict] = []

    def event():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def host_timer(key, function):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                calls[-1]["host"][key] = calls[-1]["host"].get(key, 0.0) + time.perf_counter() - start
        return timed

    def zeroed(function):
        def timed(kernel, *args, **kwargs):
            before, start = event(), time.perf_counter()
            result = function(kernel, *args, **kwargs)
            calls[-1]["host"][_part(kernel)] = time.perf_counter() - start
            calls[-1]["spans"][_part(kernel)] = (before, event())
            return result
        return timed

    def prepared(function):
        def timed(kernel, *args, **kwargs):
            start = time.perf_counter()
            launcher = function(kernel, *args, **kwargs)
            calls[-1]["host"][f"prepare[{_part(kernel)}]"] = time.perf_counter() - start

            def run(*a, **k):
                before = event()
                try:
                    return launcher(*a, **k)
                finally:
                    calls[-1]["kernels"][_part(kernel)] = (before, event())
            return run
        return timed

    wrapped = [(backward, "check_backward_arguments", lambda f: host_timer("check", f)),
               (compiler, "compile_kernel", lambda f: host_timer("lookup", f)),
               (launch, "launch_on_tensors", zeroed), (launch, "prepare_planned", prepared)]
    originals = [(module, name, getattr(module, name)) for module, name, _ in wrapped]
    try:
        for module, name, wrap in wrapped:
            setattr(module, name, wrap(getattr(module, name)))
        yield calls
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def new_call(calls: list) -> dict:
    calls.append({"host": {}, "spans": {}, "kernels": {}})
    return calls[-1]


def sample(call: dict, wall_s: float, start, end) -> dict:
    """One call's figures in milliseconds (see the module docstring) from its raw timings."""
    spans, kernels = call["spans"], call["kernels"]
    missing = [p for p in PARTS if p not in spans or p not in kernels]
    if missing:
        raise RuntimeError(f"the backward launched no {', '.join(missing)} through launch_on_tensors/prepare_planned: "
                           "the runtime's calls changed; bench/backward_parts.py wraps them")
    marks = [start] + [e for p in PARTS for e in spans[p]] + [end]
    gaps = ("before_preprocess", "preprocess_to_main", "main_to_postprocess", "after_postprocess")
    return {"wall": wall_s * 1e3, "gpu_span": start.elapsed_time(end),
            "kernel": {p: kernels[p][0].elapsed_time(kernels[p][1]) for p in PARTS},
            "zero_fill": {p: spans[p][0].elapsed_time(spans[p][1]) - kernels[p][0].elapsed_time(kernels[p][1])
                          for p in PARTS},
            "gap": {g: marks[2 * i].elapsed_time(marks[2 * i + 1]) for i, g in enumerate(gaps)},
            "host": {k: v * 1e3 for k, v in call["host"].items()}}


def _median(samples: list) -> dict | float:
    if isinstance(samples[0], dict):
        return {k: _median([s[k] for s in samples]) for k in samples[0]}
    return round(statistics.median(samples), 4)


def measure(torch, q, k, v, do, causal: bool, warmup: int = gpu_plan.WARMUP, repeats: int = gpu_plan.REPEATS) -> dict:
    """The backward of (q, k, v, do) (CUDA tensors; O and LSE from Tessera's forward) taken apart: the medians
    of `repeats` instrumented calls after `warmup` plain ones, and `plain`, the median plain call (ms)."""
    import tessera

    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True)

    def call():
        return tessera.attention_backward(q, k, v, o, lse, do, causal=causal)

    for _ in range(warmup):
        call()
    plain = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        plain.append((time.perf_counter() - start) * 1e3)
    samples = []
    with instrumented(torch) as calls:
        for _ in range(repeats):
            torch.cuda.synchronize()
            raw = new_call(calls)
            start, begin = time.perf_counter(), torch.cuda.Event(enable_timing=True)
            begin.record()
            call()
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            torch.cuda.synchronize()
            samples.append(sample(raw, time.perf_counter() - start, begin, end))
    return {"plain": _median(plain), **_median(samples)}
