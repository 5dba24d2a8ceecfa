"""Launching a Tile IR kernel over its grid in the interpreter.

The grid's blocks are run in batches (x fastest, then y, then z); each batch is one pass of the xDSL
interpreter over the kernel body with [B]-shaped program ids, so each tile op is one NumPy call for the
whole batch. `order` permutes the blocks first (batches are then cut from the permuted list), which changes
the order in which `tile.atomic_add`s of different blocks reach memory. A kernel with semaphores
(`tile.sem_wait`) runs one block per thread instead, every block started in that order
(`tessera.interpreters.grid_sync`).

Before anything is allocated, `check_sizes` refuses, naming the limit, a grid past the driver's launch limits
(`facts.check_launch`) and arguments whose bytes exceed the simulators' memory budget
(`tessera.interpreters.limits`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter

from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters.block_batch import BlockBatch
from tessera.dialects import tile
from tessera.interpreters.control import BatchedControlFunctions
from tessera.interpreters.grid_sync import GridSync
from tessera.interpreters.limits import check_grid, check_memory
from tessera.interpreters.tile import TileFunctions
from tessera.interpreters.tile_cluster import cluster_order
from tessera.interpreters.grid_writes import GridWrites, summed_arguments
from tessera.cluster import launch_cluster
from tessera.kernel_abi import KernelSignature
from tessera.numerics import BF16, FP8_DTYPES, numpy_dtype, round_to, widened_dtype
from tessera.sm90 import facts

_BLOCK_ORDER: ContextVar[int | None] = ContextVar("tessera_block_order", default=None)


@contextmanager
def permuted_blocks(seed: int = 0) -> Iterator[None]:
    """In its scope, `run_grid` runs the blocks of a launch without an explicit `order` (and without clusters,
    whose blocks run together) in a seeded random permutation instead of x-fastest order: a GPU schedules
    blocks in any order, so a result must not depend on it (a write into another block's rows that the
    default order happens to overwrite later shows). A context variable, like `serving_checks.checking`."""
    token = _BLOCK_ORDER.set(seed)
    try:
        yield
    finally:
        _BLOCK_ORDER.reset(token)


MAX_BLOCKS_PER_BATCH = 64
"""Blocks interpreted together; bounds the interpreter's memory (each register tile is B times larger)."""


def check_sizes(sig: KernelSignature, sizes: Mapping[str, int], memory_budget: int | None = None,
                input_copies: int = 1) -> None:
    """Refuse, before allocating, a launch of `sig` with `sizes` whose grid exceeds the driver's launch limits
    or whose arguments (inputs counted `input_copies` times, e.g. 2 for generated inputs that are then
    converted; outputs and scratch once) need more host memory than `memory_budget`, or whose grid has more
    blocks than the interpreters run (`check_grid`): ValueError naming it."""
    facts.check_launch(sig.grid_size(sizes))
    parts = []
    for arg in sig.args:
        nbytes = numpy_dtype(arg.type.element_type).itemsize * math.prod(arg.shape(sizes))
        copies = input_copies if arg.role == "in" else 1
        parts.append((f"argument %{arg.name} ({arg.role}) of shape {list(arg.shape(sizes))}", copies * nbytes))
    check_memory(f"kernel @{sig.name}", parts, memory_budget)
    check_grid(f"kernel @{sig.name}", sig.grid_size(sizes), sizes, sig.launch_sizes)


def prepare_arguments(
    sig: KernelSignature, inputs: Sequence[np.ndarray], sizes: Mapping[str, int] | None = None,
    widen: bool = False,
) -> tuple[list[np.ndarray], dict[str, int]]:
    """Convert inputs to the kernel's element types (rounding), bind the named sizes (checking any given in
    `sizes` against the inputs; the kernel's launch sizes come from `sizes`) and allocate zeroed outputs and
    scratch buffers. With `widen`, float arguments are then held in float64 (the rounded inputs, exactly: the
    arguments of `run_grid(..., widen=True)`). Returns every argument in order, and the sizes."""
    arrays = [np.asarray(x) for x in inputs]
    bound = sig.sizes_from_inputs([a.shape for a in arrays], sizes)
    for name, value in (sizes or {}).items():
        if name not in bound:
            known = ", ".join(bound) or "none"
            raise ValueError(f"kernel @{sig.name} has no size named '{name}' (sizes: {known})")
        if bound[name] != value:
            raise ValueError(f"size {name}={value} contradicts the inputs, which give {name}={bound[name]}")
    check_sizes(sig, bound)
    converted = iter(arrays)
    arguments = []
    for arg in sig.args:
        dtype = numpy_dtype(arg.type.element_type)
        held = widened_dtype(arg.type.element_type) if widen else dtype
        if arg.role == "in":
            value = next(converted)
            if dtype in FP8_DTYPES or dtype == BF16:  # the 8-bit floats saturated as cvt.rn.satfinite would store
                value = round_to(np.asarray(value), dtype)  # them (NumPy's cast gives NaN); bf16 rounded once
            arguments.append(np.ascontiguousarray(np.asarray(value, dtype=dtype), dtype=held))
        else:
            arguments.append(np.zeros(arg.shape(bound), held))
    return arguments, bound


