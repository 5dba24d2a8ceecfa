"""Fused straight-line blocks: a run of register-only instructions executed as one step.

A *block* is a run of `MIN_LENGTH` or more consecutive instructions that only compute on registers (integer, logic,
float, conversion, move, setp, selp: `FUSABLE`), with no branch target inside it (a label, a function start),
no special register, no condition code (carry chains) and nothing but the wgmma-register check installed on
them (`async_checks.install`). No thread can stand inside a block (a control step or a label is at each of its
ends), so the scheduler runs a block for all the lanes at its first instruction as one step and moves their
pcs past it: the schedule, the step count and every result are those of the instructions one by one.

What a block saves is the per-instruction traffic (`Block`): it gathers the registers it reads before writing
them (and those it writes only under a guard, so that lanes whose guard is false keep their bits) once, for the
lanes that run it, runs its instructions in single assignment on rows of [versions, lanes] arrays, with the
independent instructions of one form (the 64 `fma` of a softmax row block) grouped into one call over
[members x lanes], and scatters the last version of every register it wrote once. Each group runs the
decoder's own closure, decoded a second time against the group's arrays (`Scratch`) for every lane count, so
the bits are the same in every lane, predicated or not, packed halves and approximate functions included.

A block runs instruction by instruction instead, with the unfused steps, whenever the fused run could differ in
what it reports: a register of the block belongs to a pending wgmma (the hazard is reported at the
instruction that touches it), any instruction raised (nothing was written back yet: the unfused run raises
the same error at the same instruction and thread), or the program has seen more distinct lane counts than
`MAX_LANE_COUNTS`. Accesses of wgmma registers are logged for `wgmma.fence` as the unfused steps log them.

`launch(..., fuse=False)` turns blocks off (each instruction its own step), for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.decode import ALL, Operands, Step, decode
from tessera.interpreters.ptx.state import Machine
from tessera.interpreters.ptx.fuse_transfers import LaneRuns, RowGather, staging_rows
from tessera.interpreters.ranges import as_slice
from tessera.interpreters.ptx.syntax import Address, Instruction, Label, Negated, Reg, Special, Vector
from tessera.interpreters.truth import all_set

FUSABLE = frozenset({
    "abs", "add", "and", "bfe", "bfi", "bfind", "brev", "clz", "cnot", "copysign", "cos", "cvt", "div", "ex2",
    "fma", "lg2", "lop3", "mad", "max", "min", "mov", "mul", "neg", "not", "or", "popc", "prmt", "rcp", "rem",
    "rsqrt", "sad", "selp", "setp", "shf", "shl", "shr", "sin", "sqrt", "sub", "tanh", "testp", "xor",
})
"""Opcodes whose decoders compute only on registers and immediates (no memory, no synchronisation, no
per-thread state other than registers)."""

MIN_LENGTH = 4
"""Shorter runs of register instructions stay single steps (a block's gathers and scatters would cost what
it saves)."""

HOT = 1
"""A block runs unfused the first HOT times it is reached (code that runs once does not repay the
planning); a program's decoded blocks are kept across launches with it."""

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
    """The register file a group's canonical instruction is decoded against: `registers` (placeholder name ->
    flat array of the group's lanes) and their types are its own, every other attribute (symbol tables, the
    source for messages) the machine's."""

    def __init__(self, machine: Machine, lanes: int, registers: dict, types: dict):
        self._machine = machine
        self.lanes = lanes
        self.lane_ids = np.arange(lanes, dtype=np.int64)
        self.registers, self.register_types = registers, types

    def __getattr__(self, name):
        return getattr(self._machine, name)


@dataclass
class _Op:
    """One instruction of a block in single assignment: the versions it reads (`sources`, one per register
    operand in order, with its placeholder), writes (`dests`) and, under a guard, the versions its
    destinations had before (kept where the guard is false)."""

    inst: Instruction
    canonical: Instruction
    sources: list[tuple[str, int]]
    dests: list[tuple[str, int]]
    guard: tuple[int, bool] | None
    old: list[int]
    level: int
    key: tuple


