"""Running a Target IR module's kernel through its printed PTX in the PTX executor, launched as `tessera.host`
describes it (as `tessera.attention` launches it on a GPU): what `tessera.interpret(level="ptx")` and the
level-by-level validation (`tessera.validation.levels`) both do."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.kernel_abi import KernelSignature, is_target_kernel


class PtxExecutorMissing(RuntimeError):
    """The PTX executor (`tessera.ptx.launch`) is not available in this installation."""


def ptx_text(module: ModuleOp) -> tuple[str, ModuleOp]:
    """The PTX of `module`'s Target IR kernels with allocated registers (allocating on a copy when
    `allocate-registers` has not run), and the module it was printed from."""
    from tessera.passes.allocate_registers import REGISTERS_ATTR, AllocateRegistersPass
    from tessera.ir import make_context
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    kernels = [op for op in module.walk() if is_target_kernel(op)]
    if any(REGISTERS_ATTR not in k.attributes for k in kernels):
        module = module.clone()
        AllocateRegistersPass().apply(make_context(), module)
    return print_ptx(module, registers=allocated_registers), module


def ptx_launcher():
    """`tessera.ptx.launch`'s `launch_described`, or PtxExecutorMissing."""
    try:
        from tessera.interpreters.ptx.launcher import launch_described
    except ImportError as error:
        raise PtxExecutorMissing(f"no PTX executor ({error})") from None
    return launch_described


def run_ptx(module: ModuleOp, sig: KernelSignature, arguments: list[np.ndarray], sizes: Mapping[str, int], *,
            workers: int | None = None, executor=None) -> None:
    """Print `module`'s PTX (allocating registers on a copy where needed) and run kernel `sig.name` on `arguments`
    (outputs written in place) over the grid `sizes` gives; `workers`/`executor` as for `launch`."""
    from tessera.host import describe

    launch_described = ptx_launcher()
    text, printed = ptx_text(module)
    host = next(h for h in describe(printed) if h.kernel == sig.name)
    launch_described(text, host, arguments, dict(sizes), source=f"<ptx of @{sig.name}>", workers=workers,
                     executor=executor)
