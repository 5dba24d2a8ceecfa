"""The flash forward's last P.V folded into its loop: the printer does it (tessera/ptx/fold_epilogue.py, the
default since compile17); this script makes the same edit by hand on the PTX printed without it
(`print_ptx(fold_epilogue=False)`, the form before compile17), the oracle the printer is held to, and measures what
ptxas, the SASS of the loop and the PTX executor make of it (docs/compile-time.md, "compile15", "compile17").

    python bench/fold_epilogue.py save BEFORE AFTER [--only NAME]   # PTX printed unfolded, and that PTX edited
    python bench/fold_epilogue.py compare [--only NAME]             # the printer's PTX = the hand edit, up to names
    python bench/ptx_compare.py BEFORE AFTER                       # ptxas CPU, registers, spills, diagnostics
    python bench/fold_epilogue.py trips BEFORE AFTER [--only NAME]  # a steady and a masked trip's SASS, per ptxas
    python bench/fold_epilogue.py check                            # the printer's fold in the PTX executor
    python bench/fold_epilogue.py compile [--repeat N]              # bench/compile.py's ratio to Triton, both ways

overlap-softmax's folded loop (the default) issues trip t's score mma, then trip t-1's P.V under `scf.if t != 0`;
the last trip's P.V runs after the loop, a second copy of its wgmmas (11 of the 30 at head_dim 128, 128 x 176).
The edit (and the printer) deletes that copy and runs the loop's own P.V once more:

    for:      A_pre(j)  (the K wait and the score mma S_j)
    pv:       first = j == 0, the V slot of j - 1; if !first { V wait, P.V(j-1) }
              wait_group 1; if j >= unmasked trips { if j == n: bra pv_exit; the masks }; the softmax, ...
              j += 1; if j < n: bra for
              bra pv_dummy                                   // j == n: trip n runs only the P.V
    for_end:  (the code after the loop, the epilogue's P.V gone)
    ...       ret
    pv_dummy: wgmma.fence; one score wgmma (scale-d 0, result unread, on Q's and the K ring's base descriptors,
              which the loop does not write); commit; bra pv
    pv_exit:  wait_group 0; V release of trip n-1; bra for_end

Each part is what measurement found necessary, under ptxas 12.9, 13.0 and 13.5:
- the score wgmma on the path into `pv`: without it (an empty group, or none) the registers of S reach the softmax
  both from a wgmma and from the previous trip's arithmetic, and ptxas serializes every wgmma (C7514/C7515); on
  the last trip's K descriptor instead of the ring's base it costs a steady trip a UMOV at d64 under 12.9, and that
  register need not outlive its last read;
- the exit test inside the masked trips' branch (trip n is always masked: j = n >= the unmasked trips), so a steady
  trip runs no instruction more; a test of its own after the P.V costs a steady trip a compare and a branch;
- `pv_dummy` and `pv_exit` after the kernel's `ret` (placed before the latch, ptxas lays the steady path around
  them with a compare more); `k0 = j * block_n`, read only by the masks, computed after `pv` (else ptxas cannot
  sink it into the masked branch past the join: two instructions more).

`compare` holds the printer to the hand edit: for every flash forward of bench/ptx_identity.py, the instruction
lines of the printed PTX equal those of the hand edit of the unfolded PTX once registers and labels are renamed in
order of first appearance (the printer's names for its exit test's predicate and its labels are its own), and every
other configuration prints as without the fold. `check` runs the printer's folded PTX against the unfolded one in
the PTX executor, bitwise, on one and several trips.

`trips` counts a steady and a masked trip with `tessera.sass.loop_trip`: a path through the SASS from the loop's
header back to it, the shortest that issues every MMA of a trip (then the masks' FSELs, for the masked one), in
the loop around the inner loop `pv` heads (`tessera.sass.trip_loops`), as bench/pipeline.py, bench/compile.py and
bench/ptx_compare.py count them. `compile` times, per Triton row of bench/compile.py and alternating in one run,
Tessera's compile printed unfolded, the same printed as by default (folded) and Triton's cold compile, best of N
each.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

import tessera
from ptx_identity import CONFIGS, PIPELINE, configuration_name, first_difference
from tessera.passes import DEFAULT_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

CANDIDATES = [(v, c) for v, c in CONFIGS if v == "flash_attention"]
"""The forwards whose loop overlap-softmax folds and whose masked trips branch (peel-masked-iterations) and whose
key count ptxas sees as uniform: the dense forward's configurations. The edit applies to the paged and varlen
forwards too, but their key counts are loaded from global memory: with the loop left from inside it on such a
count, ptxas guards the loop's shuffles against divergence (+30 to +35 SASS a steady trip under 12.9, 13.0 and
13.5), so the printer leaves them unfolded and `compare` expects them as printed without the fold."""


class NotFoldable(ValueError):
    """The PTX does not have the folded loop's shape this edit expects."""


