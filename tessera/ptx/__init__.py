"""The PTX printer: Target IR kernels (`sm90` + arith/math/vector/scf) as a PTX module for sm_90a.

    from tessera.ptx import print_ptx
    text = print_ptx(module)                      # every Target IR kernel of the module
    text = print_ptx(module, registers=names)     # with a register assignment: value -> names per element

`tessera-opt kernel.mlir -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse -t ptx` prints the same
(`PtxTarget`, registered by `register`). Files: `registers` (register classes and names), `kernel` (one
entry: parameters, names of values, parallel assignments, comments), `arith`, `machine`, `control` (the ops),
`fold_epilogue` (a flash forward's last P.V run by its loop), `module` (the header and the kernels), `target`
(the tessera-opt target).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.ptx.target import PtxTarget, register

if TYPE_CHECKING:
    from tessera.ptx.kernel import PtxPrintError, launch_smem_bytes
    from tessera.ptx.module import print_ptx
    from tessera.interpreters.ptx.launcher import launch


def __getattr__(name: str):
    # The printer imports the dialects; `register` alone must stay light for tessera-opt's start-up.
    if name == "print_ptx":
        from tessera.ptx.module import print_ptx

        return print_ptx
    if name in ("launch", "ParamStruct", "TensorMapArg"):  # the PTX executor (tessera.interpreters.ptx)
        from tessera.interpreters.ptx import launcher

        return getattr(launcher, name)
    if name in ("PtxPrintError", "launch_smem_bytes"):
        from tessera.ptx import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module 'tessera.ptx' has no attribute {name!r}")


__all__ = ["PtxPrintError", "PtxTarget", "launch_smem_bytes", "print_ptx", "register"]
