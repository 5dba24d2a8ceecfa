"""SASS, the machine code ptxas makes, read back: `disassemble(cubin)` runs `nvdisasm -c` (found by
`tessera.toolchain.find_nvdisasm`), `parse_sass` makes `SassInstruction`s of its text, `sass_opcode_counts(cubin)`
counts opcodes by full mnemonic (`HGMMA.64x64x16.F32.BF16`) and base opcode (`HGMMA`), and `sass_loops` /
`innermost_loop(disassembly)` find the loops (natural loops of the branch graph) and count their bodies, and
`loop_trip(disassembly)` the instructions of one trip of the main loop: a path from its header back to it.

cuobjdump is not used: `cuobjdump -sass` runs nvdisasm itself, so it adds nothing where nvdisasm is missing.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tessera.toolchain import ToolchainError, find_nvdisasm, run_tool


@dataclass(frozen=True)
class SassInstruction:
    """One SASS instruction: `mnemonic` is the opcode with its modifiers (`HGMMA.64x64x16.F32.BF16`),
    `opcode` the part before the first dot (`HGMMA`); `target` is a branch's target offset."""

    function: str
    offset: int
    mnemonic: str
    operands: str
    predicate: str | None = None
    target: int | None = None

    @property
    def opcode(self) -> str:
        return self.mnemonic.split(".", 1)[0]

    def __str__(self) -> str:
        predicate = f"@{self.predicate} " if self.predicate else ""
        return f"/*{self.offset:04x}*/ {predicate}{self.mnemonic} {self.operands}".rstrip()