def _index(lines: list[str], pattern: str, start: int = 0, stop: int | None = None) -> int:
    for i in range(start, len(lines) if stop is None else stop):
        if re.search(pattern, lines[i]):
            return i
    raise NotFoldable(f"no line matching {pattern!r}")


def _written(lines: list[str], register: str, start: int, stop: int) -> list[int]:
    """The lines in [start, stop) whose instruction writes `register` (its first operand)."""
    written = re.compile(rf"\s*@?[\w.!%]*\s*[a-z][\w.:]* {re.escape(register)},")
    return [i for i in range(start, stop) if written.match(lines[i])]


def _invariant(lines: list[str], register: str, head: int, end: int) -> str:
    """A descriptor register as valid after the loop as in it: `register` if the loop does not write it, else the
    loop-invariant base it is an offset of (`add.s64 register, base, offset`: a ring's descriptor)."""
    writes = _written(lines, register, head, end)
    if not writes:
        return register
    offset = re.fullmatch(rf"\s*add\.s64 {re.escape(register)}, (%rd\d+), %rd\d+;", lines[writes[0]])
    if offset is None or _written(lines, offset[1], head, end):
        raise NotFoldable(f"{register} is neither loop-invariant nor an offset of an invariant descriptor")
    return offset[1]


def fold_epilogue(ptx: str) -> str:
    """`ptx` (printed with comments) with the epilogue's P.V folded into the main loop (module docstring)."""
    lines = ptx.split("\n")
    heads = [i for i, line in enumerate(lines) if re.fullmatch(r"\$L__for\d+:", line)]
    if not heads:
        raise NotFoldable("no loop")
    head = max(heads, key=lambda i: sum("wgmma.mma_async.sync" in line for line in lines[i:i + 200]))
    label = lines[head][:-1]
    end_label = f"$L__for_end{int(label.removeprefix('$L__for')) + 1}"
    end = lines.index(end_label + ":")
    latch = end - 1
    increment = re.fullmatch(r"\s*setp\.lt\.s32 %p\d+, (%r\d+), (%r\d+);", lines[latch - 1])
    if increment is None or f"bra {label};" not in lines[latch]:
        raise NotFoldable("the loop does not end in its latch")
    j, n = increment.groups()
    first = _index(lines, r"%first_trip = arith\.cmpi", head, end)
    update_end = _index(lines, r"^\$L__if_end\d+:$", first, end)
    release_if = _index(lines, r"scf\.if %first_trip \{", update_end, end)
    release = lines[_index(lines, r"mbarrier\.arrive", release_if, end)].strip()
    unmasked = _index(lines, r"%unmasked = arith\.cmpi", update_end, end)
    masked_label = re.search(r"(\$L__else\d+)", lines[_index(lines, r"@!%p\d+ bra \$L__else\d+;", unmasked, end)])[1]
    masked = lines.index(masked_label + ":", unmasked, end)
    k0 = _index(lines, r"%k0\S* = arith\.muli", head, first) + 1
    if not lines[k0].strip().startswith("mul.lo.s32"):
        raise NotFoldable("k0 is not one mul.lo")
    score = next((line for line in lines[head:first] if "wgmma.mma_async.sync" in line
                  and re.search(r", 0, 1, 1(, 0, 0)?;$", line.rstrip())), None)  # the score mma's first: scale-d 0
    if score is None:
        raise NotFoldable("no score wgmma with scale-d 0")
    a, b = re.search(r"\}, (%rd\d+), (%rd\d+), 0, 1, 1", score).groups()
    invariant = f"}}, {_invariant(lines, a, head, end)}, {_invariant(lines, b, head, end)}, 0,"
    score = score.replace(f"}}, {a}, {b}, 0,", invariant)
    epilogue = _index(lines, r"%last_trip = arith\.subi", end)
    epilogue_end = _index(lines, r"mbarrier\.arrive", epilogue)

    out = lines[:k0] + lines[k0 + 1:first] + ["$L__pv:"] + lines[first:update_end + 1] + [lines[k0]]
    out += lines[update_end + 1:masked + 1] + [f"    setp.eq.s32 %p_fold, {j}, {n};", "    @%p_fold bra $L__pv_exit;"]
    out += lines[masked + 1:end] + ["    bra $L__pv_dummy;"] + lines[end:epilogue] + lines[epilogue_end + 1:]
    ret = max(i for i, line in enumerate(out) if line.strip() == "ret;")
    out[ret + 1:ret + 1] = ["$L__pv_dummy:", "    wgmma.fence.sync.aligned;", score,
                            "    wgmma.commit_group.sync.aligned;", "    bra $L__pv;",
                            "$L__pv_exit:", "    wgmma.wait_group.sync.aligned 0;", f"    {release}",
                            f"    bra {end_label};"]
    text = "\n".join(out)
    return re.sub(r"(\.reg \.pred %p<\d+>;)", r"\1\n    .reg .pred %p_fold;", text, count=1)


