"""The GPU session's `variants` stage (issue 29): FlexAttention's attention-gym variants, forward, bf16, head_dim
128, 16 heads, seq 2k/8k/16k at 16k tokens, Tessera (`tessera.attention(q, k, v, score_mod=, mask_mod=)`'s kernel)
against FlexAttention (`torch.compile(flex_attention)`) on the same inputs and the same functions.

The stage's body is `gpu_stages.variants_stage` (and `variants_plan`, the dry run's); this file holds the
variants, their rows, kernels, systems and check. The variants are written once (`make_variants(lib, seq,
device)`), over `lib` = numpy or torch: Tessera traces them (NumPy or torch alike, `tessera.variants`),
FlexAttention gets the torch ones through its `score_mod` and `create_block_mask`; the float64 check calls the
torch ones on index grids. Causal as a mask_mod and Tessera's
built-in `causal=True` (FlexAttention: the same mask_mod), a sliding window of `WINDOW`, prefix-LM (`PREFIX`
keys seen by all), document masking of packed sequences (causal inside each document), a soft-cap of `SOFTCAP`
(tanh), ALiBi (slope 2^(-8 (h + 1) / H)) and a relative-position bias table (`bias[h, clip(q - kv) + R]`).

Per row (one variant at one sequence length):
- TFLOP/s of both systems counting only the visited work as FlexAttention's benchmarks count it: 4 B H S^2 D
  times the block density (the fraction of 128 x 128 (query block, key block) pairs a block mask leaves, 1 - its
  sparsity; `density`, and `skipped` = 1 - density);
- each output checked against float64 on a slice (`variant_check`: batch 0, heads 0 and H - 1, the first and
  last `CHECK_ROWS` queries) under the harness's rule (twice the error of a straightforward bf16 computation
  plus `tessera.reference.ABSOLUTE_TOLERANCE`); a wrong output is not timed; and Tessera's output against
  FlexAttention's on that slice (`tessera_vs_flex`);
- each system's build seconds (`build_s`): FlexAttention's the block mask and torch.compile, warmed once outside
  the timed region; Tessera's the kernel loaded from the cache (compiled by the compile stage: `kernels`) and
  its inputs (the captured arrays, the block lists).
Tessera's timed launch is the kernel `tessera.attention` launches (`runtime.flex.compiled_forward`, the same
key-block fallback) on the inputs it passes (`runtime.flex.forward_inputs`), prepared once: tracing the hooks and
the host's block mask, which `tessera.attention` redoes on every call, are outside the timing as FlexAttention's
`create_block_mask` is (which classifies a mask that reads neither b nor h once and broadcasts it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

SEQS = (16384, 8192, 2048)
"""Longest first: a stage cut short has the rows FlexAttention's benchmarks quote."""
TOKENS, HEADS, HEAD_DIM = 16384, 16, 128
BLOCK = 128
"""The block of the density (FlexAttention's default BLOCK_SIZE; Tessera's forward at head_dim 128)."""
WINDOW, PREFIX, SOFTCAP, RELATIVE = 1024, 1024, 50.0, 64
CHECK_ROWS = 64
FLEX_COMPILE_S = 4.0
"""A pessimistic torch.compile of one row's FlexAttention forward on the GPU machine (the budget's estimate):
1.5-4.4 s each on the H200 in the 2026-11-30 session."""


@dataclass(frozen=True)
class Variant:
    """One variant: FlexAttention's hooks (None where it has none); `builtin` for Tessera's `causal=True`."""

    name: str
    score_mod: object = None
    mask_mod: object = None
    builtin: bool = False