def disassemble(cubin: bytes | str | os.PathLike, *, nvdisasm: str | None = None, timeout: float = 120.0) -> str:
    """The SASS of `cubin` (its bytes or its path) as `nvdisasm -c` prints it. Raises `ToolchainError` when
    no nvdisasm is found (install `nvidia-cuda-nvdisasm`, or the `ptx` extra) or it fails."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise ToolchainError(
            "nvdisasm not found: searched PATH, $CUDA_HOME/bin, $CUDA_PATH/bin and the nvidia-cuda-nvdisasm "
            "wheel (nvidia/cu13/bin); install it with `pip install nvidia-cuda-nvdisasm`, or from a Tessera "
            "checkout `pip install '.[ptx]'`"
        )
    with tempfile.TemporaryDirectory(prefix="tessera-nvdisasm-") as work:
        if isinstance(cubin, bytes):
            path = Path(work, "kernel.cubin")
            path.write_bytes(cubin)
        else:
            path = Path(cubin)
        completed = run_tool([tool, "-c", str(path)], timeout=timeout)
    if completed.returncode != 0:
        raise ToolchainError(f"nvdisasm failed on {path.name}: {(completed.stderr or completed.stdout).strip()}")
    return completed.stdout


_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_LABEL = re.compile(r"^\s*([.\w$]+):\s*$")
_INSTRUCTION = re.compile(
    r"^\s*/\*([0-9a-fA-F]+)\*/\s+(?:@(?P<pred>!?\w+)\s+)?(?P<mnemonic>[A-Z][\w.]*)\s*(?P<rest>.*)$"
)
_LABEL_TARGET = re.compile(r"`\(([^)]+)\)")
_ADDRESS_TARGET = re.compile(r"^(0x[0-9a-fA-F]+)\b")
_BRANCHES = ("BRA", "JMP")


def parse_sass(disassembly: str) -> list[SassInstruction]:
    """The instructions of nvdisasm's output, in address order per function, with branch targets resolved.

    Each function ends with `BRA` to itself followed by `NOP`s (ptxas' end-of-code padding); those are
    dropped, so counts and loops see only the kernel's own code."""
    rows: list[tuple[str, int, str | None, str, str, str | None]] = []
    labels: dict[tuple[str, str], int] = {}
    pending: list[str] = []
    function = ""
    for line in disassembly.splitlines():
        if section := _SECTION.match(line):
            function, pending = section[1], []
            continue
        if label := _LABEL.match(line):
            pending.append(label[1])
            continue
        if not (found := _INSTRUCTION.match(line)):
            continue
        offset = int(found[1], 16)
        for name in pending:
            labels[(function, name)] = offset
        pending = []
        rest = found["rest"].split(";", 1)[0].strip()
        target = _LABEL_TARGET.search(rest)
        rows.append((function, offset, found["pred"], found["mnemonic"], rest, target[1] if target else None))
    for name in pending:  # labels after the last instruction (a function's end)
        labels[(function, name)] = -1

    instructions = []
    for function, offset, predicate, mnemonic, operands, target_label in rows:
        target = None
        if mnemonic.split(".", 1)[0] in _BRANCHES:
            if target_label is not None:
                target = labels.get((function, target_label))
            elif address := _ADDRESS_TARGET.match(operands):
                target = int(address[1], 16)
        instructions.append(SassInstruction(function, offset, mnemonic, operands, predicate, target))
    return _drop_padding(instructions)


def _drop_padding(instructions: list[SassInstruction]) -> list[SassInstruction]:
    kept: list[SassInstruction] = []
    padding_in: str | None = None
    for ins in instructions:
        if padding_in == ins.function and ins.opcode == "NOP":
            continue
        padding_in = None
        if ins.opcode == "BRA" and ins.predicate is None and ins.target == ins.offset:
            padding_in = ins.function
            continue
        kept.append(ins)
    return kept


def opcode_counts(instructions: Iterable[SassInstruction]) -> Counter[str]:
    """Instructions counted by full mnemonic and by base opcode: four `HGMMA.64x64x16.F32.BF16` give
    counts["HGMMA.64x64x16.F32.BF16"] == counts["HGMMA"] == 4. An opcode without modifiers (`EXIT`) is
    counted once. Missing opcodes read as 0, so the counts do not sum to the instruction count."""
    counts: Counter[str] = Counter()
    for ins in instructions:
        counts[ins.mnemonic] += 1
        if ins.opcode != ins.mnemonic:
            counts[ins.opcode] += 1
    return counts


def sass_opcode_counts(cubin: bytes | str | os.PathLike, *, nvdisasm: str | None = None) -> Counter[str]:
    """SASS opcode counts of every function in `cubin` (bytes or path); see `opcode_counts`."""
    return opcode_counts(parse_sass(disassemble(cubin, nvdisasm=nvdisasm)))


@dataclass(frozen=True)
class SassLoop:
    """A natural loop of a function's SASS control-flow graph: `head` is the offset of its header (the target
    of its back edges), `instructions` its body in address order, blocks that ptxas placed out of line
    included. Static counts: each instruction once, however often it runs."""

    function: str
    head: int
    instructions: tuple[SassInstruction, ...]

    @property
    def opcode_counts(self) -> Counter[str]:
        return opcode_counts(self.instructions)

    @property
    def offsets(self) -> frozenset[int]:
        return frozenset(ins.offset for ins in self.instructions)

    @property
    def is_polling(self) -> bool:
        """Whether the loop only waits: every instruction is a barrier poll, a sleep or a branch (the
        `mbarrier.try_wait` retry loop is `SYNCS.PHASECHK.TRANS64.TRYWAIT` and a branch back)."""
        return all(ins.opcode in POLLING_OPCODES for ins in self.instructions)

    def contains(self, other: SassLoop) -> bool:
        return self is not other and self.function == other.function and other.offsets < self.offsets

    def skippable(self, keep: tuple[str, ...] = ("HGMMA", "QGMMA", "UTMALDG", "SYNCS")) -> tuple[SassInstruction, ...]:
        """The instructions a trip may branch over: those between a predicated forward branch and its target,
        both in the loop's in-line body (header to back edge), where the range holds no `keep` opcode (by
        default: register work without an MMA, a TMA copy or an mbarrier operation, as the masks
        peel-masked-iterations{branch=true} puts under a warp-uniform `scf.if`; not one thread's TMA issue).
        A trip that takes every such branch runs the rest (`len(self) - len(self.skippable())` instructions)."""
        code = self.instructions
        latch = max((i.offset for i in code if i.opcode in _BRANCHES and i.target == self.head), default=None)
        if latch is None:
            return ()
        skipped: dict[int, SassInstruction] = {}
        for branch in code:
            if not (branch.opcode in _BRANCHES and branch.predicate and branch.target is not None
                    and self.head < branch.offset < branch.target <= latch):
                continue
            inside = [i for i in code if branch.offset < i.offset < branch.target]
            if inside and not any(i.opcode in keep for i in inside):
                skipped.update((i.offset, i) for i in inside)
        return tuple(skipped[o] for o in sorted(skipped))

    def __len__(self) -> int:
        return len(self.instructions)


POLLING_OPCODES = frozenset({"SYNCS", "NANOSLEEP", "YIELD", "BRA", "NOP"})
_ENDS_THREAD = ("EXIT", "RET")


def sass_loops(disassembly: str | Sequence[SassInstruction]) -> list[SassLoop]:
    """Every natural loop in the disassembly (text or `parse_sass` output), one per header, ordered by
    function and header offset.

    Per function: basic blocks start at the entry, at branch targets and after branches, `EXIT` and `RET`;
    `BRA`/`JMP` go to their target, and also fall through when predicated; an unpredicated `EXIT`/`RET`
    ends the path. An edge to a block that dominates its source is a back edge; the loop is its header
    plus every block that reaches the back edge without passing the header."""
    instructions = parse_sass(disassembly) if isinstance(disassembly, str) else list(disassembly)
    by_function: dict[str, list[SassInstruction]] = {}
    for ins in instructions:
        by_function.setdefault(ins.function, []).append(ins)
    loops: list[SassLoop] = []
    for function, code in by_function.items():
        loops.extend(_natural_loops(function, sorted(code, key=lambda i: i.offset)))
    return loops


def _control_flow(code: list[SassInstruction]) -> tuple[list[int], dict[int, int], list[set[int]]]:
    """The basic blocks of one function's code (in address order): their first instructions' indices, the block
    of each instruction index, and each block's successors (see `sass_loops`)."""
    index = {ins.offset: n for n, ins in enumerate(code)}
    leaders = {0}
    for n, ins in enumerate(code):
        if ins.target in index:
            leaders.add(index[ins.target])
        if ins.opcode in _BRANCHES or ins.opcode in _ENDS_THREAD:
            leaders.add(n + 1)
    starts = sorted(leader for leader in leaders if leader < len(code))
    block_of = {}
    for b, first in enumerate(starts):
        for n in range(first, starts[b + 1] if b + 1 < len(starts) else len(code)):
            block_of[n] = b
    successors: list[set[int]] = []
    for b, first in enumerate(starts):
        last = (starts[b + 1] if b + 1 < len(starts) else len(code)) - 1
        successors.append({block_of[n] for n in _next_instructions(code, index, last)})
    return starts, block_of, successors


def _next_instructions(code: list[SassInstruction], index: dict[int, int], n: int) -> list[int]:
    """The indices of the instructions that may run after `code[n]`: a branch's target, and the next one unless
    an unpredicated branch to a known target, `EXIT` or `RET` ends the path there."""
    ins, following = code[n], []
    jumps = ins.opcode in _BRANCHES and ins.target in index
    if jumps:
        following.append(index[ins.target])
    if (ins.predicate is not None or not (jumps or ins.opcode in _ENDS_THREAD)) and n + 1 < len(code):
        following.append(n + 1)
    return following


def _natural_loops(function: str, code: list[SassInstruction]) -> list[SassLoop]:
    if not code:
        return []
    starts, block_of, successors = _control_flow(code)

    reachable, stack = {0}, [0]
    while stack:
        for s in successors[stack.pop()]:
            if s not in reachable:
                reachable.add(s)
                stack.append(s)
    predecessors: dict[int, set[int]] = {b: set() for b in reachable}
    for b in reachable:
        for s in successors[b]:
            predecessors[s].add(b)
    dominators = {b: set(reachable) for b in reachable}
    dominators[0] = {0}
    changed = True
    while changed:
        changed = False
        for b in sorted(reachable - {0}):
            new = {b} | set.intersection(*(dominators[p] for p in predecessors[b]))
            if new != dominators[b]:
                dominators[b], changed = new, True

    bodies: dict[int, set[int]] = {}
    for b in sorted(reachable):
        for head in successors[b]:
            if head in dominators[b]:
                body = bodies.setdefault(head, {head})
                stack = [b] if b not in body else []
                body.add(b)
                while stack:
                    for p in predecessors[stack.pop()]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
    return [
        SassLoop(
            function,
            code[starts[head]].offset,
            tuple(ins for n, ins in enumerate(code) if block_of[n] in body),
        )
        for head, body in sorted(bodies.items())
    ]


def innermost_loop(disassembly: str | Sequence[SassInstruction], containing: str | None = None) -> SassLoop | None:
    """The kernel's main loop, found by a heuristic over `sass_loops`; None when there is none.

    - With `containing` (a base opcode such as "HGMMA", or a full mnemonic): the smallest loop holding
      such an instruction, i.e. the innermost loop around it.
    - Without: polling loops (`SassLoop.is_polling`: the retry loops of mbarrier waits, which sit inside
      the loops that wait) are set aside; of the remaining loops, those that contain no other remaining
      loop are innermost, and the one with the most instructions is returned.

    The body is the loop's whole natural loop, so it includes the out-of-line blocks ptxas moved after
    `EXIT` (a wait's retry path) and any nested polling loop."""
    loops = sass_loops(disassembly)
    if containing is not None:
        holding = [loop for loop in loops if any(containing in (i.mnemonic, i.opcode) for i in loop.instructions)]
        return min(holding, key=len, default=None)
    working = [loop for loop in loops if not loop.is_polling]
    innermost = [loop for loop in working if not any(loop.contains(other) for other in working)]
    return max(innermost, key=len, default=None)


MMA_OPCODES = ("HGMMA", "QGMMA")
"""The SASS of `wgmma.mma_async`: HGMMA for 16-bit operands, QGMMA for e4m3/e5m2."""
_ISSUES = ("UTMA", "SYNCS.ARRIVE")


def trip_loops(disassembly: str | Sequence[SassInstruction]) -> list[SassLoop]:
    """The loops in which `loop_trip` counts trips, smallest first: each innermost loop holding an MMA
    (`MMA_OPCODES`), replaced by the loop around it while that loop's back edge leaves from inside it.

    Such an inner loop is not one of the program's loops but a second entry into the enclosing loop's body: the
    PTX printer's fold (tessera/ptx/fold_epilogue.py) re-enters the flash forward's loop at its P.V, so the
    smallest loop holding HGMMA is headed by that re-entry label and holds none of the score mma. A loop nested
    in the program (a K loop in a tile loop) keeps its own back edge, and the outer loop's leaves from outside it."""
    code = parse_sass(disassembly) if isinstance(disassembly, str) else list(disassembly)
    holding = [loop for loop in sass_loops(code) if any(i.opcode in MMA_OPCODES for i in loop.instructions)]
    found: list[SassLoop] = []
    for loop in holding:
        if any(loop.contains(other) for other in holding):
            continue
        while True:
            around = min((o for o in holding if o.contains(loop)), key=len, default=None)
            if around is None or not _back_edge_sources(around, code) & loop.offsets:
                break
            loop = around
        if loop not in found:
            found.append(loop)
    return sorted(found, key=len)


def _lone_mmas(ordered: Sequence[SassInstruction]) -> set[int]:
    """The indices in `ordered` (one function's SASS by offset) of the MMAs of a wgmma group that adds to the
    previous group's accumulator: a group (the MMAs up to one that ends it, `gsb0`) right after the previous
    group ended, every MMA with the destination registers of the previous group's last. In the flash loop,
    mask-by-mma's bias mma (a group of one) and mask-causal-by-mma's four, which the masked trips add to the
    score group's result."""
    lone, group, previous = set(), [], None
    for n, ins in enumerate(ordered):
        if ins.opcode not in MMA_OPCODES:
            continue
        accumulator = ins.operands.split(",", 1)[0].strip()
        group.append((n, accumulator))
        if "gsb0" in ins.operands:
            if all(a == previous for _, a in group):
                lone.update(k for k, _ in group)
            group, previous = [], accumulator
    return lone


def _back_edge_sources(loop: SassLoop, code: Sequence[SassInstruction]) -> set[int]:
    """The offsets of the loop's instructions that may run right before its header."""
    ordered = sorted((i for i in code if i.function == loop.function), key=lambda i: i.offset)
    index = {ins.offset: n for n, ins in enumerate(ordered)}
    return {ins.offset for ins in loop.instructions
            if any(ordered[k].offset == loop.head for k in _next_instructions(ordered, index, index[ins.offset]))}


def loop_trip(disassembly: str | Sequence[SassInstruction], masked: bool = False,
              loop: SassLoop | None = None) -> tuple[SassInstruction, ...]:
    """The instructions of one trip of the kernel's main loop (`loop`, else the smallest of `trip_loops`), in
    the order they issue; () without such a loop.

    A trip is a path through the loop's SASS from its header to a branch (or fall-through) back to it that
    runs no instruction twice: so it takes no back edge of a loop inside it (a wait's retry loop, the fold's
    re-entry), and a wait's out-of-line retry, longer than the path past it, is in none of the trips below:
    - the steady trip (`masked=False`) is the shortest of those that issue the most MMAs (`MMA_OPCODES`), a group
      of one that adds to the previous group's result not counted (`_lone_mmas`), then the most TMA copies and
      mbarrier arrivals (`UTMA*`, `SYNCS.ARRIVE*`: one elected thread's issue, which its warp runs), then the most
      `MUFU` (the softmax's exponentials): the one that branches over the masks (the FSELs that
      peel-masked-iterations{branch=true} puts under a warp-uniform branch, or mask-by-mma's bias mma), over the
      fold's exit and over every wait's out-of-line retry;
    - the masked trip is the shortest of those that issue the most MMAs (a lone one too), then TMA copies and
      arrivals, then `FSEL`, then `MUFU`: the one that runs the masks; where that trip adds a lone group (the
      tensor core adds the masks), the fewest `FSEL` instead of the most: mask-causal-by-mma keeps the select
      for blocks whose first row sees no key, and a trip runs one or the other.
    In a loop without such branches both are the loop's in-line body. Static counts: each instruction once."""
    code = parse_sass(disassembly) if isinstance(disassembly, str) else list(disassembly)
    if loop is None:
        loop = next(iter(trip_loops(code)), None)
        if loop is None:
            return ()
    ordered = sorted((i for i in code if i.function == loop.function), key=lambda i: i.offset)
    index = {ins.offset: n for n, ins in enumerate(ordered)}
    inside = {index[offset] for offset in loop.offsets}
    head = index[loop.head]
    lone = _lone_mmas(ordered)
    path = _best_trip(ordered, index, inside, head, lone, masked, selects=1)
    if masked and any(index[ins.offset] in lone for ins in path):
        path = _best_trip(ordered, index, inside, head, lone, masked, selects=-1)
    return path


def _best_trip(ordered: Sequence[SassInstruction], index: dict[int, int], inside: set[int], head: int,
               lone: set[int], masked: bool, selects: int) -> tuple[SassInstruction, ...]:
    """`loop_trip`'s path from `head` back to it with the greatest weight (`selects` = 1: the most FSEL on a
    masked trip; -1, the fewest)."""

    def weight(n: int) -> tuple[int, ...]:
        ins = ordered[n]
        mma, mufu = int(ins.opcode in MMA_OPCODES), int(ins.opcode == "MUFU")
        issue = int(ins.mnemonic.startswith(_ISSUES))
        if masked:
            return (mma, issue, selects * int(ins.opcode == "FSEL"), mufu, -1)
        return (mma and n not in lone, issue, mufu, -1)

    def following(n: int) -> list[int]:
        return [k for k in _next_instructions(ordered, index, n) if k in inside]

    # Depth-first from the header: an edge to an instruction on the stack is a back edge (those to the header end
    # a trip); the other edges are acyclic, and their postorder puts every successor before its predecessors, so
    # `best[n]` (the best path from n to the header and its next instruction) is known for them in that order.
    on_stack, done, postorder, back = {head}, set(), [], set()
    stack = [(head, iter(following(head)))]
    while stack:
        n, successors = stack[-1]
        k = next(successors, None)
        if k is None:
            stack.pop()
            on_stack.discard(n)
            done.add(n)
            postorder.append(n)
        elif k in on_stack:
            back.add((n, k))
        elif k not in done:
            on_stack.add(k)
            stack.append((k, iter(following(k))))
    best: dict[int, tuple[tuple[int, ...], int | None]] = {}
    for n in postorder:
        own = weight(n)
        options = [(own, None)] if head in following(n) else []
        options += [(tuple(a + b for a, b in zip(own, best[k][0])), k)
                    for k in following(n) if (n, k) not in back and k in best]
        if options:
            best[n] = max(options, key=lambda option: option[0])
    path, n = [], head if head in best else None
    while n is not None:
        path.append(ordered[n])
        n = best[n][1]
    return tuple(path)