SELECT_PIPELINE = PIPELINE.replace("mask-by-mma,", "")
"""bench/ptx_identity.py's pipeline with the bounds masks selected under the masked branch: the form the hand
edit knows (its exit test opens that branch); mask-by-mma's loops, whose exit test follows the update's wait,
are checked by tests/test_ptx_fold_epilogue.py and the executor."""


def unfolded_ptx(variant: str, config: dict) -> tuple[str, str]:
    """One configuration's PTX through `SELECT_PIPELINE`, printed without the fold and with it."""
    module = getattr(tessera.kernels, variant)(**config)
    apply_pipeline(module, SELECT_PIPELINE)
    return (print_ptx(module, registers=allocated_registers, fold_epilogue=False),
            print_ptx(module, registers=allocated_registers))


def normalized(ptx: str) -> list[str]:
    """The instruction lines of `ptx` (no comments, no register declarations), registers and labels renamed in
    order of first appearance."""
    names: dict[str, str] = {}
    lines = []
    for line in ptx.splitlines():
        text = line.strip()
        if not text or text.startswith("//") or text.startswith(".reg"):
            continue
        lines.append(re.sub(r"%[A-Za-z_]\w*|\$L__\w+", lambda m: names.setdefault(m[0], f"%n{len(names)}"), line))
    return lines


def compare(only: str | None) -> int:
    """The printer's PTX against the hand edit of the unfolded PTX (module docstring)."""
    failures = 0
    for variant, config in CONFIGS:
        name = configuration_name(variant, config)
        if only and only not in name:
            continue
        before, printed = unfolded_ptx(variant, config)
        try:
            expected = fold_epilogue(before) if (variant, config) in CANDIDATES else before
        except NotFoldable as why:
            print(f"{name}: NOT EDITED ({why})")
            failures += 1
            continue
        ours, theirs = normalized(printed), normalized(expected)
        if ours == theirs:
            kind = "the hand edit" if expected is not before else "the unfolded PTX"
            print(f"{name}: equal to {kind} up to names ({len(ours)} lines)", flush=True)
            continue
        failures += 1
        line, want, have = first_difference(theirs, ours)
        print(f"{name}: DIFFERS at instruction line {line}: printed {have!r}, expected {want!r}")
    return 1 if failures else 0


def save(before: Path, after: Path, only: str | None) -> None:
    before.mkdir(parents=True, exist_ok=True)
    after.mkdir(parents=True, exist_ok=True)
    for variant, config in CANDIDATES:
        name = configuration_name(variant, config)
        if only and only not in name:
            continue
        ptx, _ = unfolded_ptx(variant, config)
        try:
            edited = fold_epilogue(ptx)
        except NotFoldable as why:
            print(f"{name}: not edited ({why})")
            continue
        (before / f"{name}.ptx").write_text(ptx)
        (after / f"{name}.ptx").write_text(edited)
        print(f"{name}: wgmma {ptx.count('wgmma.mma_async.sync')} -> {edited.count('wgmma.mma_async.sync')}")


