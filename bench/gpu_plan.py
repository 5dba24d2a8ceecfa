"""What one GPU session runs (bench/gpu_session.py): the stages and their time budgets, the benchmark grid and
the kernels to compile, as data. Nothing here needs a GPU; Tessera is imported only by the functions that
build kernel configurations.

The grid is FlashAttention-3's (its Figure 5): sequence length 512 to 16k at 16k tokens (batch = 16k / seq),
hidden size 2048 (heads = 2048 / head_dim), head_dim 64, 128 and 256, causal and not, bf16, forward and
backward; GEMM at M = N = K = 4k and 8k. The FP8 forward (e4m3, FlashAttention-3's Figure 7) on a shorter
grid (`FP8_SEQS`), against cuDNN's through SDPA and FA3's published figures.
"""

from __future__ import annotations

STAGES = ("install", "compile", "fidelity", "probes", "backward_parts", "tests", "gemm", "backward", "forward",
          "variants", "fp8", "report")
"""The session's stages in the order they run, each its own process cut at its budget: what the first H200
session (2026-11-29) left unknown first (the fidelity table, Hopper's arithmetic pinned by bench/gpu_probes.py,
the backward's parts, which GPU tests fail), then
the benchmarks, cheapest first, the FP8 forward last (it hung on the hardware in the 2026-11-30 session: cut at
its item limit), then the pictures."""
FIRST_RUN = STAGES
"""What `python bench/gpu_session.py --out $OUT` runs (no --stages): every stage. The 2026-11-30 session's stage
times sum to 383 s (install 11, compile 10, fidelity 30, backward_parts 9, tests 76, gemm 6, backward 53,
forward 88, fp8 35 (hung, cut), variants 65 in a call of its own, report 0.4), so the variants fit beside the
rest within `SESSION_LIMIT_S`."""
BUDGETS_S = {"install": 20, "compile": 20, "fidelity": 45, "probes": 10, "backward_parts": 15, "tests": 75, "gemm": 20,
             "backward": 60, "forward": 120, "variants": 120, "fp8": 40, "report": 5}
"""Seconds of wall time each stage may take on the GPU machine before it is cut (what it wrote is kept): the
2026-11-30 session's times (`FIRST_RUN`) with a margin; the forward and the variants more, since FlexAttention
now compiles every row (`harness.compile_strictly`: about 12 compiles in the forward grid, 24 in the variants',
1.5-4.4 s each there) where it ran some eagerly then; the tests' 76 s included the FP8 test's 45 s limit
(75 s now, to make room for probes); the gemm stage 20 s for its ten rows (`gemm_rows`: the default and cuBLAS,
then each other schedule alone; two rows took 6 s there); the fidelity stage 45 s for its 19 cases (15 took 30 s
there; the four head_dim 96/192 cases are new), the session's limit 10 s more for them (`SESSION_LIMIT_S`)."""
ITEM_LIMITS_S = {"fidelity": 20, "backward_parts": 20, "gemm": 20, "backward": 30, "forward": 90, "fp8": 30,
                 "variants": 90}
"""Seconds one item (a fidelity case, a benchmark row) of these stages may run before the stage is cut there
(`gpu_session.run_stage`): a kernel that never finishes costs this, not the stage's budget. The forward's
first row builds Triton's kernel and FlexAttention's (torch.compile), hence its margin; so does each variant's
first row (bench/gpu_variants.py)."""
SESSION_LIMIT_S = 550
"""The whole run, compilation included: with the machine's start (a minute or two) and its return, within the
15 device minutes a task has; the device tool's command then takes a timeout of 570 s. What a cut leaves
undone, a second call does (`second_run`)."""
DEVICE_S, MACHINE_START_S = 900, 120
"""The device time a task has, all calls together, and what the machine's start takes of it (33 s in the
2026-11-30 session; a minute or two allowed)."""
SECOND_RUN = "python bench/gpu_session.py --out $OUT --stages install compile {stages} report"
"""The second command, self-contained: the stages named measure their whole grids again and read nothing of
the first call's (the device tool empties $OUT before each command). `second_run` fills in the stages from the
first call's session.json, which comes back at $OUT's top level."""
FP8_PROBE = "python bench/gpu_fp8_probe.py --out $OUT/fp8probe"
"""Appended to the second command when the first call's fp8 stage did not finish: which FP8 kernels finish on the
GPU, each in its own process under a time limit (about 30 s), and whether the old setmaxnreg split, put back
alone, hangs (bench/gpu_fp8_probe.py: the cause the CPU found for the 2026-11-30 hang)."""


