"""`allocate-registers`: allocate PTX registers for every Target IR kernel and check the register budget.

Input: Target IR kernels (after `convert-tile-to-sm90` and `rematerialize-constants`). Output: the same IR,
each kernel annotated with `sm90.registers = {peak = P, f32 = F, b32 = R, b64 = D, pred = Q}`: the peak of
32-bit registers live at once per thread and the registers each class needs (`tessera.regalloc`; the names
themselves are recomputed, deterministically, by whoever prints the kernel). A kernel whose peak exceeds the
budget (255 per thread, or `budget=N`, e.g. a setmaxnreg budget; for a kernel without `setmaxnreg` no more than
ptxas gives each of its threads at its `.reqntid`, `facts.registers_at_entry`: 128 at 512 threads) is refused with a
diagnostic naming the values live at the peak, never silently spilled. So is a kernel with a wgmma that ptxas
could not compile within those registers at entry, whatever `setmaxnreg` gives later
(`facts.wgmma_instruction_registers`: an m64n256k16's 154 of the 128 at 512 threads), located at the wgmma;
spilling cannot help it. `spill=true` accepts a peak over the budget: the kernel is
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
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, VectorType
from xdsl.dialects.func import FuncOp
from xdsl.passes import ModulePass

from tessera.dialects import sm90
from tessera.ir.diagnostics import located, source_location
from tessera.ir.kernel_marks import TARGET_KERNEL_ATTR, target_kernels_in
from tessera.regalloc import SPILL_ATTR, RegisterBudgetError, allocate_registers
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
            at_entry = registers_at_entry(kernel)
            check_wgmma_registers(kernel, at_entry)
            setmaxnreg = any(isinstance(o, sm90.SetMaxNRegOp) for o in kernel.walk())
            budget = self.budget if setmaxnreg or at_entry is None else min(self.budget, at_entry)
            allocation = allocate_registers(kernel, 1 << 30 if self.spill else budget)
            if allocation.peak > budget:
                kernel.attributes[SPILL_ATTR] = IntegerAttr(allocation.peak - budget, 64)
            summary = {"peak": allocation.peak, **dict(sorted(allocation.counts.items()))}
            kernel.attributes[REGISTERS_ATTR] = DictionaryAttr({k: IntegerAttr(v, 64) for k, v in summary.items()})
            if self.report:
                classes = ", ".join(f"{k} {v}" for k, v in sorted(allocation.counts.items()))
                print(f"allocate-registers: @{kernel.sym_name.data}: peak {allocation.peak} of {budget} "
                      f"registers per thread ({classes}), {allocation.at_peak.describe(8)}", file=sys.stderr)


def registers_at_entry(kernel: FuncOp) -> int | None:
    """The registers ptxas gives each thread of `kernel` at entry (`facts.registers_at_entry` of the threads its
    `sm90.kernel` attribute records, which the printer writes as `.reqntid`); None for a kernel without them."""
    info = kernel.attributes.get(TARGET_KERNEL_ATTR)
    threads = getattr(info, "data", {}).get("threads")
    return facts.registers_at_entry(threads.value.data) if isinstance(threads, IntegerAttr) else None


def check_wgmma_registers(kernel: FuncOp, at_entry: int | None) -> None:
    """Refuse (RegisterBudgetError, located at the op) a wgmma that ptxas cannot compile within `at_entry`
    registers per thread (`facts.WGMMA_PTXAS_EXTRA_REGISTERS`)."""
    if at_entry is None:
        return
    for wgmma in kernel.walk():
        if not isinstance(wgmma, sm90.WgmmaMmaAsyncOp):
            continue
        a_registers = facts.A_FRAGMENT_REGISTERS if isinstance(wgmma.a.type, VectorType) else 0
        need = facts.wgmma_instruction_registers(wgmma.n.value.data // 2, a_registers)
        if need > at_entry:
            threads = kernel.attributes[TARGET_KERNEL_ATTR].data["threads"].value.data
            loc = source_location(wgmma)
            summary = (f"a wgmma with N = {wgmma.n.value.data} needs {need} registers per thread, more than the "
                       f"{at_entry} each of {threads} threads has at entry")
            raise RegisterBudgetError(located(wgmma, (
                f"kernel @{kernel.sym_name.data}: {summary} (the wgmma{f' at {loc}' if loc else ''}: its "
                f"{wgmma.n.value.data // 2} accumulator registers{f', {a_registers} of A' if a_registers else ''} and "
                f"the {facts.WGMMA_PTXAS_EXTRA_REGISTERS} ptxas keeps; setmaxnreg does not raise the count ptxas "
                f"compiles it in): use fewer rows a block (fewer warpgroups) or a narrower N"), name_op=False),
                summary=summary)
