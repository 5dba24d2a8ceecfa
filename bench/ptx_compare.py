"""Compare two directories of saved PTX (`bench/ptx_identity.py save`) under every ptxas found: what a change to
the emitted PTX does to ptxas' time and to the SASS, configuration by configuration.

    python bench/ptx_identity.py save BEFORE      # on the base
    python bench/ptx_identity.py save AFTER       # on the change
    python bench/ptx_compare.py BEFORE AFTER [--only NAME] [--repeat N]

For each configuration whose PTX differs (instruction lines, comments ignored) and each ptxas
(`toolchain.find_all_ptxas`: the system's and the wheels', CUDA 12 and 13), a row before -> after of: the PTX's
instruction lines and its `wgmma.mma_async` instructions, ptxas' CPU seconds (its process's, best of N,
the two files alternating so that a busy machine slows both alike), registers, spill bytes, the whole SASS's
instructions, the main loop's (a steady trip / a masked trip: `tessera.sass.loop_trip`, paths through the SASS
from the loop's header back to it, as bench/compile.py and bench/pipeline.py count them) and ptxas' diagnostics.
A row is flagged where a trip grows, anything spills or ptxas says anything: what docs/performance.md asks of a
PTX change ("Compile time").

ptxas' time is not proportional to lines: on the flash d128 kernel (ptxas 13.0) taking out 8 of its 32
wgmma instructions saved 11-15% of it, 381 lines of softmax arithmetic 11%, 64 `mul` lines nothing
measurable (docs/performance.md), hence the wgmma column.
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

from ptx_identity import instruction_lines
from tessera.toolchain import compile_ptx, find_all_ptxas
from tessera.sass import disassemble, loop_trip, parse_sass


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(ptx: str, ptxas: str) -> dict:
    """One assembly of `ptx` by `ptxas`: its CPU seconds, resources, SASS counts and diagnostics."""
    start = _children_cpu()
    result = compile_ptx(ptx, ptxas=ptxas)
    seconds = _children_cpu() - start
    entry = result.entry()
    code = parse_sass(disassemble(result.cubin))
    steady, masked = (loop_trip(code, masked=masked) for masked in (False, True))
    return dict(cpu=seconds, registers=entry.registers, spill=entry.spill_store_bytes, sass=len(code),
                loop=(len(steady), len(masked)) if steady else None,
                diagnostics=[str(d) for d in result.log.diagnostics])


def compare(before: str, after: str, ptxas: str, repeat: int) -> tuple[dict, dict]:
    """`measure` of both texts, `repeat` times alternating; ptxas CPU the least of each."""
    runs = [[], []]
    for _ in range(max(1, repeat)):
        for runs_of, text in zip(runs, (before, after)):
            runs_of.append(measure(text, ptxas))
    best = []
    for runs_of in runs:
        row = dict(runs_of[0])
        row["cpu"] = min(r["cpu"] for r in runs_of)
        best.append(row)
    return best[0], best[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--only", help="only configurations whose name contains this")
    parser.add_argument("--repeat", type=int, default=3, help="assemblies of each file per ptxas (best of N)")
    args = parser.parse_args()
    tools = find_all_ptxas()
    if not tools:
        print("no ptxas: pip install nvidia-cuda-nvcc, or pip install '.[ptx]' in a checkout")
        return 1
    flagged = 0
    print("ptxas: " + ", ".join(t.release for t in tools))
    for path in sorted(args.before.glob("*.ptx")):
        if args.only and args.only not in path.stem:
            continue
        other = args.after / path.name
        if not other.is_file():
            print(f"{path.stem}: not in {args.after}")
            continue
        before, after = path.read_text(), other.read_text()
        lines = [instruction_lines(text) for text in (before, after)]
        if lines[0] == lines[1]:
            print(f"{path.stem}: same instructions")
            continue
        wgmma = [sum("wgmma.mma_async" in line for line in text) for text in lines]
        for tool in tools:
            a, b = compare(before, after, tool.path, args.repeat)
            bad = a["loop"] is not None and (b["loop"] is None or b["loop"][1] > a["loop"][1] or b["loop"][0] > a["loop"][0])
            bad = bad or b["spill"] > 0 or bool(b["diagnostics"])
            flagged += bad
            print(f"{path.stem} ptxas {tool.release}: lines {len(lines[0])} -> {len(lines[1])}, wgmma {wgmma[0]} -> "
                  f"{wgmma[1]}, ptxas CPU {a['cpu']:.3f} -> {b['cpu']:.3f} s, regs {a['registers']} -> "
                  f"{b['registers']}, spill {b['spill']}, SASS {a['sass']} -> {b['sass']}, loop {a['loop']} -> "
                  f"{b['loop']}{', ' + '; '.join(b['diagnostics']) if b['diagnostics'] else ''}"
                  f"{'  <-- CHECK' if bad else ''}", flush=True)
    print(f"{flagged} rows flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