def second_run(session: dict) -> str | None:
    """The second command for a first call whose session.json is `session`: the stages it planned that did not
    finish (cut, failed, not run for want of time), install, compile and report aside, then `FP8_PROBE` when the
    fp8 stage is among them; None when all finished."""
    stages = session.get("stages", {})
    left = [name for name in STAGES if name in stages and name not in ("install", "compile", "report")
            and stages[name].get("status") != "ok"]
    if not left:
        return None
    command = SECOND_RUN.format(stages=" ".join(left))
    return f"{command}; {FP8_PROBE}" if "fp8" in left else command


GPU_TESTS = (("runtime", ("tests/test_runtime.py",), None, 8),
             ("gpu-marked", ("tests/test_launch.py", "tests/test_launch_plan.py", "tests/test_attention_mods_gpu.py",
                             "tests/test_captured_gradients_gpu_path.py", "tests/test_fp8_gpu.py"), "gpu", 1))
"""The tests stage's selections in the order they run, cheap first, as (name, files, the -m expression or None
for every test, pytest-xdist workers): tests/test_runtime.py whole (101 tests, 20 s on 8 workers on the H200),
then each other file's `gpu` tests one at a time: a hand-written kernel; the modifiers' backward launched twice
into NaN-filled memory (tests/test_launch_plan.py); the modifiers' forward and backward
(five kernels compiled there); autograd filling a learned table's .grad (four kernels: the captured gradients'
red.global.add, never run on a GPU before); the FP8 forward last (three kernels compiled there; the first session's FP8
stage recorded nothing in 40 s, and its tests stage stalled after one failure: an FP8 kernel that does not
finish on the hardware would explain both). Every test file marking tests `gpu` must be here (the dry run
checks)."""
TEST_LIMIT_S = 45
"""Seconds one GPU test may run (compiles included) before it is cut and the next one starts."""
GPU_MACHINE_CORES = 16
"""The GPU machine's CPUs: the compile and the PTX-executor side of the fidelity table run on that many."""

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64, 256)
"""head_dim 128 first: a stage cut short has the most-used head dimension."""
TOKENS = 16384
HIDDEN = 2048
GEMM_SIZES = (4096, 8192)
GEMM_SCHEDULES = ("128x128", "128x256", "128x256-cluster2", "128x256-pingpong", "128x256-cluster2-pingpong")
"""Tessera's GEMM tile schedules, the names of `tessera.kernels.gemm.GEMM_SCHEDULES` in its order (not imported:
this module runs before Tessera is installed; tests/test_gpu_session.py checks they agree): the default 128 x
128 two-stage kernel the first sessions measured at half of cuBLAS, then the 128 x 256 four-stage tile, alone and
in 2 x 1 clusters, then each with ping-pong consumers (docs/performance.md, "GEMM"). `gemm_rows` times the
default beside cuBLAS first, then each other schedule alone, one row each, in this order: none of them has run
on a GPU yet (ping-pong never has), and a kernel that hangs cuts the stage at its row, so the rows before it,
the default and cuBLAS first, are kept, and a resumed call skips only that row."""
QUICK_GEMM_SCHEDULE = "128x256-cluster2-pingpong"
"""The schedule the quick dry run compiles and host-checks beside the default: every change of the others in one."""
WARMUP, REPEATS = 3, 10
"""Per timed system and configuration (median of REPEATS after WARMUP; bench/attention.py's timing)."""


FP8_SEQS = (1024, 4096, 16384)
"""The FP8 forward's sequence lengths (a third of FA3 Figure 7's, at the same 16k tokens): the stage's budget."""
FA3_FP8_TFLOPS = {(64, False): (240, 396, 462, 568, 596, 613), (64, True): (164, 244, None, None, None, None),
                  (128, False): (348, 596, 733, 918, 974, 1008), (256, False): (510, 744, 931, 966, 1151, 1171),
                  (256, True): (329, 521, 703, 856, 960, 1024)}
"""FlashAttention-3's published FP8 (e4m3) forward TFLOP/s on an H100 by (head_dim, causal), at `SEQS`: its paper's
Figure 7 as transcribed in shared/notes/attention-2026.md (head_dim 128 causal was not found; None where the
transcription stops). Printed beside the measured systems, never measured here."""