@single_threaded_blas()
def run_grid(sig: KernelSignature, module: ModuleOp, arguments: list[np.ndarray], sizes: Mapping[str, int],
             listeners: Callable[[BlockBatch], Sequence[Interpreter.Listener]] | None = None,
             order: Sequence[int] | None = None, widen: bool = False, writes: GridWrites | None = None) -> None:
    """Run every block of the kernel's grid; outputs are written into `arguments` in place. `listeners`, if
    given, makes the interpreter listeners of each batch of blocks (`tessera.validate` records values).
    `order`, if given, is a permutation of the linear block ids (x fastest, then y, then z) in which the
    blocks run. `widen` runs the kernel in float64 without rounding (`TileFunctions.widen`; the arguments
    from `prepare_arguments(..., widen=True)`). `writes`, if given, is the record of which block wrote each
    element (`GridWrites` of the grid, for a kernel without semaphores), kept for the caller. BLAS runs on one
    thread meanwhile (`tessera.interpreters.blas_threads`)."""
    gx, gy, gz = sig.grid_size(sizes)
    facts.check_launch((gx, gy, gz))
    total = gx * gy * gz
    cluster, _ = launch_cluster(sig.cluster, (gx, gy, gz))
    if order is None and _BLOCK_ORDER.get() is not None and math.prod(cluster) == 1:
        order = np.random.default_rng(_BLOCK_ORDER.get()).permutation(total)
    if order is None:
        ids = cluster_order((gx, gy, gz), cluster)
    else:
        if math.prod(cluster) > 1:
            raise ValueError(f"run_grid: @{sig.name} runs in clusters of {cluster}, whose blocks run together; "
                             "order= permutes single blocks")
        ids = np.asarray(order, dtype=np.int64)
        if ids.shape != (total,) or not np.array_equal(np.sort(ids), np.arange(total)):
            raise ValueError(f"run_grid: order must be a permutation of the {total} block ids of @{sig.name}")
    per_batch = MAX_BLOCKS_PER_BATCH - MAX_BLOCKS_PER_BATCH % math.prod(cluster)
    ordered = any(isinstance(op, tile.SemWaitOp | tile.SemSignalOp) for op in sig.op.walk())
    writes = None if ordered else writes or GridWrites((gx, gy, gz))  # semaphores may order two blocks' writes
    if writes is not None:
        writes.summed = frozenset(id(arguments[i]) for i in summed_arguments(sig))

    def run(chunk: np.ndarray, sync: GridSync | None = None) -> None:
        batch = BlockBatch((chunk % gx, (chunk // gx) % gy, chunk // (gx * gy)))
        interpreter = Interpreter(module, listeners=tuple(listeners(batch)) if listeners else ())
        interpreter.register_implementations(BatchedControlFunctions(batch))
        functions = TileFunctions(batch, cluster, widen)
        functions.sync = sync
        functions.arg_names = {id(array): arg.name for array, arg in zip(arguments, sig.args)}
        functions.writes, functions.block_ids = writes, chunk
        interpreter.register_implementations(functions)
        interpreter.run_ssacfg_region(sig.op.body, tuple(arguments), sig.name)

    if ordered:
        _run_threads(ids, run)
        return
    for start in range(0, total, per_batch):
        run(ids[start:start + per_batch])


def _run_threads(ids: np.ndarray, run: Callable[[np.ndarray, GridSync], None]) -> None:
    """Run each block in its own thread, all started in the order of `ids`; once every thread has ended, the
    first error (in time) of a block that did not merely give up waiting on a failed one is raised."""
    sync = GridSync(len(ids))
    errors: list[BaseException] = []

    def block(block_id: np.ndarray) -> None:
        try:
            run(block_id, sync)
        except BaseException as error:  # noqa: BLE001 - re-raised in the launching thread
            with sync.lock:
                errors.append(error)
            sync.finished(failed=True)
        else:
            sync.finished()

    threads = [threading.Thread(target=block, args=(ids[i:i + 1],), daemon=True) for i in range(len(ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:  # a wait given up because another block failed is not the error to report
        raise min(errors, key=lambda e: getattr(e, "secondary", False))