def _canonical(operand, prefix: str, taken: list, versions):
    """`operand` with each register replaced by a placeholder `%<prefix><j>`; `taken` receives (placeholder,
    version) in order (`versions(name)` gives the version a register operand stands for)."""
    kind = type(operand)
    if kind is Reg:
        placeholder = f"%{prefix}{len(taken)}"
        taken.append((placeholder, versions(operand.name)))
        return Reg(placeholder)
    if kind is Vector:
        return Vector(tuple(_canonical(e, prefix, taken, versions) for e in operand.elements))
    if kind is Negated:
        return Negated(_canonical(operand.operand, prefix, taken, versions))
    return operand


def _shape(operand):
    """What of an operand a group's members must share: everything but the registers' names."""
    kind = type(operand)
    if kind is Reg:
        return "reg"
    if kind is Vector:
        return tuple(_shape(e) for e in operand.elements)
    if kind is Negated:
        return ("not", _shape(operand.operand))
    return operand


class Block:
    """Instructions `start` .. `start + length - 1`, run as one step (see the module docstring).

    Planned once: every register write gets a new *version* (single assignment within the block), so only
    true dependences order instructions; an instruction's *level* is one more than the levels of the versions
    it reads (versions read from the machine are level 0). Unguarded instructions of one level with the same
    opcode, modifiers, immediates and register types form a *group* that runs as one call of the decoder's
    closure over the members' lanes side by side (flat arrays of members x lanes); a guarded instruction is a
    group of its own. Each version is a row of one [versions, lanes] array per storage type; a group's
    destinations take consecutive rows, so that a group reading them in the same order reads a view, and a
    group's members are put in the order that reads the most of its operands so (`_view_order`)."""

    def __init__(self, m: Machine, start: int, installed: list[Step], watched: list[frozenset], lane_runs: LaneRuns):
        self.m, self.start, self.length = m, start, len(installed)
        self.lane_runs = lane_runs  # shared by the program's blocks
        self.insts = [s.inst for s in installed]
        self.watched = watched  # per instruction: the wgmma registers it names (logged for wgmma.fence)
        self.watched_all = frozenset().union(*watched)
        # where no instruction naming them has a guard, the block's accesses to wgmma registers as one touch: the
        # registers, and the line of each one's last access (`WgmmaTracking.touch_block`)
        self.touches = None if any(names and s.inst.guard is not None for s, names in zip(installed, watched)) else \
            (self.watched_all, {name: s.inst.line for s, names in zip(installed, watched) for name in names})
        self.runs = 0  # times the block was reached: planned once it is hot (HOT)
        self.groups: list[list[_Op]] | None = None

    def _analyse(self) -> None:
        """Versions, levels, groups and rows (see the class docstring)."""
        m = self.m
        self.version_names: list[str] = []
        level_of: list[int] = []
        current: dict[str, int] = {}
        inputs: list[tuple[str, int]] = []

        def read(name: str) -> int:
            if name not in current:
                current[name] = len(self.version_names)
                self.version_names.append(name)
                level_of.append(0)
                inputs.append((name, current[name]))
            return current[name]

        ops: list[_Op] = []
        for inst in self.insts:
            sources: list[tuple[str, int]] = []
            operands = [None] + [_canonical(o, "s", sources, read) for o in inst.operands[1:]]
            guard = (read(inst.guard.predicate.name), inst.guard.negated) if inst.guard is not None else None
            written: list[str] = []
            _names(inst.operands[0], written, [])
            old = [read(name) for name in written] if guard is not None else []
            reads = [v for _, v in sources] + ([guard[0]] if guard else []) + old
            level = 1 + max((level_of[v] for v in reads), default=0)
            dests: list[tuple[str, int]] = []

            def fresh(name: str) -> int:
                current[name] = len(self.version_names)
                self.version_names.append(name)
                level_of.append(level)
                return current[name]

            operands[0] = _canonical(inst.operands[0], "d", dests, fresh)
            canonical = Instruction(inst.opcode, inst.modifiers, tuple(operands), None, inst.line)
            types = tuple(m.register_types[self.version_names[v]].name for _, v in sources + dests)
            key = (level, inst.opcode, inst.modifiers, tuple(_shape(o) for o in inst.operands), types) \
                if guard is None else (level, len(ops))
            ops.append(_Op(inst, canonical, sources, dests, guard, old, level, key))
        groups: dict[tuple, list[_Op]] = {}
        for op in ops:
            groups.setdefault(op.key, []).append(op)
        position = {id(op): i for i, op in enumerate(ops)}
        self.groups = sorted(groups.values(), key=lambda members: (members[0].level, position[id(members[0])]))
        # rows: per storage type, inputs first, then each group's destinations, member after member
        self.row: dict[int, int] = {}
        types = m.register_types
        self.storage_of = [types[name].storage for name in self.version_names]
        counts: dict[np.dtype, int] = {}

        def place(version: int) -> None:
            dtype = self.storage_of[version]
            self.row[version] = counts.get(dtype, 0)
            counts[dtype] = self.row[version] + 1

        home = m.register_home
        inputs.sort(key=lambda input_: (id(home[input_[0]][0]), home[input_[0]][1]))
        for _, version in inputs:
            place(version)
        for members in self.groups:
            members[:] = _view_order(members, self.row)
            for j in range(len(members[0].dests)):
                for op in members:
                    place(op.dests[j][1])
        self.rows_per_type = counts
        self.inputs = self._transfers(inputs)
        read_only = set(inputs)
        self.outputs = self._transfers([(name, v) for name, v in current.items() if (name, v) not in read_only])
        self.plans: dict[int, tuple] = {}

    def _transfers(self, versions: list[tuple[str, int]]) -> list[tuple]:
        """The registers `versions` name, grouped by the array that holds them in the machine (`register_home`):
        (that array, its axis of registers, their indices there, the storage type, their rows here); indices
        and rows that are consecutive are slices (a wgmma block's accumulators, a block's outputs: views, not
        gathers)."""
        grouped: dict[int, tuple] = {}
        for name, v in versions:
            array, index, axis = self.m.register_home[name]
            entry = grouped.setdefault(id(array), (array, axis, [], self.storage_of[v], []))
            entry[2].append(index)
            entry[4].append(self.row[v])
        return [(array, axis, as_slice(indices), dtype, as_slice(rows))
                for array, axis, indices, dtype, rows in grouped.values()]

    def _operand_array(self, files: dict, versions: list[int], n: int):
        """(the flat [members x lanes] array of one operand position, None) where it is a view of consecutive
        rows, else (an array of its own, (the rows' array, the rows)) to gather into before each run (`RowGather`)."""
        dtype = self.storage_of[versions[0]]
        rows = np.array([self.row[v] for v in versions], np.int64)
        k = len(rows)
        if k == 1 or all_set(np.diff(rows) == 1):
            return files[dtype][rows[0]:rows[0] + k].reshape(-1), None
        return np.empty(k * n, dtype), (files[dtype], rows)

    def _plan(self, n: int) -> tuple:
        """The version files for `n` lanes, per group its decoded closure with the gathers it needs, and per
        output its staging rows (`fuse_transfers.staging_rows`)."""
        files = {dtype: np.zeros((count, n), dtype) for dtype, count in self.rows_per_type.items()}
        staging = [staging_rows(files[dtype][rows], n) if axis == 1 else None
                   for _, axis, _, dtype, rows in self.outputs]
        steps = []
        for members in self.groups:
            first = members[0]
            registers, types, gathers = {}, {}, []
            for j, (placeholder, _) in enumerate(first.sources + first.dests):
                versions = [(op.sources + op.dests)[j][1] for op in members]
                array, gather = self._operand_array(files, versions, n)
                if gather is not None and j >= len(first.sources):
                    raise AssertionError("a group's destinations take consecutive rows")
                if gather is not None:
                    gathers.append(RowGather(*gather, array.reshape(len(members), n)))
                registers[placeholder] = array
                types[placeholder] = self.m.register_types[self.version_names[versions[0]]]
            scratch = Scratch(self.m, len(members) * n, registers, types)
            run = decode(Operands(scratch, {}), first.canonical).run
            guard = None
            if first.guard is not None:
                version, negated = first.guard
                predicate = files[np.dtype(bool)][self.row[version]]
                keep = [(files[self.storage_of[d]][self.row[d]], files[self.storage_of[o]][self.row[o]])
                        for (_, d), o in zip(first.dests, first.old)]
                guard = (predicate, negated, keep)
            steps.append((run, gathers, guard, [op.inst for op in members]))
        return files, steps, staging

    def run(self, lanes: np.ndarray) -> bool:
        """Run the block for `lanes` (every lane at its first instruction, ascending); False (nothing done)
        where it must run unfused."""
        m = self.m
        tracker = m.tracker
        if tracker is not None and tracker.pending and not self.watched_all.isdisjoint(tracker.pending):
            return False
        n = len(lanes)
        self.runs += 1
        if self.runs <= HOT:
            return False
        if self.groups is None:
            self._analyse()
        plan = self.plans.get(n)
        if plan is None:
            if len(self.plans) >= MAX_LANE_COUNTS:
                return False
            plan = self.plans[n] = self._plan(n)
        files, steps, staging = plan
        where = self.lane_runs.of(lanes)
        for array, axis, indices, dtype, rows in self.inputs:
            into = files[dtype][rows]
            where.gather(into, array, axis, indices)
            if type(rows) is not slice:
                files[dtype][rows] = into
        actives = {}
        try:
            for run, gathers, guard, insts in steps:
                for gather in gathers:
                    gather.run()
                if guard is None:
                    run(ALL)
                    continue
                predicate, negated, keep = guard
                for new, old in keep:
                    new[...] = old
                active = np.flatnonzero(~predicate if negated else predicate)
                if len(active) == n:
                    active = ALL
                if active is ALL or len(active):
                    run(active)
                actives[id(insts[0])] = active
        except Exception:  # noqa: BLE001 - nothing is written back: the unfused run reports it at its instruction
            return False
        for (array, axis, indices, dtype, rows), stage in zip(self.outputs, staging):
            values = files[dtype][rows]
            if stage is not None:
                stage[...] = values
                values = stage
            where.scatter(array, axis, indices, values)
        if self.watched_all and tracker is not None and self.touches is not None:
            tracker.touch_block(ALL if n == m.lanes else lanes, *self.touches)
        elif self.watched_all and tracker is not None:
            every = n == m.lanes
            for inst, names in zip(self.insts, self.watched):
                active = actives.get(id(inst), ALL)
                if names and (active is ALL or len(active)):
                    sel = (ALL if every else lanes) if active is ALL else lanes[active]
                    tracker.touch(inst, sel, names)
        return True