def trips(before: Path, after: Path, only: str | None) -> None:
    from tessera.sass import disassemble, loop_trip, parse_sass
    from tessera.toolchain import compile_ptx, find_all_ptxas

    for path in sorted(before.glob("*.ptx")):
        if only and only not in path.stem:
            continue
        for tool in find_all_ptxas():
            counts = []
            for directory in (before, after):
                code = parse_sass(disassemble(compile_ptx((directory / path.name).read_text(), ptxas=tool.path).cubin))
                counts.append([Counter(i.mnemonic for i in loop_trip(code, masked)) for masked in (False, True)])
            row = []
            for kind, a, b in zip(("steady", "masked"), *counts):
                more, fewer = dict(b - a), dict(a - b)
                row.append(f"{kind} {sum(a.values())} -> {sum(b.values())} (+{more or '-'} -{fewer or '-'})")
            print(f"{path.stem} ptxas {tool.release}: " + "; ".join(row), flush=True)


def check() -> int:
    """The printer's folded PTX against the unfolded one in the PTX executor, bitwise, on one and several trips."""
    import tessera.interpreters.ptx.printed as printed
    from tessera.reference_attention import attention_operands

    printed_text = printed.ptx_text

    def unfolded_text(module):
        text, allocated = printed_text(module)
        return print_ptx(allocated, registers=allocated_registers, fold_epilogue=False), allocated

    rng = np.random.default_rng(0)
    failures = 0
    for head_dim, causal in [(d, c) for d in (64, 128) for c in (False, True)]:
        module = tessera.kernels.flash_attention(head_dim=head_dim, causal=causal)
        for seq_q, seq_k in [(64, 300), (130, 1), (100, 176), (200, 45)]:
            q, k, v = (a.astype(np.float32) for a in attention_operands(rng, seq_q, seq_k, head_dim, heads=1))
            outputs = []
            for text in (unfolded_text, printed_text):
                printed.ptx_text = text
                try:
                    outputs.append(tessera.interpret(module, q, k, v, level="ptx"))
                finally:
                    printed.ptx_text = printed_text
            same = np.array_equal(*outputs, equal_nan=True)
            failures += not same
            verdict = "bitwise equal" if same else "DIFFERENT"
            print(f"d{head_dim} causal={causal} {seq_q} x {seq_k}: {verdict}", flush=True)
    return 1 if failures else 0


def compile_ratios(repeat: int) -> int:
    """bench/compile.py's Tessera / Triton CPU ratio printed without the fold and with it, alternating in one run."""
    import functools

    import compile as bench
    import triton_attention

    if triton_attention.load() is None:
        print("Triton is not installed")
        return 1
    configs = [(v, c) for v, c in bench.CONFIGS if v == "flash_attention" and "block_n" not in c
               and c.get("head_dim") in (64, 128)]  # Triton's rows
    printer = bench.print_ptx
    for variant, config in configs:
        runs: dict[str, list] = {"unfolded": [], "folded": [], "Triton": []}
        for _ in range(max(1, repeat)):
            bench.print_ptx = functools.partial(printer, fold_epilogue=False)
            try:
                runs["unfolded"].append(bench.tessera_compile(variant, config, DEFAULT_PIPELINE))
            finally:
                bench.print_ptx = printer
            runs["folded"].append(bench.tessera_compile(variant, config, DEFAULT_PIPELINE))
            runs["Triton"].append(bench.triton_compile(config))
        best = {kind: min(measured, key=lambda m: m.cpu) for kind, measured in runs.items()}
        triton = best["Triton"].cpu
        print(f"{configuration_name(variant, config)}: Triton {triton:.2f} CPU s; " + "; ".join(
            f"{kind} {best[kind].cpu:.2f} = {best[kind].cpu / triton:.2f} (ptxas {best[kind].ptxas_cpu:.3f})"
            for kind in ("unfolded", "folded")), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("save", "compare", "trips", "check", "compile"))
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--only", help="only configurations whose name contains this")
    parser.add_argument("--repeat", type=int, default=3, help="compile: best of N")
    args = parser.parse_args()
    if args.mode == "check":
        return check()
    if args.mode == "compile":
        return compile_ratios(args.repeat)
    if args.mode == "compare":
        return compare(args.only)
    if args.before is None or args.after is None:
        parser.error(f"{args.mode} needs BEFORE and AFTER directories")
    (save if args.mode == "save" else trips)(args.before, args.after, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
