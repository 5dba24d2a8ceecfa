"""Compile time per stage, and what ptxas and the SASS make of the result, for every kernel configuration in
one run; beside Triton's cold compile of the same attention when Triton is installed.

    python bench/compile.py [--only flash_attention] [--pipeline SPEC] [--no-triton] [--repeat N] [--breakdown]

For each configuration, through the default full pipeline (`passes.DEFAULT_PIPELINE`; `--pipeline` picks
another): the seconds of each stage (building the Tile IR, each pass, printing the PTX, ptxas), the registers per thread Tessera's allocator predicts (peak) and ptxas uses, spill
bytes, shared memory (static + dynamic), the PTX's lines (printed as `tessera.compile(target="cubin")`
prints them, without the comments), and the SASS of a steady trip of the main loop (`tessera.sass.loop_trip`:
the shortest path through the SASS from the loop's header back to it that issues every MMA, branching over the
masks and over the waits' retries; since compile17's fold, a path through the loop the re-entry is nested in)
and its HGMMA and MUFU.EX2 counts. Needs ptxas (and nvdisasm for the SASS columns;
`pip install '.[ptx]'` in a checkout).

With Triton installed, each attention configuration Triton's kernel takes (bench/triton_attention.py:
flash attention, head_dim 64/128, 128x128 tiles, 8 warps, 2 stages) gets a Triton row: the wall time of a
cold `triton.compile` for sm_90a (its passes, LLVM and its own ptxas; no GPU needed), and the same columns
from its PTX through this machine's ptxas and nvdisasm, so both kernels are measured by one tool. Both
compilers run the same ptxas (`find_ptxas`; Triton's through TRITON_PTXAS_PATH, in place of the one it ships).

Times: "total s" is wall seconds by stage; "CPU s" is CPU seconds, this process's (`time.process_time`: the
Python of the passes, or Triton's passes and LLVM) plus its finished children's (ptxas, from
`getrusage(RUSAGE_CHILDREN)`), which a busy machine does not inflate as it does wall seconds; "ptxas CPU" is
the children's part. `--repeat N` compiles each kernel N times, alternating Tessera and Triton, and keeps each
one's run of least CPU time (best of N); the ratio row divides those, both measured in the same run.
After the tables by stage, "CPU seconds by part" sums Tessera's stages into three: the passes (with building
the Tile IR), printing the PTX, and ptxas.
`--breakdown` prints, for each kernel and Triton's beside it, its PTX lines by kind (comments, declarations,
labels and braces, then instructions by opcode family).
"""

from __future__ import annotations

import argparse
import time
import re
from collections import Counter
from dataclasses import dataclass

import tessera
from tessera.host import describe
from tessera.kernel_abi import is_target_kernel
from tessera.passes import DEFAULT_PIPELINE, all_passes, without_cyclic_gc
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers
from tessera.regalloc import allocate_registers
from tessera.toolchain import compile_ptx, find_nvdisasm, find_ptxas
from tessera.sass import disassemble, loop_trip, opcode_counts
from triton_attention import children_cpu

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c)) for d in (64, 128, 256) for c in (False, True)] + [
    ("flash_attention", dict(head_dim=128, causal=c, block_n=128)) for c in (False, True)] + [
    ("two_pass_attention", dict(head_dim=128)), ("three_pass_attention", dict(head_dim=128)), ("gemm", {})] + [
    ("attention_backward_main", dict(head_dim=d)) for d in (64, 128)]
"""Every builder at its defaults (flash attention at head_dim 128: FlashAttention-3's 128 x 176 tile), the
128 x 128 tile beside it, and the backward's main kernel (`--only attention_backward_main`)."""


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
    cpu: float = 0.0
    """CPU seconds of the whole compile: this process's and its children's (ptxas)."""
    ptxas_cpu: float = 0.0
    ptx: str = ""
    cpu_stages: dict | None = None
    """CPU seconds by stage (ptxas: its process's)."""

    @property
    def total(self) -> float:
        return sum(self.stages.values())


def _sass_loop(cubin: bytes) -> tuple:
    if find_nvdisasm() is None:
        return ("-", "-", "-")
    trip = loop_trip(disassemble(cubin))
    if not trip:
        return ("-", "-", "-")
    counts = opcode_counts(trip)
    return (len(trip), counts["HGMMA"], counts["MUFU.EX2"])


