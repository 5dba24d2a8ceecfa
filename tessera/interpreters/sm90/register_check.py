"""Checking a register allocation while the CTA simulator runs (as xDSL's RISC-V interpreter does).

Beside the SSA values, the simulator keeps a register file: each op's results are written, for the active
threads, into the registers `tessera.regalloc` assigned them; before each op runs, every operand that lives
in registers is compared with the register file. If another value has overwritten a register while it was
still needed, the comparison fails and the run stops, naming the op, the value, the register and the thread:
allocation bugs are errors, not wrong results. Values that are immediates, kernel arguments and loop-carried
block arguments (written implicitly by the loop) are not checked directly; the results computed into their
registers are.

Registers of in-flight wgmma groups: from a `wgmma_mma_async` until the `wgmma_wait_group` that completes its
group (`WgmmaUnit.done`), the tensor core still reads the A fragment's registers (register A) and writes the
result's `{d...}` registers. An op other than a wgmma that writes one of them in a thread of that warpgroup
meanwhile is reported, naming the writer, the register and the wgmma (PTX: touching them before the wait is
undefined; ptxas warns C7515 for accumulators). Ops whose results are views of their operands' registers print no instruction and
write nothing. `scf.if`, `scf.for` and `scf.while` write their result registers with moves at their yields
(and a loop's initial values at its entry); a result register that one of those sources already holds needs
no move and is not counted as written (the check cannot tell which branch a thread took); the writes of a
loop's latch into its carried registers are not seen.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import scf
from xdsl.interpreter import Interpreter
from xdsl.ir import BlockArgument, Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError, describe_op
from tessera.regalloc import Allocation, aliases_operand_registers
from tessera.sm90 import facts


def _bits(array: np.ndarray) -> np.ndarray:
    """Compare by bit pattern, so NaNs compare equal to themselves and -0.0 differs from 0.0."""
    array = np.ascontiguousarray(array)
    return array.view(_UNSIGNED[array.dtype.itemsize])


_UNSIGNED = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}


def _register_order(name: str) -> tuple[str, int, str]:
    """Registers of one class in numeric order (%f2 before %f10), so a vector's registers are one slice."""
    match = re.fullmatch(r"%([A-Za-z_]*)(\d*)", name)
    if match is None:
        return (name, -1, name)
    return (match[1], int(match[2]) if match[2] else -1, name)


def _index(positions: list[int]) -> slice | np.ndarray:
    """`positions` as a slice where they are consecutive (a view, not a copy), else as an index array."""
    if positions == list(range(positions[0], positions[0] + len(positions))):
        return slice(positions[0], positions[0] + len(positions))
    return np.array(positions, np.intp)


@dataclass(frozen=True)
class InFlight:
    """A register that wgmma `op` of `warpgroup` reads (role "A fragment") or writes ("accumulator") until
    its `group` completes."""

    warpgroup: int
    group: int
    op: Operation
    role: str


@dataclass(frozen=True)
class _Layout:
    """Where one SSA value lives in the register file: its registers (columns of the file), their names, and
    the element (column of the value's [T, N] array) each holds; a scalar [T] value is in all its registers."""

    registers: slice | np.ndarray
    names: tuple[str, ...]
    elements: slice | np.ndarray


class RegisterLayout:
    """What the register file check needs of an allocation, the same for every CTA of a launch: the file's
    column of each register (registers of a class in numeric order, so that a vector's registers are one
    slice), the registers of each value (`of`), and the registers each op writes (`written`); built once per
    launch and shared by the CTAs' checkers. The allocation must not change while it is in use."""

    def __init__(self, allocation: Allocation):
        self.names = allocation.names
        registers = {name for names in allocation.names.values() for name in names if name.startswith("%")}
        self.index = {name: i for i, name in enumerate(sorted(registers, key=_register_order))}
        self._layouts: dict[object, _Layout | None] = {}
        self._written: dict[Operation, list[tuple[str, object]]] = {}

    def of(self, value) -> _Layout | None:
        """The registers of `value` (None for a value with none, or one written implicitly: a block argument)."""
        try:
            return self._layouts[value]
        except KeyError:
            pass
        names = self.names.get(value)
        layout = None
        if names is not None and not isinstance(value, BlockArgument):
            picked = [(i, name) for i, name in enumerate(names) if name.startswith("%")]
            if picked:
                layout = _Layout(_index([self.index[name] for _, name in picked]),
                                 tuple(name for _, name in picked), _index([i for i, _ in picked]))
        self._layouts[value] = layout
        return layout

    def written(self, op: Operation, find) -> list[tuple[str, object]]:
        """The registers `op` writes, with the value written into each (`find(op)` the first time)."""
        cached = self._written.get(op)
        if cached is None:
            cached = self._written[op] = find(op)
        return cached


