"""What one GPU session runs (bench/gpu_session.py): the stages and their time budgets, the benchmark grid and
the kernels to compile, as data. Nothing here needs a GPU; Tessera is imported only by the functions that
build kernel configurations.

The grid is FlashAttention-3's (its Figure 5): sequence length 512 to 16k at 16k tokens (batch = 16k / seq),
hidden size 2048 (heads = 2048 / head_dim), head_dim 64, 128 and 256, causal and not, bf16, forward and
backward; GEMM at M = N = K = 4k and 8k.
"""

from __future__ import annotations

STAGES = ("install", "compile", "tests", "fidelity", "forward", "backward", "gemm", "report")
"""The session's stages in the order they run; each is its own process, cut at its budget."""
BUDGETS_S = {"install": 40, "compile": 80, "tests": 90, "fidelity": 70, "forward": 100, "backward": 60, "gemm": 20,
             "report": 10}
"""Seconds of wall time each stage may take on the GPU machine before it is cut (what it wrote is kept)."""
SESSION_LIMIT_S = 480
"""The whole run, compilation included: 8 of the 15 device minutes a task has, leaving the machine's start
(a minute or more) and one rerun of a stage."""
GPU_MACHINE_CORES = 16
"""The GPU machine's CPUs: the compile and the PTX-executor side of the fidelity table run on that many."""

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64, 256)
"""head_dim 128 first: a stage cut short has the most-used head dimension."""
TOKENS = 16384
HIDDEN = 2048
GEMM_SIZES = (4096, 8192)
WARMUP, REPEATS = 3, 10
"""Per timed system and configuration (median of REPEATS after WARMUP; bench/attention.py's timing)."""


def attention_rows(direction: str) -> list[dict]:
    """The benchmark's attention configurations for `direction` ("forward" or "backward")."""
    rows = []
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            for seq in SEQS:
                rows.append(dict(seq=seq, batch=max(1, TOKENS // seq), heads=HIDDEN // head_dim, head_dim=head_dim,
                                 causal=causal, dtype="bf16", direction=direction))
    return rows


def gemm_rows() -> list[dict]:
    return [dict(M=n, N=n, K=n, dtype="bf16") for n in GEMM_SIZES]


def attention_flops(row: dict) -> float:
    """4 seq^2 head_dim heads batch for the forward, 2.5 times that for the backward, halved when causal."""
    forward = 4 * row["seq"] ** 2 * row["head_dim"] * row["heads"] * row["batch"] / (2 if row["causal"] else 1)
    return forward * (2.5 if row["direction"] == "backward" else 1.0)


SYSTEMS = {"forward": 6, "backward": 4, "gemm": 2}
"""Systems timed per row at most: Tessera, SDPA's three backends (forward: and Triton, FlexAttention); cuBLAS."""
SLOW_TFLOPS, CHECK_TFLOPS, ROW_OVERHEAD_S = 100.0, 20.0, 0.5
"""A pessimistic estimate of a benchmark stage: every system at 100 TFLOP/s (an H200 does 300 to 700 in bf16),
the fp32 checks (a reference and a straightforward computation, forward and backward) at 20 TFLOP/s, and half a
second per row for inputs, launches and synchronisation."""


def stage_estimate_s(name: str) -> float:
    """Seconds the benchmark stage `name` is expected to take at most, compiles aside (capped separately)."""
    rows = gemm_rows() if name == "gemm" else attention_rows(name)
    total = 0.0
    for row in rows:
        flops = 2.0 * row["M"] * row["N"] * row["K"] if name == "gemm" else attention_flops(row)
        timed = SYSTEMS[name] * (WARMUP + REPEATS + 1) * flops / (SLOW_TFLOPS * 1e12)
        total += timed + 3 * flops / (CHECK_TFLOPS * 1e12) + ROW_OVERHEAD_S
    return total


# region Kernel configurations (what the runtime compiles for each row)


def forward_config(head_dim: int, causal: bool, return_lse: bool = False):
    """The forward kernel `tessera.attention` runs (with `return_lse`: the one the backward's O and LSE come
    from, bench/attention_backward_gpu.py)."""
    from tessera.runtime.attention import attention_config

    return attention_config(head_dim, causal, "bf16", None, return_lse=return_lse)


def backward_configs(head_dim: int, causal: bool) -> list:
    """The three kernels `tessera.attention_backward` runs (preprocess, main, postprocess); none for a
    head_dim the backward refuses."""
    from tessera.kernels import BackwardConfig
    from tessera.kernels.attention_backward import HEAD_DIMS as BACKWARD_HEAD_DIMS
    from tessera.runtime.attention_backward import _builder_options, _pipeline
    from tessera.runtime.compiler import KernelConfig

    if head_dim not in BACKWARD_HEAD_DIMS:
        return []
    options = _builder_options(BackwardConfig.checked(head_dim, causal, "bf16", None))
    return [KernelConfig.of(f"attention_backward_{part}", _pipeline(), **options)
            for part in ("preprocess", "main", "postprocess")]


def gemm_config(aligned: bool = True):
    from tessera.runtime.gemm import gemm_config as config

    return config("bf16", aligned=aligned)


def row_configs(row: dict) -> list:
    """The kernels Tessera runs for one benchmark row."""
    if "M" in row:
        return [gemm_config()]
    if row["direction"] == "forward":
        return [forward_config(row["head_dim"], row["causal"])]
    backward = backward_configs(row["head_dim"], row["causal"])
    return [forward_config(row["head_dim"], row["causal"], return_lse=True), *backward] if backward else []


def unique(configs) -> list:
    return list(dict.fromkeys(configs))


# endregion