def fp8_rows(head_dims=HEAD_DIMS, masks=(False, True), seqs=FP8_SEQS, tokens=TOKENS, hidden=HIDDEN) -> list[dict]:
    """The FP8 forward's configurations: `attention_rows`' shape rule, e4m3 inputs."""
    return [dict(seq=seq, batch=max(1, tokens // seq), heads=hidden // d, head_dim=d, causal=causal, dtype="e4m3",
                 direction="forward") for d in head_dims for causal in masks for seq in seqs]


def fa3_fp8_tflops(row: dict) -> float | None:
    """FA3's published FP8 figure for `row`, None where there is none."""
    figures = FA3_FP8_TFLOPS.get((row["head_dim"], row["causal"]))
    return figures[SEQS.index(row["seq"])] if figures and row["seq"] in SEQS and row["batch"] * row["seq"] == TOKENS \
        and row["heads"] * row["head_dim"] == HIDDEN else None


def attention_rows(direction: str) -> list[dict]:
    """The benchmark's attention configurations for `direction` ("forward" or "backward")."""
    rows = []
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            for seq in SEQS:
                rows.append(dict(seq=seq, batch=max(1, TOKENS // seq), heads=HIDDEN // head_dim, head_dim=head_dim,
                                 causal=causal, dtype="bf16", direction=direction))
    return rows


FORWARD_TILES = {"192x128": {"block_m": 192}, "128x176": {"block_n": 176}, "pingpong": {}}
"""Head_dim 64 forward kernels beside the default, each timed alone on `forward_tile_rows` (docs/performance.md,
"Where Tessera trails cuDNN on the H200"): FlashAttention-3's 192 query rows (three consumer warpgroups), 176 keys
a trip, the consumers taking turns at the tensor cores (`PINGPONG_PIPELINE`, last: the flash kernel has never
run with it). The first and the last compute the default's output bit for bit at the three levels on the CPU,
176 keys its own (other key blocks); none has run on a GPU."""


BACKWARD_ORDERS = ("program",)
"""The backward's wgmma issue orders timed beside the default (`convert-tile-to-sm90{mma-order=...}`, docs/performance.md
"Backward, head_dim 128, 16k"): "program", the builder's order and the placement the 2026-11-30 session measured
(four drains a trip at head_dim 128), against the default "first-read" (FlashAttention-3's, two); each through
`passes.PROGRAM_ORDER_PIPELINE`, Tessera's backward alone on `backward_order_rows`."""


def backward_order_rows() -> list[dict]:
    """The head_dim 128 backward rows at 16k, causal and not, once per `BACKWARD_ORDERS` entry (`mma_order`)."""
    return [{**row, "mma_order": order} for order in BACKWARD_ORDERS for row in attention_rows("backward")
            if row["head_dim"] == 128 and row["seq"] == 16384]


def forward_tile_rows() -> list[dict]:
    """The head_dim 64 forward rows at 512 and 16k (causal at 16k only), once per `FORWARD_TILES` entry (`tile`)."""
    return [{**row, "tile": tile} for tile in FORWARD_TILES for row in attention_rows("forward")
            if row["head_dim"] == 64 and row["seq"] in (512, 16384) and not (row["causal"] and row["seq"] == 512)]


def gemm_rows() -> list[dict]:
    """Tessera's default GEMM and cuBLAS at each size (the rows of the earlier sessions, unchanged), then one row
    per other schedule and size, `schedule` naming it (`GEMM_SCHEDULES`)."""
    return [dict(M=n, N=n, K=n, dtype="bf16") for n in GEMM_SIZES] + \
        [dict(M=n, N=n, K=n, dtype="bf16", schedule=s) for s in GEMM_SCHEDULES[1:] for n in GEMM_SIZES]


def attention_flops(row: dict) -> float:
    """4 seq^2 head_dim heads batch for the forward, 2.5 times that for the backward, halved when causal."""
    forward = 4 * row["seq"] ** 2 * row["head_dim"] * row["heads"] * row["batch"] / (2 if row["causal"] else 1)
    return forward * (2.5 if row["direction"] == "backward" else 1.0)


SYSTEMS = {"forward": 6, "fp8": 3, "backward": 4, "gemm": 2}
"""Systems timed per row at most: Tessera, SDPA's three backends (forward: and Triton, FlexAttention); Tessera FP8
with and without V's rearrangement, cuDNN FP8; Tessera's GEMM and cuBLAS (a schedule's row: Tessera's alone)."""
FP8_CHECK_S = 1.0
"""Seconds a pessimistic FP8 row spends in its checks (float64 on a slice per system: bench/attention.fp8_check)."""
SLOW_TFLOPS, CHECK_TFLOPS, ROW_OVERHEAD_S = 100.0, 20.0, 0.5
"""A pessimistic estimate of a benchmark stage: every system at 100 TFLOP/s (an H200 does 300 to 700 in bf16),
the fp32 checks (a reference and a straightforward computation, forward and backward) at 20 TFLOP/s, and half a
second per row for inputs, launches and synchronisation."""


BENCHMARKS = ("forward", "fp8", "backward", "gemm")
"""The benchmark stages of FlashAttention-3's grid (`variants`, the attention variants, has its own rows:
bench/gpu_variants.py)."""


def benchmark_rows(name: str) -> list[dict]:
    """The rows of benchmark stage `name`."""
    if name == "forward":
        return attention_rows(name) + forward_tile_rows()
    if name == "backward":
        return attention_rows(name) + backward_order_rows()
    return gemm_rows() if name == "gemm" else fp8_rows() if name == "fp8" else attention_rows(name)


def stage_estimate_s(name: str) -> float:
    """Seconds the benchmark stage `name` is expected to take at most, compiles aside (capped separately)."""
    rows = benchmark_rows(name)
    total = 0.0
    for row in rows:
        flops = 2.0 * row["M"] * row["N"] * row["K"] if name == "gemm" else attention_flops(row)
        timed = SYSTEMS[name] * (WARMUP + REPEATS + 1) * flops / (SLOW_TFLOPS * 1e12)
        check = FP8_CHECK_S if name == "fp8" else 3 * flops / (CHECK_TFLOPS * 1e12)
        total += timed + check + ROW_OVERHEAD_S
    return total


# region Kernel configurations (what the runtime compiles for each row)


def forward_config(head_dim: int, causal: bool, return_lse: bool = False, tile: str | None = None):
    """The forward kernel `tessera.attention` runs (with `return_lse`: the one the backward's O and LSE come
    from, bench/attention_backward_gpu.py); with `tile`, that kernel as `FORWARD_TILES[tile]` changes it."""
    from dataclasses import replace

    from tessera.passes import PINGPONG_PIPELINE
    from tessera.runtime.attention import attention_config

    config = attention_config(head_dim, causal, "bf16", None, return_lse=return_lse)
    if tile is None:
        return config
    options = {**dict(config.options), **FORWARD_TILES[tile]}
    return replace(config, options=tuple(sorted(options.items())),
                   pipeline=PINGPONG_PIPELINE if tile == "pingpong" else config.pipeline)


def backward_configs(head_dim: int, causal: bool) -> list:
    """The three kernels `tessera.attention_backward` runs (preprocess, main, postprocess); none for a
    head_dim the backward refuses."""
    from tessera.kernels import BackwardConfig
    from tessera.kernels.attention_backward_config import HEAD_DIMS as BACKWARD_HEAD_DIMS
    from tessera.runtime.attention_backward import kernel_configs

    if head_dim not in BACKWARD_HEAD_DIMS:
        return []
    return kernel_configs(BackwardConfig.checked(head_dim, causal, "bf16", None))


def gemm_config(aligned: bool = True, schedule: str = "128x128"):
    from tessera.runtime.gemm import gemm_config as config

    return config("bf16", aligned=aligned, schedule=schedule)


def fp8_config(head_dim: int, causal: bool):
    """The FP8 forward kernel `tessera.attention` runs on the GPU (descales given, no LSE)."""
    from tessera.runtime.attention_fp8 import fp8_config as config

    return config(head_dim, causal, None, False, False, None)


def row_configs(row: dict) -> list:
    """The kernels Tessera runs for one benchmark row."""
    if "M" in row:
        return [gemm_config(schedule=row.get("schedule", GEMM_SCHEDULES[0]))]
    if row["dtype"] == "e4m3":
        return [fp8_config(row["head_dim"], row["causal"])]
    if row["direction"] == "forward":
        return [forward_config(row["head_dim"], row["causal"], tile=row.get("tile"))]
    backward = backward_configs(row["head_dim"], row["causal"])
    return [forward_config(row["head_dim"], row["causal"], return_lse=True), *backward] if backward else []


def unique(configs) -> list:
    return list(dict.fromkeys(configs))


# endregion
