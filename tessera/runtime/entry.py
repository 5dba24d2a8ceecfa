"""`tessera.launch`: the one entry point that runs any Tile IR kernel, on the GPU or in an interpreter.

It sits above both the API's interpreters (`tessera.api.run_interpreted`) and the GPU runtime
(`compiler.compile_module`, `launch.run`), so neither imports the other: the builders' entry points
(`tessera.attention`, `tessera.gemm`, serving, the backward) call it, and `tessera.interpret` is its
interpreter-only form.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera import api, ir
from tessera.arguments import check_array, check_module, check_string
from tessera.kernel_abi import KernelSignature
from tessera.passes import DEFAULT_PIPELINE
from tessera.runtime.compiler import CompiledKernel, compile_module
from tessera.runtime.driver import CudaUnavailable
from tessera.runtime.launch import check_inputs, run, usable_device
from tessera.runtime.variant_launch import check_compiled_launch
from tessera.runtime.no_backward import no_backward
from tessera.variants.index_ranges import check_launch
from tessera.variants.launch_lists import check_lists_at_launch
from tessera.variants.launch_values import check_captured_values


@no_backward("launch")
def launch(
    module: ModuleOp, *arrays: np.ndarray, kernel: str | None = None, level: str | None = None,
    pipeline: str | None = None, workers: int | None = None, executor=None, **sizes: int,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Run any Tile IR kernel of `module` over its whole grid on `arrays` (its inputs, in argument order) and
    return its outputs (one array, or a tuple in argument order). The one entry point for every kernel, a
    builder's (`tessera.attention` and `tessera.gemm` call it) or a user's.

    `level` (None or one of `LEVELS`):
    - None: on the GPU (needs cuda-bindings and the NVIDIA driver): the kernel is compiled with `pipeline` (default
      `passes.DEFAULT_PIPELINE`) through the kernel cache and launched by `tessera.runtime` with the grid,
      cluster, tensor maps and dynamic shared memory of its host description (`tessera.host`); NumPy arrays or
      PyTorch tensors. Without a usable GPU it raises `tessera.runtime.CudaUnavailable` naming `level=` as
      the CPU alternative;
    - "tile": the Tile IR interpreter; `pipeline`, if given, is applied first and must stay in Tile IR
      (e.g. "assign-swizzle,pipeline-loops{stages=3}");
    - "target": lower a copy with `pipeline` (default `passes.DEFAULT_PIPELINE`) and run the Target IR in the
      CTA simulator, checking the register allocation against a simulated register file;
    - "ptx": lower the same way, print the PTX and run the text in the PTX executor, launched from the same
      host description as on the GPU.
    A module a builder's entry point keeps (`tessera.lowering.kept.mark_kept`) is lowered and printed once per
    pipeline and launch variant, not on every call; any other module on every call.

    In the interpreters, inputs are NumPy arrays of real numbers (attention: Q, K, V as [batch, heads, seq,
    head_dim]; GEMM: A, B), converted to the kernel's element types (float inputs are rounded to bf16/f16 as
    the kernel would read them; an integer input, such as a sequence table, must be given as integers). Named
    sizes in `sizes` are checked against the inputs; a kernel's launch sizes (`tessera.kernel_abi`, e.g. the
    varlen kernels' max_seqlen_q) are given there too. Returns the outputs in their element types. A bad call
    raises TypeError/ValueError naming the parameter and the rule: the wrong number of arrays, a shape or
    rank the kernel's dims do not allow, masked, complex or boolean arrays, floats for an integer input.

    `workers` (processes on this machine) and `executor` (any `concurrent.futures.Executor`: a process pool, a
    Dask client's `get_executor()`) run the CTAs of levels "target" and "ptx" in parallel, with the serial
    run's results bit for bit and its first error (`tessera.interpreters.parallel`, docs/interpreters.md)."""
    where = "tessera.launch"
    if level is None and (workers is not None or executor is not None):
        raise ValueError(f"{where}: workers and executor run the interpreters' CTAs in parallel; pass level="
                         "'target' or 'ptx' (on the GPU the hardware runs the CTAs)")
    if isinstance(module, CompiledKernel):  # a kernel the runtime compiled (the builders' entry points)
        if level is not None or kernel is not None or pipeline is not None:
            raise ValueError(f"{where}: a compiled kernel runs on the GPU as compiled: level, kernel and pipeline "
                             "apply to a module")
        return _launch_gpu(where, module, None, arrays, None, sizes)
    if level is not None:
        return api.run_interpreted(where, module, arrays, kernel, level, pipeline, sizes, workers, executor)
    check_module(where, module)
    ir.verify(module)
    check_string(where, "kernel", kernel, optional=True)
    check_string(where, "pipeline", pipeline, optional=True)
    return _launch_gpu(where, module, api.find_kernel(module, kernel), arrays, pipeline, sizes)


def _launch_gpu(where: str, module, sig: KernelSignature | None, arrays, pipeline: str | None, sizes):
    """`launch` with level=None: compile (cached) and run on the GPU (`tessera.runtime`). `module` is a Tile IR
    module (kernel `sig`) or, with `sig` None, a `CompiledKernel`."""
    for i, x in enumerate(arrays):
        if getattr(x, "shape", None) is None:
            check_array(where, f"input {i}", x)  # the TypeError naming what it is
    if sig is not None:  # a wrong call fails before the GPU is asked
        bound = sig.sizes_from_inputs([tuple(x.shape) for x in arrays], sizes)
        sig.check_tables(where, arrays, bound)  # what the host can read of its index tables (`tile.tables`)
        by_name = dict(zip((a.name for a in sig.inputs), arrays))
        check_captured_values(where, module, by_name)  # a kernel built from score_mod / mask_mod: its arrays as
        check_launch(where, module, bound)  # traced, their reads in bounds
        check_lists_at_launch(where, module, bound, by_name)  # and its lists
    elif module.module is not None:  # compiled from such a module: its checks too (`variant_launch`)
        bound, _ = check_inputs(module.host, arrays, sizes)
        check_compiled_launch(where, module, arrays, bound)
    try:
        usable_device(arrays)  # no GPU, no compile; the message names level= as the CPU alternative
    except CudaUnavailable as error:
        raise CudaUnavailable(f"{where}: {error}") from None
    compiled = module if sig is None else compile_module(module, sig.name, pipeline or DEFAULT_PIPELINE)
    return run(compiled, *arrays, sizes=sizes or None)
