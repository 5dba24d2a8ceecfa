"""Checking a register allocation while the CTA simulator runs (as xDSL's RISC-V interpreter does).

Beside the SSA values, the simulator keeps a register file: each op's results are written, for the active
threads, into the registers `tessera.regalloc` assigned them; before each op runs, every operand that lives
in registers is compared with the register file. If another value has overwritten a register while it was
still needed, the comparison fails and the run stops, naming the op, the value, the register and the thread:
allocation bugs are errors, not wrong results. Values that are immediates, kernel arguments and loop-carried
block arguments (written implicitly by the loop) are not checked directly; the results computed into their
registers are.
"""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import Interpreter
from xdsl.ir import BlockArgument, Operation

from tessera.interpreters.block_batch import KernelHazardError, describe_op
from tessera.regalloc import Allocation


def _bits(array: np.ndarray) -> np.ndarray:
    """Compare by bit pattern, so NaNs compare equal to themselves and -0.0 differs from 0.0."""
    array = np.ascontiguousarray(array)
    if array.dtype == np.bool_:
        return array
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


class RegisterFileChecker(Interpreter.Listener):
    """Keeps the register file of one CTA and checks every operand against it (module docstring)."""

    def __init__(self, cta, allocation: Allocation):
        self.cta = cta
        self.names = allocation.names
        self.registers: dict[str, np.ndarray] = {}

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