def tessera_compile(variant: str, config: dict, pipeline: str) -> Measured:
    """Build, lower pass by pass (each timed through the pipeline's callback), print and assemble."""
    from xdsl.passes import PassPipeline

    from tessera.ir import make_context

    stages: dict[str, float] = {}
    cpu_stages: dict[str, float] = {}
    cpu, children = time.process_time(), children_cpu()
    start, start_cpu = time.perf_counter(), time.process_time()
    module = getattr(tessera.kernels, variant)(**config)
    stages["build"] = time.perf_counter() - start
    cpu_stages["build"] = time.process_time() - start_cpu
    clock = [time.perf_counter(), time.process_time()]

    def lap(previous, _op, _next) -> None:
        now = (time.perf_counter(), time.process_time())
        if previous is not None:
            stages[previous.name] = stages.get(previous.name, 0.0) + now[0] - clock[0]
            cpu_stages[previous.name] = cpu_stages.get(previous.name, 0.0) + now[1] - clock[1]
        clock[:] = now

    # As tessera.compile runs them: the passes (apply_pipeline) and the printing with the cyclic GC paused.
    with without_cyclic_gc():
        PassPipeline.parse_spec(all_passes(), pipeline, callback=lap).apply(make_context(), module)
        start, start_cpu = time.perf_counter(), time.process_time()
        ptx = print_ptx(module, registers=allocated_registers, comments=False)  # as tessera.compile(target="cubin")
    stages["print PTX"] = time.perf_counter() - start
    cpu_stages["print PTX"] = time.process_time() - start_cpu
    start = time.perf_counter()
    result = compile_ptx(ptx)
    stages["ptxas"] = time.perf_counter() - start
    ptxas_cpu = children_cpu() - children
    cpu_stages["ptxas"] = ptxas_cpu
    cpu = time.process_time() - cpu + ptxas_cpu
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    peak = allocate_registers(kernel).peak
    entry = result.entry()
    (host,) = describe(module)
    smem = entry.smem_bytes + host.dynamic_smem_bytes
    label = f"{variant} " + " ".join(f"{k}={v}" for k, v in config.items())
    return Measured(label, stages, peak, entry.registers, entry.spill_store_bytes, smem, _sass_loop(result.cubin),
                    ptx.count("\n"), cpu, ptxas_cpu, ptx, cpu_stages)


def triton_compile(config: dict) -> Measured | None:
    """Triton's kernel for a flash-attention `config`, or None where Triton is missing or does not take it."""
    import triton_attention

    if triton_attention.load() is None or config.get("head_dim") not in triton_attention.HEAD_DIMS:
        return None
    compiled = triton_attention.compile_for_sm90a(config["head_dim"], config.get("causal", False),
                                                  ptxas=find_ptxas())
    result = compile_ptx(compiled.ptx)
    entry = result.entry()
    label = f"  Triton {compiled.version} (same attention)"
    return Measured(label, {"triton.compile": compiled.seconds}, "-", entry.registers, entry.spill_store_bytes,
                    entry.smem_bytes + compiled.shared_bytes, _sass_loop(result.cubin), compiled.ptx.count("\n"),
                    compiled.cpu, compiled.ptxas_cpu, compiled.ptx)


def _part(m: Measured, part: str) -> float:
    """CPU seconds of one part of a compile: "print PTX", "ptxas", or "passes" (every other stage)."""
    if part != "passes":
        return m.cpu_stages.get(part, 0.0)
    return sum(t for name, t in m.cpu_stages.items() if name not in ("print PTX", "ptxas"))


def _best(runs: list[Measured]) -> Measured | None:
    """The run of least CPU time (best of N); None for no runs."""
    return min(runs, key=lambda m: m.cpu) if runs else None


PTX_KINDS = (("comment", re.compile(r"\s*//")), ("blank", re.compile(r"\s*$")),
             ("declaration", re.compile(r"\s*\.(reg|param|shared|global|local|const|version|target|address_size|"
                                        r"visible|entry|func|maxntid|reqntid|minnctapersm|explicitcluster|"
                                        r"reqnctapercluster|maxnreg|pragma|file|loc|section|b8|b32|b64)\b")),
             ("label or brace", re.compile(r"\s*([$\w.]+:|[{}()]|\)\s*$|,\s*$)")))
"""Lines that are not instructions, by kind, in the order they are tried."""


def ptx_breakdown(ptx: str) -> Counter:
    """The PTX's lines by kind: the `PTX_KINDS`, then each instruction by its opcode's first part (`add`,
    `mbarrier`; a predicate guard is set aside), wgmma's as `wgmma.mma_async` and `wgmma other` (fence, commit,
    wait)."""
    kinds: Counter = Counter()
    for line in ptx.split("\n"):
        kind = next((name for name, pattern in PTX_KINDS if pattern.match(line)), None)
        if kind is None:
            words = line.split()
            opcode = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            kind = opcode.split(".")[0].rstrip(";")
            if kind == "wgmma":  # the mmas apart: each costs ptxas several ms (docs/performance.md)
                kind = "wgmma.mma_async" if opcode.startswith("wgmma.mma_async") else "wgmma other"
        kinds[kind] += 1
    return kinds


