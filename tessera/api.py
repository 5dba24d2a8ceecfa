"""The functions of Tessera's public API (`tessera.compile`, `tessera.interpret`, `tessera.parse_module`,
`tessera.print_module`, `tessera.find_kernel`), defined here so that the layers below `tessera` (the runtime, the
graph rewriter, the tools) can call them without importing the package's `__init__`, which imports them."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera import ir
from tessera.arguments import check_array, check_choice, check_module, check_size, check_sizes, check_string
# `kernels` is imported under another name: importing the subpackage `tessera.kernels` rebinds the
# package attribute `kernels`, which would replace a function of that name here.
from tessera.kernel_abi import KernelSignature, is_target_kernel, signature, specialized
from tessera.kernel_abi import kernels as kernel_functions
from tessera.variants.index_ranges import check_launch
from tessera.variants.launch_lists import check_lists_at_launch
from tessera.variants.launch_values import check_captured_values

LEVELS = ("tile", "target", "ptx")
"""Where `interpret` runs a kernel: the Tile IR interpreter, the CTA simulator on its Target IR, or the PTX
executor on its PTX text."""
TARGETS = ("target", "ptx", "cubin")
"""What `compile` returns: the Target IR module (registers allocated by the default pipeline), PTX text, or
ptxas's result with the cubin."""

__all__ = ["compile", "interpret", "lower_to_target", "parse_module", "print_module", "find_kernel",
           "LEVELS", "TARGETS"]


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify a module written in MLIR syntax (ops, then kernel signatures). Raises ParseError or
    VerifyException for bad IR, TypeError when `text` or `name` is not a string."""
    check_string("tessera.parse_module", "text", text)
    check_string("tessera.parse_module", "name", name)
    return ir.parse_module(text, name)


def print_module(module: ModuleOp, generic: bool = False) -> str:
    """The module's text in MLIR syntax (custom forms, or the generic form with `generic=True`)."""
    check_module("tessera.print_module", module)
    if not isinstance(generic, bool):
        raise TypeError(f"tessera.print_module: generic must be True or False; got {type(generic).__name__}")
    return ir.print_module(module, generic)


def find_kernel(module: ModuleOp, kernel: str | None = None) -> KernelSignature:
    """The signature of the Tile IR kernel named `kernel`, or of the module's only kernel."""
    check_module("tessera.find_kernel", module)
    check_string("tessera.find_kernel", "kernel", kernel, optional=True)
    return _find_kernel(module, kernel)


def _find_kernel(module: ModuleOp, kernel: str | None) -> KernelSignature:
    found = kernel_functions(module)
    if kernel is not None:
        found = [k for k in found if k.sym_name.data == kernel]
        if not found:
            names = ", ".join(k.sym_name.data for k in kernel_functions(module)) or "none"
            raise ValueError(f"no kernel named '{kernel}' in the module (kernels: {names})")
    if not found:
        lowered = [op.sym_name.data for op in module.walk() if is_target_kernel(op)]
        if lowered:
            raise ValueError(f"the module has no Tile IR kernel, only Target IR kernels ({', '.join(lowered)}); "
                             "run Target IR with tessera.interpreters.sm90 or its PTX with tessera.ptx.launch")
        raise ValueError("the module has no kernel (a func.func with a 'tile.kernel' attribute)")
    if len(found) > 1:
        names = ", ".join(k.sym_name.data for k in found)
        raise ValueError(f"the module has several kernels ({names}); pass kernel=NAME")
    return signature(found[0])


def _lower(where: str, module: ModuleOp, pipeline: str | None) -> ModuleOp:
    """A copy of `module` through `pipeline` (default `passes.DEFAULT_PIPELINE`), which must reach Target IR."""
    from tessera.passes import DEFAULT_PIPELINE, apply_pipeline

    spec = DEFAULT_PIPELINE if pipeline is None else pipeline
    lowered = module.clone()
    apply_pipeline(lowered, spec)
    if not any(is_target_kernel(op) for op in lowered.walk()):
        raise ValueError(f"{where}: pipeline '{spec}' does not lower the kernels to Target IR (it needs "
                         "convert-tile-to-sm90; the default is tessera.passes.DEFAULT_PIPELINE)")
    return lowered