class RegisterFileChecker(Interpreter.Listener):
    """Keeps the register file of one CTA and checks every operand against it (module docstring).

    The file holds bit patterns: one [T, R] array per register width over all R registers the allocation
    names, and per register the dtype last written into it (`kinds`, -1 before the first write). An operand is
    compared only in the registers whose last write had its dtype (a register read under another class view,
    or written implicitly as a loop-carried one, is not compared), all its registers and threads in one NumPy
    step; a register written under a new dtype starts from zeros in every thread."""

    def __init__(self, cta, allocation: "Allocation | RegisterLayout"):
        self.cta = cta
        self.layout = allocation if isinstance(allocation, RegisterLayout) else RegisterLayout(allocation)
        self.names = self.layout.names
        self._layout = self.layout.of
        self.files: dict[int, np.ndarray] = {}
        self.kinds = np.full(len(self.layout.index), -1, np.int16)
        self._kind_codes: dict[np.dtype, int] = {}
        self.in_flight: dict[str, list[InFlight]] = defaultdict(list)
        self._done = None  # WgmmaUnit.done when in_flight was last pruned

    def _columns(self, layout: _Layout, array) -> tuple[np.ndarray, np.ndarray, int]:
        """The bit patterns of `array` in the registers of `layout` ([T, k]), the file of their width, and the
        code of the dtype."""
        array = np.asarray(array)
        kind = self._kind_codes.setdefault(array.dtype, len(self._kind_codes))
        bits = _bits(array)
        file = self.files.get(bits.itemsize)
        if file is None:
            file = self.files[bits.itemsize] = np.zeros((self.cta.threads, len(self.layout.index)), bits.dtype)
        if bits.ndim == 1:
            return bits[:, None], file, kind
        return bits[:, layout.elements], file, kind

    def did_interpret_op(self, op: Operation, results) -> None:
        active = self.cta.active
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
            self._issue(op, active)
        else:
            self._check_writes(op, active)
        every = None
        for value, array in zip(op.results, results):
            layout = self._layout(value)
            if layout is None:
                continue
            bits, file, kind = self._columns(layout, array)
            registers = layout.registers
            changed = self.kinds[registers] != kind
            if changed.any():  # a register written under another dtype starts from zeros in every thread
                columns = np.arange(len(self.kinds))[registers][changed]
                file[:, columns] = 0
                self.kinds[registers] = kind
            if every is None:
                every = bool(active.all())
                rows = None if every else np.flatnonzero(active)
            if every:
                file[:, registers] = bits
            elif isinstance(registers, slice):
                file[rows, registers] = bits[rows]  # a scalar's [r, 1] broadcasts over its registers
            else:
                file[rows[:, None], registers] = bits[rows]

    def will_interpret_op(self, op: Operation, args) -> None:
        active = self.cta.active
        for value, array in zip(op.operands, args):
            layout = self._layout(value)
            if layout is None:
                continue
            bits, file, kind = self._columns(layout, array)
            same = self.kinds[layout.registers] == kind
            if not same.any():
                continue  # written implicitly (a loop-carried register) or a different class view
            differs = file[:, layout.registers] != bits
            if not differs.any():
                continue
            bad = differs & active[:, None] & same[None, :]
            if bad.any():
                column = int(np.argmax(bad.any(axis=0)))
                thread = int(np.argmax(bad[:, column]))
                raise KernelHazardError(
                    f"{describe_op(op)}: register {layout.names[column]} no longer holds "
                    f"%{value.name_hint or '?'} (another value was allocated to it while it was live) in thread {thread}"
                )

    # region registers of in-flight wgmma groups
    def _warpgroups(self, active: np.ndarray) -> list[int]:
        size = facts.WARPGROUP_SIZE
        return [w for w in range(self.cta.threads // size) if active[w * size : (w + 1) * size].any()]

    def _issue(self, op: sm90.WgmmaMmaAsyncOp, active: np.ndarray) -> None:
        unit = self.cta.wgmma
        held = [(op.result, "accumulator")] + ([(op.a, "A fragment")] if op.a_in_registers else [])
        for w in self._warpgroups(active):
            group = int(unit.open[w])
            for value, role in held:
                entry = InFlight(w, group, op, role)
                for name in self.names.get(value, ()):
                    if name.startswith("%"):
                        self.in_flight[name].append(entry)

    def _written(self, op: Operation) -> list[tuple[str, object]]:
        return self.layout.written(op, self._find_written)

    def _find_written(self, op: Operation) -> list[tuple[str, object]]:
        if aliases_operand_registers(op):
            return []
        written = []
        for j, result in enumerate(op.results):
            already = self._sources(op, j) if op.regions else set()
            written += [(name, result) for name in self.names.get(result, ())
                        if name.startswith("%") and name not in already]
        return written

    def _sources(self, op: Operation, j: int) -> set[str]:
        """Registers of the values a region op moves into its result j (yields, a loop's initial value)."""
        sources = list(op.iter_args[j : j + 1]) if isinstance(op, scf.ForOp) else []
        for region in op.regions:
            for block in region.blocks:
                terminator = block.last_op
                if isinstance(terminator, scf.YieldOp | scf.ConditionOp):
                    values = terminator.operands[1:] if isinstance(terminator, scf.ConditionOp) else terminator.operands
                    sources += list(values[j : j + 1])
        return {name for value in sources for name in self.names.get(value, ())}

    def _check_writes(self, op: Operation, active: np.ndarray) -> None:
        if not self.in_flight:
            return
        done = self.cta.wgmma.done
        if self._done is None or (self._done != done).any():
            self._done = done.copy()
            self.in_flight = defaultdict(list, {name: pending for name, entries in self.in_flight.items()
                                                if (pending := [e for e in entries if e.group > done[e.warpgroup]])})
        size = facts.WARPGROUP_SIZE
        warpgroups = set(self._warpgroups(active))
        for name, value in self._written(op):
            for entry in self.in_flight.get(name, ()):
                if entry.warpgroup in warpgroups:
                    w = entry.warpgroup
                    thread = w * size + int(np.argmax(active[w * size : (w + 1) * size]))
                    what = "reads it as its A fragment" if entry.role == "A fragment" else "writes its accumulator into it"
                    self.cta.fail(op, f"writes register {name} (%{value.name_hint or '?'}) while `{describe_op(entry.op)}` "
                                      f"of warpgroup {w} still {what} (group {entry.group} is pending: a "
                                      "wgmma_wait_group must complete it first)", thread)

    # endregion
