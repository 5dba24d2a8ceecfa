"""Launching a Tile IR kernel over its grid in the interpreter.

The grid's blocks are run in batches (x fastest, then y, then z); each batch is one pass of the xDSL
interpreter over the kernel body with [B]-shaped program ids, so each tile op is one NumPy call for the
whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter

from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters.block_batch import BlockBatch
from tessera.interpreters.control import BatchedControlFunctions
from tessera.interpreters.tile import TileFunctions
from tessera.kernel_abi import KernelSignature
from tessera.numerics import numpy_dtype

MAX_BLOCKS_PER_BATCH = 64
"""Blocks interpreted together; bounds the interpreter's memory (each register tile is B times larger)."""


def prepare_arguments(
    sig: KernelSignature, inputs: Sequence[np.ndarray], sizes: Mapping[str, int] | None = None
) -> tuple[list[np.ndarray], dict[str, int]]:
    """Convert inputs to the kernel's element types (rounding), bind the named sizes (checking any given in
    `sizes` against the inputs) and allocate zeroed outputs and scratch buffers. Returns every argument in
    order, and the sizes."""
    arrays = [np.asarray(x) for x in inputs]
    bound = sig.sizes_from_inputs([a.shape for a in arrays])
    for name, value in (sizes or {}).items():
        if name not in bound:
            known = ", ".join(bound) or "none"
            raise ValueError(f"kernel @{sig.name} has no size named '{name}' (sizes: {known})")
        if bound[name] != value:
            raise ValueError(f"size {name}={value} contradicts the inputs, which give {name}={bound[name]}")
    converted = iter(arrays)
    arguments = []
    for arg in sig.args:
        dtype = numpy_dtype(arg.type.element_type)
        if arg.role == "in":
            arguments.append(np.ascontiguousarray(next(converted), dtype=dtype))
        else:
            arguments.append(np.zeros(arg.shape(bound), dtype))
    return arguments, bound


@single_threaded_blas()
def run_grid(sig: KernelSignature, module: ModuleOp, arguments: list[np.ndarray], sizes: Mapping[str, int],
             listeners: Callable[[BlockBatch], Sequence[Interpreter.Listener]] | None = None) -> None:
    """Run every block of the kernel's grid; outputs are written into `arguments` in place. `listeners`, if
    given, makes the interpreter listeners of each batch of blocks (`tessera.validate` records values). BLAS
    runs on one thread meanwhile (`tessera.interpreters.blas_threads`)."""
    gx, gy, gz = sig.grid_size(sizes)
    total = gx * gy * gz
    if total == 0:
        return
    linear = np.arange(total, dtype=np.int64)
    for start in range(0, total, MAX_BLOCKS_PER_BATCH):
        ids = linear[start : start + MAX_BLOCKS_PER_BATCH]
        batch = BlockBatch((ids % gx, (ids // gx) % gy, ids // (gx * gy)))
        interpreter = Interpreter(module, listeners=tuple(listeners(batch)) if listeners else ())
        interpreter.register_implementations(BatchedControlFunctions(batch))
        interpreter.register_implementations(TileFunctions(batch))
        interpreter.run_ssacfg_region(sig.op.body, tuple(arguments), sig.name)
