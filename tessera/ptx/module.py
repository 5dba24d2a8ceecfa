"""`print_ptx`: a PTX module of every Target IR kernel of an xDSL module.

The module header is `.version 8.0` (the lowest version with everything printed here: sm_90a targets need
8.0, and nothing printed needs more; see ../shared/notes/ptx-sm90a.md section 1), `.target sm_90a`,
`.address_size 64` and the dynamic shared memory every kernel addresses, `.extern .shared .align 1024 .b8
smem[];`. Each kernel is one `.visible .entry` (see `kernel`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

# The op printers register themselves on import.
from tessera.ir.class_tests import subclass_test
from tessera.ir.diagnostics import located
from tessera.ir.walk import walk_ops
from tessera.ptx import arith as _arith  # noqa: F401
from tessera.ptx import cluster as _cluster  # noqa: F401
from tessera.ptx import control as _control  # noqa: F401
from tessera.ptx import machine as _machine  # noqa: F401
from tessera.ptx import cp_async as _cp_async  # noqa: F401
from tessera.ptx import reductions as _reductions  # noqa: F401
from tessera.kernel_abi import KERNEL_ATTR, is_target_kernel
from tessera.ptx.kernel import SMEM_ALIGNMENT, SMEM_SYMBOL, KernelPrinter, PtxPrintError, TargetIrText
from tessera.ptx.registers import RegisterFile

PTX_VERSION = "8.0"
PTX_TARGET = "sm_90a"

RegisterAssignment = Mapping[SSAValue, Sequence[str]]
"""Names per element of each value: registers (`%f12`) or, for constants, immediates (`0f3F800000`)."""
_is_func = subclass_test(func.FuncOp)


def target_kernels(module: ModuleOp) -> list[func.FuncOp]:
    """The module's Target IR kernels; anything else that is a function is refused by name, located at it."""
    found = []
    for op in walk_ops(module):
        if not _is_func(op):
            continue
        if is_target_kernel(op):
            found.append(op)
        elif KERNEL_ATTR in op.attributes:
            raise PtxPrintError(located(op, f"ptx: @{op.sym_name.data} is a Tile IR kernel: lower it first "
                                            "(-p default-pipeline)"))
        else:
            raise PtxPrintError(located(op, f"ptx: @{op.sym_name.data} is not a Target IR kernel (only kernels "
                                            "are printed)"))
    return found


def print_ptx(
    module: ModuleOp,
    registers: RegisterAssignment | Callable[[func.FuncOp], RegisterAssignment] | None = None,
    *,
    comments: bool = True,
    fold_epilogue: bool = True,
) -> str:
    """The PTX module of `module`'s Target IR kernels. `registers` optionally names the registers of values,
    as a mapping or per kernel (e.g. `lambda fn: tessera.regalloc.allocate_registers(fn).names`); other
    values get a fresh virtual register per element. Raises PtxPrintError naming the kernel and op it
    cannot print. `comments=False` leaves out the comment before each op's instructions (its Target IR
    line): the same instructions, a third fewer lines, and no printing of the module's Target IR to name
    them (what ptxas alone reads: `tessera.compile(target="cubin")`); parameters are then named after the
    arguments' name hints. `fold_epilogue=False` prints a flash forward's last P.V after its loop, as the
    Target IR has it, instead of running it in the loop (`tessera.ptx.fold_epilogue`)."""
    text = TargetIrText(module) if comments else None
    lines = [
        f".version {PTX_VERSION}",
        f".target {PTX_TARGET}",
        ".address_size 64",
        "",
        f".extern .shared .align {SMEM_ALIGNMENT} .b8 {SMEM_SYMBOL}[];",
    ]
    for fn in target_kernels(module):
        names = registers(fn) if callable(registers) else registers
        printer = KernelPrinter(fn, text, RegisterFile(names or {}), fold_epilogue=fold_epilogue)
        lines += [""] + printer.print_kernel()
    return "\n".join(lines) + "\n"
