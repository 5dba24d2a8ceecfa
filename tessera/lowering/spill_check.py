"""ptxas's answer to the default pipeline's fallback: does a lowered kernel spill under the newest ptxas found?

The fallback (`tessera.lowering.fallback`) asks it of a kernel whose allocator peak, or that peak with the
registers of its early loads (`early_load_registers`), leaves fewer than `CONSUMER_HEADROOM` registers spare
under its budget (a warp-specialized kernel's consumers' setmaxnreg count), and only then: there the count
is no proof either way (ptxas may need a few registers more than the allocator counts, or fit at the count).
`ptxas_spill(module)` prints the module's PTX as ptxas reads it (allocated registers, no comments: the text
`tessera.compile(target="cubin")` assembles) and assembles it with the newest ptxas found
(`tessera.toolchain.find_all_ptxas`), `-arch=sm_90a -v`, whose log gives each kernel's spill bytes.

The answer is cached in the process by the SHA-256 of the PTX text and the ptxas that read it, so a kernel
compiled again (the same text) does not run ptxas again. No answer (None: keep the kernel) when no ptxas is
found, when it rejects the module or cannot be run, or when the module cannot be printed: each is the compiled
kernel's to report where it is assembled or printed, as it would be without the question.

`early_load_registers(fn)` is the part of a kernel the allocator's count may leave out: the registers of its
epilogue's global loads (after a loop and in none: a GEMM's C tile, bias, residual), which ptxas issues early,
ahead of the arithmetic before them in program order, so that they are live beside it (the fallback's tight
test adds them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import DiagnosticException

from tessera import toolchain
from tessera.ir.walk import walk_ops


@dataclass(frozen=True)
class PtxasSpill:
    """A kernel that ptxas spills: its name, the ptxas (`tessera.toolchain.ToolVersion`) and the bytes of
    local memory its spill stores and loads move per thread, as `ptxas -v` reports them."""

    kernel: str
    ptxas: toolchain.ToolVersion
    store_bytes: int
    load_bytes: int

    def __str__(self) -> str:
        return (f"{self.ptxas} spills it, {self.store_bytes} bytes of spill stores "
                f"and {self.load_bytes} of spill loads per thread")


_ANSWERS: dict[str, PtxasSpill | None] = {}
"""ptxas's answers in this process, by `_answer_key`."""


def ptxas_spill(module: ModuleOp) -> PtxasSpill | None:
    """The first kernel of `module` (allocated Target IR) that the newest ptxas found spills, or None when none
    spills or there is no answer (module docstring); cached by the PTX text."""
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    found = toolchain.find_all_ptxas()
    if not found:
        return None
    newest = found[0]
    try:
        ptx = print_ptx(module, registers=allocated_registers, comments=False)
    except DiagnosticException:  # the printer's refusal is the compiled kernel's, reported where it is printed
        return None
    key = _answer_key(ptx, newest)
    if key not in _ANSWERS:
        _ANSWERS[key] = _assemble(ptx, newest)
    return _ANSWERS[key]


def _answer_key(ptx: str, ptxas: toolchain.ToolVersion) -> str:
    return hashlib.sha256(f"{ptxas.path}\0{ptxas.version}\0{ptx}".encode()).hexdigest()


def _assemble(ptx: str, ptxas: toolchain.ToolVersion) -> PtxasSpill | None:
    try:
        result = toolchain.compile_ptx(ptx, ptxas=ptxas.path)
    except toolchain.ToolchainError:  # rejected or not run: no answer (module docstring)
        return None
    for name, entry in result.entries.items():
        if entry.spills:
            return PtxasSpill(name, result.ptxas, entry.spill_store_bytes, entry.spill_load_bytes)
    return None


def early_load_registers(fn: func.FuncOp) -> int:
    """The 32-bit registers of the epilogue's register-tile global loads (`sm90.ld_global`,
    `sm90.ld_global_u16`) of the Target IR kernel `fn`, all of them together: the loads after a loop and in none,
    the most that ptxas's schedule may add to the allocator's peak there. ptxas issues such loads as early as
    their addresses allow, at the loop's exit, ahead of the arithmetic before them in program order, so a load's
    registers are live beside values the allocator counts as dead by then: `gemm(block_m=192, beta=1.0,
    bias=True)` counts 135 (the accumulator and the C tile) and ptxas 12.9 to 13.5 need more than 168, the C
    tile's 64 loads issued before the bias's 32 are added. A bound, not a count: the fallback asks ptxas where
    the peak and it pass the budget (`tessera.lowering.fallback`). A kernel without a loop has none (its loads
    lead its code already)."""
    from tessera.dialects.sm90_memory import LdGlobalOp, LdGlobalU16Op

    return sum(op.result.type.get_shape()[0] for op in walk_ops(fn)
               if isinstance(op, LdGlobalOp | LdGlobalU16Op) and _after_a_loop(op))


def _after_a_loop(op: Operation) -> bool:
    """Whether no `scf.for` encloses `op` and one precedes it in program order (before it or an op around it,
    in its block)."""
    around = [op]
    while not isinstance(around[-1].parent_op(), func.FuncOp | None):
        around.append(around[-1].parent_op())
        if isinstance(around[-1], scf.ForOp):
            return False
    return any(isinstance(inner, scf.ForOp) for outer in around for before in _preceding(outer)
               for inner in walk_ops(before))


def _preceding(op: Operation):
    """The ops before `op` in its block, nearest first."""
    before = op.prev_op
    while before is not None:
        yield before
        before = before.prev_op