def compile(module: ModuleOp, target: str = "ptx", pipeline: str | None = None):
    """Compile the Tile IR kernels of `module` (which is not modified) through `pipeline`, a `tessera-opt -p`
    spec that ends in Target IR; default `passes.DEFAULT_PIPELINE`, the full warp-specialized pipeline with
    registers allocated (`passes.PTX_PIPELINE` is the single-stage one).

    target "target": the Target IR module; "ptx": the PTX text (printed with the allocated registers, or
    fresh names where the pipeline did not allocate); "cubin": a `tessera.toolchain.PtxasResult` (ptxas
    -arch=sm_90a -v: resources, warnings, and the cubin bytes). Raises a DiagnosticException for what a pass
    or ptxas refuses, and TypeError/ValueError for bad arguments."""
    where = "tessera.compile"
    check_module(where, module)
    ir.verify(module)  # dominance, ops, kernel ABI: malformed IR is a VerifyException, not a crash of a pass
    check_choice(where, "target", target, TARGETS, "compile target")
    check_string(where, "pipeline", pipeline, optional=True)
    if not kernel_functions(module):
        raise ValueError(f"{where}: the module has no Tile IR kernel to compile (a func.func with a 'tile.kernel' "
                         "attribute)")
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    from tessera.passes import without_cyclic_gc

    kept = _kept_lowering(where, module, pipeline)  # a builder's kept kernel: lowered once (a copy returned)
    lowered = _lower(where, module, pipeline) if kept is None else kept.module
    if target == "target":
        return lowered if kept is None else lowered.clone()
    with without_cyclic_gc():  # ptxas reads no comments: a cubin is compiled from the PTX without them
        ptx = print_ptx(lowered, registers=allocated_registers, comments=target == "ptx")
    if target == "ptx":
        return ptx
    from tessera.toolchain import compile_ptx

    return compile_ptx(ptx)


def lower_to_target(module: ModuleOp, kernel: str, pipeline: str | None = None):
    """The Target IR kernel (a func.func) of `kernel`, lowered from a copy of `module` by `pipeline` (a
    `tessera-opt -p` spec that ends in Target IR; default `passes.DEFAULT_PIPELINE`)."""
    where = "tessera.lower_to_target"
    check_module(where, module)
    check_string(where, "kernel", kernel)
    check_string(where, "pipeline", pipeline, optional=True)
    return _target_kernel(where, _lower(where, module, pipeline), kernel)


def _target_kernel(where: str, lowered: ModuleOp, kernel: str):
    found = next((op for op in lowered.walk() if is_target_kernel(op) and op.sym_name.data == kernel), None)
    if found is None:
        names = ", ".join(op.sym_name.data for op in lowered.walk() if is_target_kernel(op))
        raise ValueError(f"{where}: no Target IR kernel named '{kernel}' after the pipeline (kernels: {names})")
    return found


@np.errstate(all="ignore")  # IEEE arithmetic on inf and NaN warns of nothing on the GPU, nor in the interpreters
def run_interpreted(where: str, module, arrays, kernel, level, pipeline, sizes, workers=None, executor=None):
    """`tessera.launch` at an interpreter `level` (and `interpret`): check the call, run the kernel, return its
    outputs (`where` names the entry point in errors). NumPy's floating-point warnings are off while it runs:
    an inf or NaN input is a value the kernel computes with, not an error (under -W error a RuntimeWarning from
    the interpreters' own arithmetic was an exception far from the call). `workers`/`executor`: run the CTAs in
    parallel at levels "target" and "ptx" (`tessera.interpreters.parallel`); the Tile IR interpreter runs
    serially, with a `SerialFallback` warning when they ask otherwise."""
    from tessera.interpreters.parallel import parallel_options, serial_note

    parallel = parallel_options(where, workers, executor)
    check_module(where, module)
    ir.verify(module)  # dominance, ops, kernel ABI: malformed IR is a VerifyException, not a crash of the interpreter
    check_choice(where, "level", level, LEVELS, "interpreter level")
    check_string(where, "kernel", kernel, optional=True)
    check_string(where, "pipeline", pipeline, optional=True)
    sig = _find_kernel(module, kernel)
    arrays = [check_array(where, f"input {i}", x) for i, x in enumerate(arrays)]
    _check_element_kinds(where, sig, arrays)
    named = check_sizes(where, sizes, [*sig.dim_names(), *sig.launch_sizes])
    try:
        bound = sig.sizes_from_inputs([a.shape for a in arrays], named)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    for name, value in named.items():
        if bound[name] != value:
            raise ValueError(f"{where}: size {name}={value} contradicts the inputs, which give {name}={bound[name]}")
    for name, value in bound.items():  # sizes the inputs give reach the kernel as 32-bit parameters too
        check_size(where, name, value)
    sig.check_tables(where, arrays, bound)  # its index tables hold what the kernel declares (`tile.tables`)
    by_name = dict(zip((a.name for a in sig.inputs), arrays))
    check_captured_values(where, module, by_name)  # a kernel built from score_mod / mask_mod: its arrays as traced,
    check_launch(where, module, bound)  # their reads in bounds
    check_lists_at_launch(where, module, bound, by_name)  # and its lists

    from tessera.interpreters.launch import prepare_arguments, run_grid

    arguments, bound = prepare_arguments(sig, arrays, named)
    kept = None if level == "tile" else _kept_lowering(where, module, pipeline, sig, bound)
    if kept is None and (level != "tile" or pipeline is not None):  # the variant for these sizes (`tile.specialize`)
        module = specialized(module, sig, bound)
    if level == "tile":
        if pipeline is not None:
            from tessera.passes import apply_pipeline

            module = module.clone()
            apply_pipeline(module, pipeline)
            if not kernel_functions(module):
                raise ValueError(f"{where}: at level 'tile' the pipeline must stay in Tile IR; '{pipeline}' lowers "
                                 "the kernel (use level='target' or 'ptx')")
            sig = _find_kernel(module, sig.name)  # the transformed kernel, not the one given
        if parallel is not None:
            serial_note(where, "the Tile IR interpreter runs the blocks vectorised, up to "
                               "64 in one NumPy call, in one process (workers apply to levels 'target' and 'ptx')")
        run_grid(sig, module, _in_key_order(sig, arguments), bound)
    elif level == "target":
        from tessera.interpreters.sm90.launch import run_target_kernel
        from tessera.regalloc import allocate_registers

        def allocated():
            target = _target_kernel(where, kept.module if kept else _lower(where, module, pipeline), sig.name)
            return target, allocate_registers(target)
        target, allocation = kept.derived(("target", sig.name), allocated) if kept else allocated()
        run_target_kernel(target, arguments, bound, allocation, workers=workers, executor=executor)
    elif kept is not None:  # its PTX printed once (the executor keeps the parsed text and its decoded program)
        from tessera.interpreters.ptx.printed import ptx_launcher

        text, host = kept.derived(("ptx", sig.name), lambda: _printed_ptx(kept.module, sig.name))
        ptx_launcher()(text, host, arguments, dict(bound), source=f"<ptx of @{sig.name}>", workers=workers,
                       executor=executor)
    else:
        from tessera.interpreters.ptx.printed import run_ptx

        run_ptx(_lower(where, module, pipeline), sig, arguments, bound, workers=workers, executor=executor)
    outputs = tuple(a for a, arg in zip(arguments, sig.args) if arg.role == "out")
    return outputs[0] if len(outputs) == 1 else outputs


