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
    if array.dtype == np.bool_:
        return array
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


@dataclass(frozen=True)
class InFlight:
    """A register that wgmma `op` of `warpgroup` reads (role "A fragment") or writes ("accumulator") until
    its `group` completes."""

    warpgroup: int
    group: int
    op: Operation
    role: str


class RegisterFileChecker(Interpreter.Listener):
    """Keeps the register file of one CTA and checks every operand against it (module docstring)."""

    def __init__(self, cta, allocation: Allocation):
        self.cta = cta
        self.names = allocation.names
        self.registers: dict[str, np.ndarray] = {}
        self.in_flight: dict[str, list[InFlight]] = defaultdict(list)
        self._done = None  # WgmmaUnit.done when in_flight was last pruned

    def _elements(self, value, array):
        names = self.names.get(value)
        if names is None or isinstance(value, BlockArgument):
            return
        array = np.asarray(array)
        for i, name in enumerate(names):
            if name.startswith("%"):
                yield name, (array if array.ndim == 1 else array[:, i])

    def did_interpret_op(self, op: Operation, results) -> None:
        active = self.cta.active
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
            self._issue(op, active)
        else:
            self._check_writes(op, active)
        for value, array in zip(op.results, results):
            for name, column in self._elements(value, array):
                held = self.registers.setdefault(name, np.zeros_like(column))
                if held.dtype != column.dtype:
                    held = self.registers[name] = np.zeros_like(column)
                held[active] = column[active]

    def will_interpret_op(self, op: Operation, args) -> None:
        active = self.cta.active
        for value, array in zip(op.operands, args):
            for name, column in self._elements(value, array):
                held = self.registers.get(name)
                if held is None or held.dtype != column.dtype:
                    continue  # written implicitly (a loop-carried register) or a different class view
                bad = active & (_bits(held) != _bits(column))
                if bad.any():
                    thread = int(np.argmax(bad))
                    raise KernelHazardError(
                        f"{describe_op(op)}: register {name} no longer holds %{value.name_hint or '?'} "
                        f"(another value was allocated to it while it was live) in thread {thread}"
                    )

    # region registers of in-flight wgmma groups
    def _warpgroups(self, active: np.ndarray) -> list[int]:
        size = facts.WARPGROUP_SIZE
        return [w for w in range(self.cta.threads // size) if active[w * size : (w + 1) * size].any()]

    def _issue(self, op: sm90.WgmmaMmaAsyncOp, active: np.ndarray) -> None:
        unit = self.cta.wgmma
        held = [(op.result, "accumulator")] + ([(op.a, "A fragment")] if op.a_in_registers else [])
        for w in self._warpgroups(active):
            for value, role in held:
                for name in self.names.get(value, ()):
                    if name.startswith("%"):
                        self.in_flight[name].append(InFlight(w, int(unit.open[w]), op, role))

    def _written(self, op: Operation) -> list[tuple[str, object]]:
        """The registers `op` writes, with the value written into each."""
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
