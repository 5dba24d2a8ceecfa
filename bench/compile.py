"""Compile time per stage, and what ptxas and the SASS make of the result, for every kernel configuration in
one run; beside Triton's cold compile of the same attention when Triton is installed.

    python bench/compile.py [--only flash_attention] [--pipeline SPEC] [--no-triton] [--repeat N]

For each configuration, through the default full pipeline (`passes.DEFAULT_PIPELINE`; `--pipeline` picks
another): the seconds of each stage (building the Tile IR, each pass, printing the PTX, ptxas), the registers per thread Tessera's allocator predicts (peak) and ptxas uses, spill
bytes, shared memory (static + dynamic), the PTX's lines, and the SASS of the main loop (the innermost loop
holding HGMMA): its instruction count and its HGMMA and MUFU.EX2 counts. Needs ptxas (and nvdisasm for the SASS columns;
`pip install '.[ptx]'` in a checkout).

With Triton installed, each attention configuration Triton's kernel takes (bench/triton_attention.py:
flash attention, head_dim 64/128, 128x128 tiles, 8 warps, 2 stages) gets a Triton row: the wall time of a
cold `triton.compile` for sm_90a (its passes, LLVM and its own ptxas; no GPU needed), and the same columns
from its PTX through this machine's ptxas and nvdisasm, so both kernels are measured by one tool. Times
are wall seconds on this machine: compare them as ratios within one run. `--repeat N` compiles each kernel N
times, alternating Tessera and Triton, and keeps the run of median total time of each (on a busy machine a
single run can be off by a factor of two).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import tessera
from tessera.host import describe
from tessera.kernel_abi import is_target_kernel
from tessera.passes import DEFAULT_PIPELINE, all_passes
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers
from tessera.regalloc import allocate_registers
from tessera.toolchain import compile_ptx, disassemble, find_nvdisasm, find_ptxas, innermost_loop

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c)) for d in (64, 128, 256) for c in (False, True)] + [
    ("flash_attention", dict(head_dim=128, causal=c, block_n=176)) for c in (False, True)] + [
    ("two_pass_attention", dict(head_dim=128)), ("three_pass_attention", dict(head_dim=128)), ("gemm", {})]
"""Every builder at its defaults, and FlashAttention-3's hd128 tile (128 x 176) beside the default 128 x 128."""


@dataclass
class Measured:
    """One compiled kernel: seconds by stage, and what ptxas and the SASS say."""

    label: str
    stages: dict[str, float]
    peak: int | str
    registers: int
    spill: int
    smem: int
    loop: tuple = ("-", "-", "-")
    lines: int | str = "-"

    @property
    def total(self) -> float:
        return sum(self.stages.values())


def _sass_loop(cubin: bytes) -> tuple:
    if find_nvdisasm() is None:
        return ("-", "-", "-")
    loop = innermost_loop(disassemble(cubin), containing="HGMMA")
    if loop is None:
        return ("-", "-", "-")
    return (len(loop.instructions), loop.opcode_counts["HGMMA"], loop.opcode_counts["MUFU.EX2"])


def tessera_compile(variant: str, config: dict, pipeline: str) -> Measured:
    """Build, lower pass by pass (each timed through the pipeline's callback), print and assemble."""
    from xdsl.passes import PassPipeline

    from tessera.ir import make_context

    stages: dict[str, float] = {}
    start = time.perf_counter()
    module = getattr(tessera.kernels, variant)(**config)
    stages["build"] = time.perf_counter() - start
    clock = [time.perf_counter()]

    def lap(previous, _op, _next) -> None:
        now = time.perf_counter()
        if previous is not None:
            stages[previous.name] = stages.get(previous.name, 0.0) + now - clock[0]
        clock[0] = now

    PassPipeline.parse_spec(all_passes(), pipeline, callback=lap).apply(make_context(), module)
    start = time.perf_counter()
    ptx = print_ptx(module, registers=allocated_registers)
    stages["print PTX"] = time.perf_counter() - start
    start = time.perf_counter()
    result = compile_ptx(ptx)
    stages["ptxas"] = time.perf_counter() - start
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    peak = allocate_registers(kernel).peak
    entry = result.entry()
    (host,) = describe(module)
    smem = entry.smem_bytes + host.dynamic_smem_bytes
    label = f"{variant} " + " ".join(f"{k}={v}" for k, v in config.items())
    return Measured(label, stages, peak, entry.registers, entry.spill_store_bytes, smem, _sass_loop(result.cubin),
                    ptx.count("\n"))


