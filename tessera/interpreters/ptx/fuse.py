"""Fused straight-line blocks: a run of register-only instructions executed as one step.

A *block* is a run of two or more consecutive instructions that only compute on registers (integer, logic,
float, conversion, move, setp, selp: `FUSABLE`), with no branch target inside it (a label, a function start),
no special register, no condition code (carry chains) and nothing but the wgmma-register check installed on
them (`asynchrony.install`). No thread can stand inside a block (a control step or a label is at each of its
ends), so the scheduler runs a block for all the lanes at its first instruction as one step and moves their
pcs past it: the schedule, the step count and every result are those of the instructions one by one.

What a block saves is the per-instruction traffic: its instructions are decoded a second time against a
*scratch* register file of exactly the block's lanes (`Scratch`, one per lane count, shared by the blocks of a
program), so that each instruction runs on whole arrays (`sel` = every lane) instead of gathering and
scattering its lanes in the registers of the batch. A block gathers the registers it reads before writing them
(and those it writes only under a guard, so that lanes whose guard is false keep their bits) once, runs its
instructions in order (a guard is evaluated on the scratch predicates, as the instruction would), and scatters
every register it wrote once. The instructions are the decoders' own closures, so the bits are the same in
every lane, predicated or not, packed halves and approximate functions included.

A block runs instruction by instruction instead, with the unfused steps, whenever the fused run could differ in
what it reports: a register of the block belongs to a pending wgmma (the hazard is reported at the
instruction that touches it), any instruction raised (nothing was written back yet: the unfused run raises
the same error at the same instruction and thread), or the program has seen more distinct lane counts than
`MAX_LANE_COUNTS`. Accesses of wgmma registers are logged for `wgmma.fence` as the unfused steps log them.

`launch(..., fuse=False)` turns blocks off (each instruction its own step), for comparison.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import ALL, Operands, Step, decode, guard_reader
from tessera.interpreters.ptx.state import Machine
from tessera.interpreters.ptx.syntax import Address, Label, Negated, Reg, Special, Vector

FUSABLE = frozenset({
    "abs", "add", "and", "bfe", "bfi", "bfind", "brev", "clz", "cnot", "copysign", "cos", "cvt", "div", "ex2",
    "fma", "lg2", "lop3", "mad", "max", "min", "mov", "mul", "neg", "not", "or", "popc", "prmt", "rcp", "rem",
    "rsqrt", "sad", "selp", "setp", "shf", "shl", "shr", "sin", "sqrt", "sub", "tanh", "testp", "xor",
})
"""Opcodes whose decoders compute only on registers and immediates (no memory, no synchronisation, no
per-thread state other than registers)."""

MAX_LANE_COUNTS = 8
"""Distinct lane counts a program's blocks are decoded for (one scratch register file each); a block run
for yet another count runs unfused."""


def _names(operand, into: list[str], special: list) -> None:
    kind = type(operand)
    if kind is Reg:
        into.append(operand.name)
    elif kind is Vector:
        for e in operand.elements:
            _names(e, into, special)
    elif kind is Negated:
        _names(operand.operand, into, special)
    elif kind is Address:
        if type(operand.base) is Reg:
            into.append(operand.base.name)
    elif kind is Special:
        special.append(operand)


def _fusable(inst, decoded: Step, installed: Step) -> bool:
    """Whether `inst` may stand in a block: a register-only opcode, no carry, no special register, and no
    check installed on it but the wgmma-register one (which a block performs itself)."""
    if inst.opcode not in FUSABLE or "cc" in inst.modifiers or decoded.control or decoded.unit:
        return False
    if installed.run is not decoded.run and not installed.watched:
        return False
    special: list = []
    for operand in inst.operands:
        _names(operand, [], special)
    return not special


def _targets(entry) -> set[int]:
    """The instructions a thread can arrive at other than from the one before: branch targets and function
    starts."""
    found = {f.start for f in entry.functions.values()}

    def visit(operand):
        if type(operand) is Label:
            found.add(operand.index)
        elif type(operand) is Vector:
            for e in operand.elements:
                visit(e)

    for inst in entry.instructions:
        for operand in inst.operands:
            visit(operand)
    return found


class Scratch:
    """A register file of `lanes` lanes standing in for the machine in a block's second decoding: the
    registers are its own, every other attribute (symbol tables, the source for messages) the machine's."""

    def __init__(self, machine: Machine, lanes: int):
        self._machine = machine
        self.lanes = lanes
        self.lane_ids = np.arange(lanes, dtype=np.int64)
        self.register_types = machine.register_types
        self.registers = {name: np.zeros(lanes, array.dtype) for name, array in machine.registers.items()}

    def __getattr__(self, name):
        return getattr(self._machine, name)