def _kept_lowering(where: str, module: ModuleOp, pipeline: str | None, sig: KernelSignature | None = None,
                   bound=None):
    """The kept lowering (`tessera.lowering.kept`) of a kept module, as given (`sig` None) or its variant for the
    sizes `bound` of kernel `sig`, made by `_lower` where none is kept yet; None for a module no builder keeps
    (lowered by the caller, every call)."""
    from tessera.kernel_abi import specialization
    from tessera.lowering.kept import kept_lowering
    from tessera.passes import DEFAULT_PIPELINE

    if sig is None:  # as given: the variant of any launch where no kernel asks for a specialization
        variant = None if any(signature(k).specialize for k in kernel_functions(module)) else ()
    else:
        variant = tuple(sorted(specialization(sig, bound).items()))
    return kept_lowering(module, DEFAULT_PIPELINE if pipeline is None else pipeline, variant,
                         lambda: _lower(where, module if sig is None else specialized(module, sig, bound), pipeline))


def _printed_ptx(lowered: ModuleOp, kernel: str):
    """(the PTX text of `lowered`, the host description of its kernel `kernel`), as `run_ptx` launches them."""
    from tessera.host import describe
    from tessera.interpreters.ptx.printed import ptx_text

    text, printed = ptx_text(lowered)
    return text, next(h for h in describe(printed) if h.kernel == kernel)


def _in_key_order(sig: KernelSignature, arguments: list[np.ndarray]) -> list[np.ndarray]:
    """The arguments the Tile IR interpreter runs on: an input given in P8 key order (`tile.key_order`, the
    order the 8-bit P.V wgmma reads) back in its keys' own order, the order the Tile IR kernel computes in."""
    from tessera.sm90.fp8 import p8_key_positions

    return [np.ascontiguousarray(a[..., np.argsort(p8_key_positions(a.shape[-1]))]) if arg.key_order else a
            for a, arg in zip(arguments, sig.args)]


def _check_element_kinds(where: str, sig: KernelSignature, arrays: list[np.ndarray]) -> None:
    """Refuse floats for an integer input (a table of sequence starts or pages), and integers its type does not
    hold (an int64 label of 2^40): truncating or wrapping them would run the kernel on other numbers than the
    caller's."""
    from tessera.numerics import numpy_dtype

    for i, (arg, array) in enumerate(zip(sig.inputs, arrays)):
        wanted = numpy_dtype(arg.type.element_type)
        if wanted.kind in "iu" and array.dtype.kind not in "iu":
            raise TypeError(f"{where}: input {i} ({arg.name} of @{sig.name}) holds integers ({wanted}); got "
                            f"element type {array.dtype} (pass x.astype(np.int32))")
        if wanted.kind in "iu" and array.size and not np.can_cast(array.dtype, wanted):
            info = np.iinfo(wanted)
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                raise ValueError(f"{where}: input {i} ({arg.name} of @{sig.name}) holds {wanted} values, from "
                                 f"{info.min} to {info.max}; got {bad}")


def interpret(
    module: ModuleOp, *inputs: np.ndarray, level: str = "tile", kernel: str | None = None,
    pipeline: str | None = None, workers: int | None = None, executor=None, **sizes: int,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """`tessera.launch` in an interpreter, kept for compatibility: the same call with `level` defaulting to
    "tile" instead of the GPU. New code calls `tessera.launch(..., level=...)`."""
    check_choice("tessera.interpret", "level", level, LEVELS, "interpreter level")
    return run_interpreted("tessera.interpret", module, inputs, kernel, level, pipeline, sizes, workers, executor)