def triton_compile(config: dict) -> Measured | None:
    """Triton's kernel for a flash-attention `config`, or None where Triton is missing or does not take it."""
    import triton_attention

    if triton_attention.load() is None or config.get("head_dim") not in triton_attention.HEAD_DIMS:
        return None
    compiled = triton_attention.compile_for_sm90a(config["head_dim"], config.get("causal", False))
    result = compile_ptx(compiled.ptx)
    entry = result.entry()
    label = f"  Triton {compiled.version} (same attention)"
    return Measured(label, {"triton.compile": compiled.seconds}, "-", entry.registers, entry.spill_store_bytes,
                    entry.smem_bytes + compiled.shared_bytes, _sass_loop(result.cubin), compiled.ptx.count("\n"))


def _median(runs: list[Measured]) -> Measured | None:
    """The run of median total time (the lower middle one of an even count); None for no runs."""
    return sorted(runs, key=lambda m: m.total)[(len(runs) - 1) // 2] if runs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only configurations of this builder")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="a tessera-opt -p pipeline ending in "
                                                                     "allocate-registers (default: the full one)")
    parser.add_argument("--no-triton", action="store_true", help="leave out Triton's compiles")
    parser.add_argument("--repeat", type=int, default=1, help="compile each kernel N times and keep the median")
    args = parser.parse_args()
    if find_ptxas() is None:
        print("no ptxas: pip install nvidia-cuda-nvcc, or pip install '.[ptx]' in a checkout (or put CUDA's bin on PATH)")
        return
    import triton_attention

    with_triton = not args.no_triton and triton_attention.load() is not None
    print(f"pipeline: {args.pipeline}")
    if not with_triton:
        print("(no Triton rows: " + ("--no-triton" if args.no_triton else "Triton is not installed") + ")")
    if find_nvdisasm() is None:
        print("(no nvdisasm: pip install nvidia-cuda-nvdisasm for the SASS columns)")
    header = (f"{'configuration':<56}{'total s':>8}{'ptxas s':>8}{'peak':>6}{'regs':>6}{'spill':>6}{'smem':>8}"
              f"{'PTX lines':>10}{'loop':>6}{'HGMMA':>6}{'EX2':>5}")
    print(header)
    measured: list[Measured] = []
    for variant, config in CONFIGS:
        if args.only and variant != args.only:
            continue
        runs = []
        for _ in range(max(1, args.repeat)):
            runs.append((tessera_compile(variant, config, args.pipeline),
                         triton_compile(config) if with_triton and variant == "flash_attention" and "block_n" not in config
                         else None))
        ours = _median([ours for ours, _ in runs])
        theirs = _median([theirs for _, theirs in runs if theirs is not None])
        for m in filter(None, (ours, theirs)):
            ptxas = m.stages.get("ptxas")
            print(f"{m.label:<56}{m.total:>8.2f}{'-' if ptxas is None else f'{ptxas:.2f}':>8}{m.peak:>6}"
                  f"{m.registers:>6}{m.spill:>6}{m.smem:>8}{m.lines:>10}{m.loop[0]:>6}{m.loop[1]:>6}{m.loop[2]:>5}",
                  flush=True)
        if theirs is not None:
            print(f"  {'Tessera / Triton compile time':<54}{ours.total / theirs.total:>8.2f}")
        measured.append(ours)
    print("\nseconds by stage (Tessera):")
    names = list(dict.fromkeys(name for m in measured for name in m.stages))
    labels = [m.label.replace("_attention", "").replace("head_dim=", "d").replace("causal=", "c=") for m in measured]
    width = max(14, *(len(x) + 2 for x in labels)) if labels else 14
    print(f"{'stage':<28}" + "".join(f"{x:>{width}}" for x in labels))
    for name in names:
        print(f"{name:<28}" + "".join(f"{m.stages.get(name, 0.0):>{width}.3f}" for m in measured))
    print("smem: ptxas' static shared memory plus the dynamic shared memory the kernel asks for (with 1023 bytes "
          "of alignment slack for Tessera's).")


if __name__ == "__main__":
    main()