def _view_order(members: list[_Op], row: dict[int, int]) -> list[_Op]:
    """A group's members (independent: any order runs the same) in the order that leaves the fewest of its source
    operands to gather before each run (`Block._operand_array`): as they are, or sorted by the rows of one
    source operand (all placed: `row`), whichever makes more operands consecutive rows (a reduction tree's
    sums read the pairs their producers wrote in another order)."""
    if len(members) < 2:
        return members

    def gathers(order: list[_Op]) -> int:
        return sum(type(as_slice([row[op.sources[j][1]] for op in order])) is not slice
                   for j in range(len(order[0].sources)))

    best, fewest = members, gathers(members)
    for j in range(len(members[0].sources)):
        order = sorted(members, key=lambda op: row[op.sources[j][1]])
        count = gathers(order)
        if count < fewest:
            best, fewest = order, count
    return best


class Fusion:
    """The blocks of a decoded program: `at[pc]` is the block starting at instruction `pc`, or None. `decoded`
    are the program's steps as decoded, `installed` as the scheduler runs them (`async_checks.install`)."""

    def __init__(self, m: Machine, entry, decoded: list[Step], installed: list[Step]):
        self.m = m
        targets = _targets(entry)
        self.at: list[Block | None] = [None] * len(installed)
        fusable = [_fusable(i.inst, d, i) for d, i in zip(decoded, installed)]
        lane_runs = LaneRuns(m.threads)
        pc, end = 0, len(installed)
        while pc < end:
            stop = pc
            while stop < end and fusable[stop] and (stop == pc or stop not in targets):
                stop += 1
            if stop - pc >= MIN_LENGTH:
                self.at[pc] = Block(m, pc, installed[pc:stop], [s.watched for s in installed[pc:stop]], lane_runs)
            pc = max(stop, pc + 1)

    @property
    def blocks(self) -> list[Block]:
        return [b for b in self.at if b is not None]