def print_breakdown(measured: list[Measured]) -> None:
    """`ptx_breakdown` of each kernel, a column each, kinds by their most lines in any kernel."""
    counts = [ptx_breakdown(m.ptx) for m in measured]
    kinds = sorted({k for c in counts for k in c}, key=lambda k: -max(c[k] for c in counts))
    labels = [m.label.strip().replace("_attention", "").replace("head_dim=", "d").replace("causal=", "c=")[:22]
              for m in measured]
    print("\nPTX lines by kind:")
    print(f"{'kind':<16}" + "".join(f"{x:>24}" for x in labels))
    for kind in kinds:
        print(f"{kind:<16}" + "".join(f"{c[kind]:>24}" for c in counts))
    print(f"{'all':<16}" + "".join(f"{sum(c.values()):>24}" for c in counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only configurations of this builder")
    parser.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="a tessera-opt -p pipeline ending in "
                                                                     "allocate-registers (default: the full one)")
    parser.add_argument("--no-triton", action="store_true", help="leave out Triton's compiles")
    parser.add_argument("--repeat", type=int, default=1, help="compile each kernel N times and keep the run of "
                                                              "least CPU time (best of N)")
    parser.add_argument("--breakdown", action="store_true", help="the PTX lines of each kernel by kind")
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
    header = (f"{'configuration':<56}{'total s':>8}{'ptxas s':>8}{'CPU s':>7}{'ptxas CPU':>10}{'peak':>6}{'regs':>6}{'spill':>6}{'smem':>8}"
              f"{'PTX lines':>10}{'loop':>6}{'HGMMA':>6}{'EX2':>5}")
    print(header)
    measured: list[Measured] = []
    shown: list[Measured] = []
    for variant, config in CONFIGS:
        if args.only and variant != args.only:
            continue
        runs = []
        for _ in range(max(1, args.repeat)):
            runs.append((tessera_compile(variant, config, args.pipeline),
                         triton_compile(config) if with_triton and variant == "flash_attention" and "block_n" not in config
                         else None))
        ours = _best([ours for ours, _ in runs])
        theirs = _best([theirs for _, theirs in runs if theirs is not None])
        for m in filter(None, (ours, theirs)):
            ptxas = m.stages.get("ptxas")
            shown.append(m)
            print(f"{m.label:<56}{m.total:>8.2f}{'-' if ptxas is None else f'{ptxas:.2f}':>8}{m.cpu:>7.2f}"
                  f"{m.ptxas_cpu:>10.2f}{m.peak:>6}"
                  f"{m.registers:>6}{m.spill:>6}{m.smem:>8}{m.lines:>10}{m.loop[0]:>6}{m.loop[1]:>6}{m.loop[2]:>5}",
                  flush=True)
        if theirs is not None:
            print(f"  {'Tessera / Triton compile time (wall; CPU)':<54}{ours.total / theirs.total:>8.2f}"
                  f"{'':>8}{ours.cpu / theirs.cpu:>7.2f}{ours.ptxas_cpu / max(theirs.ptxas_cpu, 1e-9):>10.2f}")
        measured.append(ours)
    if args.breakdown:
        print_breakdown(shown)
    names = list(dict.fromkeys(name for m in measured for name in m.stages))
    labels = [m.label.replace("_attention", "").replace("head_dim=", "d").replace("causal=", "c=") for m in measured]
    width = max(14, *(len(x) + 2 for x in labels)) if labels else 14
    for title, table in (("wall seconds", lambda m: m.stages), ("CPU seconds", lambda m: m.cpu_stages)):
        print(f"\n{title} by stage (Tessera):")
        print(f"{'stage':<28}" + "".join(f"{x:>{width}}" for x in labels))
        for name in names:
            print(f"{name:<28}" + "".join(f"{table(m).get(name, 0.0):>{width}.3f}" for m in measured))
    print("\nCPU seconds by part (Tessera): the passes (building the Tile IR included), printing the PTX, ptxas")
    print(f"{'part':<28}" + "".join(f"{x:>{width}}" for x in labels))
    for part in ("passes", "print PTX", "ptxas"):
        print(f"{part:<28}" + "".join(f"{_part(m, part):>{width}.3f}" for m in measured))
    print("smem: ptxas' static shared memory plus the dynamic shared memory the kernel asks for (with 1023 bytes "
          "of alignment slack for Tessera's).")


if __name__ == "__main__":
    main()
