"""`tessera-opt ... -t ptx`: the PTX printer as an xDSL output target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target


@dataclass(frozen=True)
class PtxTarget(Target):
    """Prints the module's Target IR kernels as one PTX module (`tessera.ptx.print_ptx`). Kernels that
    `allocate-registers` annotated are printed with the registers it allocated. `-t "ptx{fold_epilogue=false}"`
    prints a flash forward's last P.V after its loop, op for op as the Target IR has it, instead of running it in
    the loop (`tessera.ptx.fold_epilogue`, the default)."""

    name = "ptx"
    fold_epilogue: bool = True

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from tessera.ptx.module import print_ptx

        output.write(print_ptx(module, registers=allocated_registers, fold_epilogue=self.fold_epilogue))


def allocated_registers(fn) -> dict:
    """The allocation's register names for a kernel `allocate-registers` has run on, else none (fresh)."""
    from tessera.passes.allocate_registers import REGISTERS_ATTR
    from tessera.regalloc import allocate_registers

    return allocate_registers(fn).names if REGISTERS_ATTR in fn.attributes else {}


def register(opt_main) -> None:
    """Make `-t ptx` available in an `xDSLOptMain` (call it from its `register_all_targets`)."""
    opt_main.available_targets[PtxTarget.name] = lambda: PtxTarget