class Block:
    """Instructions `start` .. `start + length - 1`, run as one step (see the module docstring)."""

    def __init__(self, m: Machine, start: int, installed: list[Step], watched: list[frozenset]):
        self.m, self.start, self.length = m, start, len(installed)
        self.insts = [s.inst for s in installed]
        self.watched = watched  # per instruction: the wgmma registers it names (logged for wgmma.fence)
        self.watched_all = frozenset().union(*watched)
        inputs, outputs, defined = [], [], set()
        for inst in self.insts:
            reads, writes, special = [], [], []
            for operand in inst.operands[1:]:
                _names(operand, reads, special)
            _names(inst.operands[0], writes, special)
            if inst.guard is not None:
                reads.append(inst.guard.predicate.name)
            for name in reads:
                if name not in defined and name not in inputs:
                    inputs.append(name)
            for name in writes:
                if name not in outputs:
                    outputs.append(name)
                if inst.guard is None:
                    defined.add(name)
                elif name not in defined and name not in inputs:
                    inputs.append(name)  # lanes whose guard is false keep their bits
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.decoded: dict[int, list] = {}

    def _decode(self, scratch: Scratch, ops: Operands) -> list:
        runs = []
        for inst in self.insts:
            runs.append((decode(ops, inst).run, guard_reader(ops, inst)))
        return runs

    def run(self, lanes: np.ndarray, programs: "Fusion") -> bool:
        """Run the block for `lanes` (every lane at its first instruction, ascending); False (nothing done)
        where it must run unfused."""
        m = self.m
        tracker = m.tracker
        if tracker is not None and tracker.pending and not self.watched_all.isdisjoint(tracker.pending):
            return False
        n = len(lanes)
        runs = self.decoded.get(n)
        if runs is None:
            scratch = programs.scratch(n)
            if scratch is None:
                return False
            runs = self.decoded[n] = self._decode(*scratch)
        registers = programs.scratch(n)[0].registers
        machine_registers = m.registers
        first = int(lanes[0])
        span = slice(first, first + n) if int(lanes[-1]) - first == n - 1 else None
        for name in self.inputs:
            if span is not None:
                registers[name][...] = machine_registers[name][span]
            else:
                np.take(machine_registers[name], lanes, out=registers[name])
        actives = []
        try:
            for run, guard in runs:
                if guard is None:
                    run(ALL)
                    actives.append(ALL)
                    continue
                active = np.flatnonzero(guard(ALL))
                if len(active) == n:
                    active = ALL
                if active is ALL or len(active):
                    run(active)
                actives.append(active)
        except Exception:  # noqa: BLE001 - nothing is written back: the unfused run reports it at its instruction
            return False
        for name in self.outputs:
            if span is not None:
                machine_registers[name][span] = registers[name]
            else:
                machine_registers[name][lanes] = registers[name]
        if self.watched_all and tracker is not None:
            every = n == m.lanes
            for inst, names, active in zip(self.insts, self.watched, actives):
                if names and (active is ALL or len(active)):
                    sel = (ALL if every else lanes) if active is ALL else lanes[active]
                    tracker.touch(inst, sel, names)
        return True


class Fusion:
    """The blocks of a decoded program (`at[pc]`: the block starting there, or None) and the scratch register
    files they share, one per lane count."""

    def __init__(self, m: Machine, entry, decoded: list[Step], installed: list[Step]):
        self.m = m
        self._scratch: dict[int, tuple[Scratch, Operands]] = {}
        targets = _targets(entry)
        self.at: list[Block | None] = [None] * len(installed)
        fusable = [_fusable(s.inst, d, i) for s, d, i in zip(installed, decoded, installed)]
        pc, end = 0, len(installed)
        while pc < end:
            stop = pc
            while stop < end and fusable[stop] and (stop == pc or stop not in targets):
                stop += 1
            if stop - pc >= 2:
                self.at[pc] = Block(m, pc, installed[pc:stop], [s.watched for s in installed[pc:stop]])
            pc = max(stop, pc + 1)

    def scratch(self, lanes: int) -> tuple[Scratch, Operands] | None:
        found = self._scratch.get(lanes)
        if found is None and len(self._scratch) < MAX_LANE_COUNTS:
            scratch = Scratch(self.m, lanes)
            found = self._scratch[lanes] = (scratch, Operands(scratch, {}))
        return found

    @property
    def blocks(self) -> list[Block]:
        return [b for b in self.at if b is not None]
