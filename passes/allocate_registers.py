"""`allocate-registers`: allocate PTX registers for every Target IR kernel and check the register budget.

Input: Target IR kernels (after `convert-tile-to-sm90` and `rematerialize-constants`). Output: the same IR,
each kernel annotated with `sm90.registers = {peak = P, f32 = F, b32 = R, b64 = D, pred = Q}`: the peak of
32-bit registers live at once per thread and the registers each class needs (`tessera.regalloc`; the names
themselves are recomputed, deterministically, by whoever prints the kernel). A kernel whose peak exceeds the
budget (255 per thread, or `budget=N`, e.g. a setmaxnreg budget) is refused with a diagnostic naming the
values live at the peak, never silently spilled. `spill=true` accepts a peak over the budget: the kernel is
allocated as it is (virtual registers past the budget, which ptxas spills to local memory) and carries
`sm90.spilled_registers` (`tessera.regalloc.SPILL_ATTR`: the registers past the budget), so that whoever
re-allocates it to print or run it does not refuse it again; the default pipeline takes it only as its last rung
(`tessera.lowering.fallback`), and a named pipeline only where it says so. `report=true` prints the pressure of each kernel to stderr.
Given only Tile IR, tessera-opt and tessera-run refuse the pass rather than print unallocated IR
(`input_level`, `tessera.ir.diagnostics.check_pass_input`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp
from xdsl.passes import ModulePass

from tessera.ir.kernel_marks import target_kernels_in
from tessera.regalloc import SPILL_ATTR, allocate_registers
from tessera.sm90 import facts

REGISTERS_ATTR = "sm90.registers"


@dataclass(frozen=True)
class AllocateRegistersPass(ModulePass):
    """Allocate registers of each Target IR kernel; refuse kernels over the budget unless `spill` (module
    docstring)."""

    name = "allocate-registers"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    budget: int = facts.MAX_REGISTERS_PER_THREAD
    report: bool = False
    spill: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.budget <= facts.MAX_REGISTERS_PER_THREAD:
            raise ValueError(f"allocate-registers: budget must be in [1, {facts.MAX_REGISTERS_PER_THREAD}], got {self.budget}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in target_kernels_in(op):
            kernel.attributes.pop(SPILL_ATTR, None)  # a kernel allocated again is judged again
            allocation = allocate_registers(kernel, 1 << 30 if self.spill else self.budget)
            if allocation.peak > self.budget:
                kernel.attributes[SPILL_ATTR] = IntegerAttr(allocation.peak - self.budget, 64)
            summary = {"peak": allocation.peak, **dict(sorted(allocation.counts.items()))}
            kernel.attributes[REGISTERS_ATTR] = DictionaryAttr({k: IntegerAttr(v, 64) for k, v in summary.items()})
            if self.report:
                classes = ", ".join(f"{k} {v}" for k, v in sorted(allocation.counts.items()))
                print(f"allocate-registers: @{kernel.sym_name.data}: peak {allocation.peak} of {self.budget} "
                      f"registers per thread ({classes}), {allocation.at_peak.describe(8)}", file=sys.stderr)
