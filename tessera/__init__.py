"""Tessera: a multi-level tile compiler on xDSL for sm_90a, with an interpreter at every level.

Public API:
- `tessera.kernels`: builders of Tile IR kernels (flash/two-pass/three-pass attention, GEMM);
- `tessera.interpret(module, *inputs, level="tile", kernel=None, **sizes)`: run a kernel on NumPy arrays;
- `tessera.compile(module, target="ptx")`: Target IR, PTX text, or a ptxas result with the cubin;
- `tessera.parse_module(text)` / `tessera.print_module(module)`;
- `tessera.attention(q, k, v, causal=False, scale=None)`: run attention on an H100/H200 (`tessera-compiler[cuda]`;
  see `tessera.runtime`, imported on first use).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.ir import parse_module, print_module, verify
# `kernels` is imported under another name: importing the subpackage `tessera.kernels` rebinds the
# package attribute `kernels`, which would replace a function of that name here.
from tessera.kernel_abi import KernelSignature, signature
from tessera.kernel_abi import kernels as kernel_functions

__version__ = "0.1.0"
LEVELS = ("tile", "target")

__all__ = ["compile", "interpret", "parse_module", "print_module", "find_kernel", "LEVELS", "__version__"]


def find_kernel(module: ModuleOp, kernel: str | None = None) -> KernelSignature:
    """The signature of the kernel named `kernel`, or of the module's only kernel."""
    found = kernel_functions(module)
    if kernel is not None:
        found = [k for k in found if k.sym_name.data == kernel]
        if not found:
            names = ", ".join(k.sym_name.data for k in kernel_functions(module)) or "none"
            raise ValueError(f"no kernel named '{kernel}' in the module (kernels: {names})")
    if not found:
        raise ValueError("the module has no kernel (a func.func with a 'tile.kernel' attribute)")
    if len(found) > 1:
        names = ", ".join(k.sym_name.data for k in found)
        raise ValueError(f"the module has several kernels ({names}); pass kernel=NAME")
    return signature(found[0])


TARGETS = ("target", "ptx", "cubin")


def compile(module: ModuleOp, target: str = "ptx", pipeline: str | None = None):
    """Compile the Tile IR kernels of `module` (which is not modified) through `pipeline` (a `tessera-opt -p`
    spec that ends in register-allocated Target IR; default `passes.PTX_PIPELINE`, single-stage; the full
    FlashAttention-3 structure is `passes.SPECIALIZED_PIPELINE + ",allocate-registers"`).

    target "target": the register-allocated Target IR module; "ptx": the PTX text (printed with the
    allocated registers); "cubin": a `tessera.toolchain.PtxasResult` (ptxas -arch=sm_90a -v: resources,
    warnings, and the cubin bytes). The module is verified first (`tessera.ir.verify`). Raises a
    DiagnosticException for what the verifier, a pass or ptxas refuses."""
    if target not in TARGETS:
        raise ValueError(f"unknown compile target '{target}' (available: {', '.join(TARGETS)})")
    verify(module)
    from tessera.passes import PTX_PIPELINE, apply_pipeline
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    lowered = module.clone()
    apply_pipeline(lowered, pipeline or PTX_PIPELINE)
    if target == "target":
        return lowered
    ptx = print_ptx(lowered, registers=allocated_registers)
    if target == "ptx":
        return ptx
    from tessera.toolchain import compile_ptx

    return compile_ptx(ptx)


def lower_to_target(module: ModuleOp, kernel: str, pipeline: str | None = None):
    """The Target IR kernel (a func.func) of `kernel`, lowered from a copy of `module` by `pipeline` (a
    `tessera-opt -p` spec that ends in Target IR; default `passes.TARGET_PIPELINE`)."""
    from tessera.kernel_abi import is_target_kernel
    from tessera.passes import TARGET_PIPELINE, apply_pipeline

    lowered = module.clone()
    apply_pipeline(lowered, pipeline or TARGET_PIPELINE)
    return next(op for op in lowered.walk() if is_target_kernel(op) and op.sym_name.data == kernel)


def interpret(
    module: ModuleOp, *inputs: np.ndarray, level: str = "tile", kernel: str | None = None,
    pipeline: str | None = None, **sizes: int,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Run a kernel over its whole grid on NumPy inputs and return its outputs.

    `level` is "tile" (the Tile IR interpreter) or "target" (lower with `passes.TARGET_PIPELINE`, allocate
    registers, and run the Target IR in the CTA simulator, checking the allocation against a register file).
    `pipeline` replaces the lowering pipeline (at level "tile" it is applied first and must stay in Tile
    IR, e.g. "assign-swizzle,pipeline-loops{stages=3}"). Inputs are given in argument order (attention: Q, K, V as [batch, heads, seq, head_dim]; GEMM: A, B) and
    converted to the kernel's element types (float inputs are rounded to bf16/f16 as the kernel would read
    them). Named sizes in `sizes` are checked against the inputs. Returns the output (or a tuple of outputs)
    in the output argument's element type. The module is verified first (`tessera.ir.verify`: dominance,
    ops, kernel ABI), so that malformed IR is a VerifyException, not a crash of the interpreter."""
    if level not in LEVELS:
        raise ValueError(f"unknown interpreter level '{level}' (available: {', '.join(LEVELS)})")
    verify(module)
    from tessera.interpreters.launch import prepare_arguments, run_grid

    sig = find_kernel(module, kernel)
    arguments, bound = prepare_arguments(sig, inputs, sizes)
    if level == "tile":
        if pipeline:
            from tessera.passes import apply_pipeline

            module = module.clone()
            apply_pipeline(module, pipeline)
        run_grid(sig, module, arguments, bound)
    else:
        from tessera.interpreters.sm90.launch import run_target_kernel
        from tessera.regalloc import allocate_registers

        target = lower_to_target(module, sig.name, pipeline)
        run_target_kernel(target, arguments, bound, allocate_registers(target))
    outputs = tuple(a for a, arg in zip(arguments, sig.args) if arg.role == "out")
    return outputs[0] if len(outputs) == 1 else outputs


def __getattr__(name: str):
    # `tessera.kernels` is imported on first use, so `import tessera` stays light.
    if name == "kernels":
        import importlib

        return importlib.import_module("tessera.kernels")
    # `tessera.attention` runs on the GPU (tessera-compiler[cuda]); the runtime loads the CUDA bindings only when
    # called.
    if name == "attention":
        from tessera.runtime.attention import attention

        return attention
    raise AttributeError(f"module 'tessera' has no attribute '{name}'")