def document_ids(seq: int) -> np.ndarray:
    """Packed documents of seeded lengths from seq / 32 to seq / 4, the last cut at seq: their ids per token."""
    rng = np.random.default_rng(seq)
    lengths = []
    while sum(lengths) < seq:
        lengths.append(int(rng.integers(seq // 32, seq // 4 + 1)))
    lengths[-1] -= sum(lengths) - seq
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)


def make_variants(lib, seq: int, device=None) -> list[Variant]:
    """The variants at `seq`, written once over `lib` (numpy or torch; torch tables on `device`)."""
    rng = np.random.default_rng(0)
    bias = (rng.standard_normal((HEADS, 2 * RELATIVE + 1)) * 0.5).astype(np.float32)
    slopes = (2.0 ** (-8.0 * np.arange(1, HEADS + 1) / HEADS)).astype(np.float32)
    doc_ids = document_ids(seq)
    if lib is not np:
        doc_ids, slopes, bias = (lib.as_tensor(x, device=device) for x in (doc_ids, slopes, bias))
    tanh, clip = lib.tanh, (np.clip if lib is np else lib.clamp)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def sliding_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < PREFIX) | (q_idx >= kv_idx)

    def document(b, h, q_idx, kv_idx):
        return (doc_ids[q_idx] == doc_ids[kv_idx]) & (q_idx >= kv_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return SOFTCAP * tanh(score / SOFTCAP)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + bias[h, clip(q_idx - kv_idx, -RELATIVE, RELATIVE) + RELATIVE]

    return [Variant("causal (mask_mod)", mask_mod=causal), Variant("causal (built-in)", mask_mod=causal, builtin=True),
            Variant(f"sliding window {WINDOW}", mask_mod=sliding_window), Variant("prefix-LM", mask_mod=prefix_lm),
            Variant("document", mask_mod=document), Variant(f"soft-cap {SOFTCAP:g}", score_mod=softcap),
            Variant("ALiBi", score_mod=alibi), Variant("relative bias", score_mod=relative_bias)]


NAMES = tuple(v.name for v in make_variants(np, 2048))


def rows() -> list[dict]:
    """The stage's rows, sequence-major (`SEQS`' order), each variant at each length."""
    return [dict(variant=name, seq=seq, batch=TOKENS // seq, heads=HEADS, head_dim=HEAD_DIM, dtype="bf16",
                 direction="forward") for seq in SEQS for name in NAMES]


def variant_of(row: dict, lib=np, device=None) -> Variant:
    return next(v for v in make_variants(lib, row["seq"], device) if v.name == row["variant"])


def block_mask(variant: Variant, row: dict, block_n: int = BLOCK):
    """Tessera's block mask of the row's mask (causal for the built-in) for the row's (batch, heads); None
    without one."""
    from tessera.variants.block_mask import create_block_mask

    if variant.mask_mod is None:
        return None
    return create_block_mask(variant.mask_mod, row["batch"], row["heads"], row["seq"], row["seq"], BLOCK, block_n)


def density(variant: Variant, row: dict) -> float:
    """The fraction of BLOCK x BLOCK pairs the row's mask leaves (1 without one): FlexAttention's
    `1 - block_mask.sparsity() / 100`."""
    mask = block_mask(variant, {**row, "batch": 1, "heads": 1})
    return 1.0 if mask is None else mask.visited_fraction()


def flops(row: dict, visited: float) -> float:
    return 4.0 * row["batch"] * row["heads"] * row["seq"] ** 2 * row["head_dim"] * visited


def estimate_s(warmup: int, repeats: int, slow_tflops: float, overhead_s: float) -> float:
    """The stage at a pessimistic speed: both systems at `slow_tflops` over every row at full density, a
    FlexAttention compile per row (each variant's functions are made anew at each length, and
    `harness.compile_strictly` compiles where dynamo would run them eagerly), `overhead_s` a row."""
    timed = sum(2 * (warmup + repeats + 1) * flops(r, 1.0) / (slow_tflops * 1e12) for r in rows())
    return timed + FLEX_COMPILE_S * len(rows()) + overhead_s * len(rows())


# region Kernels (the compile stage) and the dry run


@dataclass(frozen=True)
class VariantKernel:
    """The compile stage's job for one row's Tessera kernel (`compile()`, in a worker process)."""

    variant: str
    seq: int

    @property
    def builder(self) -> str:
        return "flex_attention (variants)"

    def __str__(self) -> str:
        return f"variants: {self.variant} at seq {self.seq}"

    def compile(self):
        return compiled(variant_of(self.row(), *tracing_lib()), self.row())[0]

    def row(self) -> dict:
        return next(r for r in rows() if (r["variant"], r["seq"]) == (self.variant, self.seq))


def tracing_lib() -> tuple:
    """torch (the tables on the CPU: the kernel is the same) where installed, else numpy: the functions the
    GPU stage hands Tessera are torch's, and the kernel cache keys each module by its text."""
    try:
        import torch
    except ImportError:
        return (np,)
    return torch, "cpu"


def kernel_jobs(quick: bool) -> list[VariantKernel]:
    """The Tessera kernels of the stage's rows (with `quick`: one, the sliding window at 2k); the built-in causal's
    is the forward stage's dense kernel (`gpu_plan.forward_config`)."""
    jobs = [VariantKernel(r["variant"], r["seq"]) for r in rows() if not r["variant"].endswith("(built-in)")]
    return [j for j in jobs if j.seq == 2048 and j.variant == f"sliding window {WINDOW}"] if quick else jobs


def compiled(variant: Variant, row: dict):
    """(the compiled kernel, its key block) `tessera.attention` runs for the row (the built-in's: the dense one)."""
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.flex import compiled_forward

    if variant.builtin:
        import gpu_plan

        return compile_kernel(gpu_plan.forward_config(row["head_dim"], True)), BLOCK
    q = np.broadcast_to(np.zeros((), np.float32), (row["batch"], row["heads"], row["seq"], row["head_dim"]))
    return compiled_forward(q, q, score_mod=variant.score_mod, mask_mod=variant.mask_mod, causal=False, scale=None,
                            return_lse=False, head_dim=row["head_dim"], dtype="bf16")


def tessera_inputs(variant: Variant, row: dict, q, k, block_n: int) -> list:
    """The inputs after q, k, v of the row's kernel (none for the built-in), as NumPy arrays."""
    from tessera.runtime.flex import forward_inputs
    from tessera.variants.index_ranges import check_index_ranges

    if variant.builtin:
        return []
    check_index_ranges(variant.score_mod, variant.mask_mod, batch=row["batch"], heads=row["heads"], seq_q=row["seq"],
                       seq_k=row["seq"])
    return forward_inputs(q, k, variant.score_mod, variant.mask_mod, block_n, block_mask(variant, row, block_n))


# endregion

# region On the GPU


def tessera_system(torch):
    """Tessera's kernel for the variant, prepared once on the row's tensors (module docstring). It traces the
    variant's functions with their tables on the host (`tracing_lib`), as the compile stage did: the host's block
    mask evaluates them on CPU tensors, and the kernel's module, keyed by its text, is the one compiled then."""
    from harness import System
    from tessera.runtime.flex import as_inputs_of
    from tessera.runtime.launch import prepare_torch

    def build(inputs):
        q, k, v, _, row = inputs
        variant = variant_of(row, *tracing_lib())
        kernel, block_n = compiled(variant, row)
        launch, (o,) = prepare_torch(kernel, q, k, v, *as_inputs_of(q, tessera_inputs(variant, row, q, k, block_n)))

        def run():
            launch()
            return o
        return run
    return System("Tessera", build)


def flex_system(torch):
    """FlexAttention through `harness.compile_strictly` (each row runs compiled or is refused, never eager),
    the variant's torch functions, its block mask from its own `create_block_mask` (B = H = None); None where
    this PyTorch has none."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    from harness import System, compile_strictly, first_compiled_call

    compiled_flex = compile_strictly(torch, flex_attention)

    def build(inputs):
        q, k, v, variant, row = inputs
        mask = None if variant.mask_mod is None else \
            create_block_mask(variant.mask_mod, None, None, row["seq"], row["seq"], device=q.device)
        return first_compiled_call(torch, lambda: compiled_flex(q, k, v, score_mod=variant.score_mod,
                                                                block_mask=mask))
    return System("FlexAttention", build)


def timed_builds(system, seconds: dict):
    """`system` whose build seconds go into `seconds[system.name]` (FlexAttention's: torch.compile's)."""
    from harness import System

    def build(inputs):
        start = time.perf_counter()
        try:
            return system.build(inputs)
        finally:
            seconds[system.name] = round(time.perf_counter() - start, 2)
    return System(system.name, build, system.output_rounding)


def variant_check(torch, q, k, v, variant: Variant, compared: dict):
    """`check(outputs)` for the harness: each output on the slice (batch 0, heads 0 and H - 1, the first and last
    CHECK_ROWS queries) against float64, the tolerance twice a straightforward bf16 computation's error plus
    ABSOLUTE_TOLERANCE; `compared["tessera_vs_flex"]` the largest |Tessera - FlexAttention| there."""
    from tessera.reference import ABSOLUTE_TOLERANCE

    seq, d = q.shape[2], q.shape[3]
    rows_ = torch.cat([torch.arange(CHECK_ROWS), torch.arange(seq - CHECK_ROWS, seq)]).to(q.device)
    kv_idx, q_idx = torch.arange(seq, device=q.device)[None, :], rows_[:, None]
    b = torch.zeros((), dtype=torch.int64, device=q.device)
    heads = sorted({0, q.shape[1] - 1})

    def reference(h, round_bf16):
        hh = torch.full((), h, dtype=torch.int64, device=q.device)
        scores = q[0, h, rows_].double() @ k[0, h].double().T / math.sqrt(d)
        if round_bf16:
            scores = scores.to(q.dtype).double()
        if variant.score_mod is not None:
            scores = variant.score_mod(scores, b, hh, q_idx, kv_idx)
        if variant.mask_mod is not None:
            scores = scores.masked_fill(~variant.mask_mod(b, hh, q_idx, kv_idx), float("-inf"))
        p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        if round_bf16:
            return (p.to(q.dtype).double() @ v[0, h].to(q.dtype).double()).to(q.dtype).double()
        return p @ v[0, h].double()

    def check(outputs: dict):
        errors, baseline, magnitude = dict.fromkeys(outputs, 0.0), 0.0, 0.0
        for h in heads:
            ref = reference(h, False)
            baseline = max(baseline, float((reference(h, True) - ref).abs().max()))
            magnitude = max(magnitude, float(ref.abs().max()))
            for name, o in outputs.items():
                diff = torch.nan_to_num((o[0, h, rows_].double() - ref).abs(), nan=float("inf"))
                errors[name] = max(errors[name], float(diff.max()))
        if {"Tessera", "FlexAttention"} <= set(outputs):
            compared["tessera_vs_flex"] = max(float((outputs["Tessera"][0, h, rows_].double() -
                                                     outputs["FlexAttention"][0, h, rows_].double()).abs().max())
                                              for h in heads)
        return errors, 2 * baseline + ABSOLUTE_TOLERANCE, magnitude
    return check


def measure(torch, row: dict, systems: list, seconds: dict, args) -> tuple[list, dict]:
    """One row on the GPU: (the harness's records, the row's summary: density, skipped, build seconds,
    Tessera against FlexAttention)."""
    import harness

    generator = torch.Generator(device="cuda").manual_seed(row["seq"] + NAMES.index(row["variant"]))
    shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator) for _ in range(3))
    variant = variant_of(row, torch, q.device)
    visited = density(variant_of(row), row)
    compared: dict = {}
    seconds.clear()
    records = harness.measure(torch, systems, (q, k, v, variant, row), row, flops(row, visited),
                              variant_check(torch, q, k, v, variant, compared), args)
    summary = {"config": row, "density": visited, "skipped": 1.0 - visited, "build_s": dict(seconds),
               "flops": "4 B H S^2 D x density (FlexAttention's count: visited 128 x 128 blocks)", **compared}
    return records, summary


# endregion
